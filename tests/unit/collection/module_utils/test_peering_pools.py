"""A peering's node pools (plugins/module_utils/peering.py, validation.py): what the peering writes into the tenant's
ResourceOffer and the consumer's ForeignCluster, their removal, the checks that refuse a bad pool before any change,
check mode and diff, waiting for the pools' virtual nodes and un-peering them.
"""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils import validation
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    LABEL_TYPE,
    MAX_POOL_NAME,
    MAX_POOLS,
    virtual_node_name,
)
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, virtual_nodes

from tests.unit.collection.peering_fakes import (
    INSTALLED_CRDS,
    OFFER,
    FakeModule,
    clusters,
    node,
    params,
    tenant_credential,
)

FOREIGN = "c1: ForeignCluster catamaran-system/p1"
RESOURCE_OFFER_CRD = "resourceoffers.offloading.catamaran.io"
FOREIGN_CLUSTER_CRD = "foreignclusters.core.catamaran.io"


def module_pool(name, **given):
    """A pool as the module's body gets it from the argument spec: every option present, unset ones None or their
    default."""
    pool = {
        "name": name,
        "provider_node_selector": {},
        "provider_tolerations": [],
        "sharing_percentage": None,
        "node_labels": {},
        "node_taints": [],
        "cordon": None,
    }
    pool.update(given)
    return pool


def module_toleration(**given):
    return {"key": None, "operator": "Equal", "value": None, "effect": None, "toleration_seconds": None, **given}


REAL = module_pool(
    "real",
    provider_node_selector={"catamaran.io/lab-node-kind": "real"},
    provider_tolerations=[
        module_toleration(key="catamaran.io/lab-node-kind", value="real", effect="NoSchedule"),
    ],
    node_labels={"example.com/disk": "ssd"},
)
GPU = module_pool(
    "gpu",
    provider_node_selector={"example.com/gpu": "true"},
    sharing_percentage=50,
    node_taints=[{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}],
    cordon={"state": "drained", "reason": "driver upgrade"},
)


def pooled(**extra):
    return params(sharing_percentage=70, pools=[REAL, GPU], **extra)


# -- the specs written ---------------------------------------------------------------------------------------------


def test_the_offer_holds_each_pools_placement_share_and_cordon_in_the_order_given():
    spec = Peering(None, None, None, "c1", "p1").resource_offer(pooled())["spec"]
    assert spec["pools"] == [
        {
            "name": "real",
            "nodeSelector": {"catamaran.io/lab-node-kind": "real"},
            "tolerations": [
                {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
            ],
            "sharingPercentage": 70,  # unset: the peering's
        },
        {
            "name": "gpu",
            "nodeSelector": {"example.com/gpu": "true"},
            "sharingPercentage": 50,
            "cordon": {"drain": True, "reason": "driver upgrade"},
        },
    ]
    # The tenant's own terms stay as they are: a pool's placement is the pool's.
    assert "nodeSelector" not in spec
    assert spec["sharingPercentage"] == 70


def test_a_pool_without_a_share_of_its_own_takes_the_peerings_default():
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params(pools=[module_pool("a")]))["spec"]
    assert spec["pools"] == [{"name": "a", "sharingPercentage": 90}]


@pytest.mark.parametrize(
    ("cordon", "written"),
    [
        (None, None),
        ({"state": "uncordoned", "reason": "back"}, None),
        ({"state": "cordoned", "reason": None}, {"drain": False}),
        ({"state": "drained", "reason": "maintenance"}, {"drain": True, "reason": "maintenance"}),
    ],
)
def test_a_pools_cordon_is_written_as_the_tenants(cordon, written):
    offer = Peering(None, None, None, "c1", "p1").resource_offer(params(pools=[module_pool("a", cordon=cordon)]))
    (pool,) = offer["spec"]["pools"]
    assert pool.get("cordon") == written
    assert "cordon" not in offer["spec"]  # the tenant is not cordoned by its pool's cordon


def test_the_foreign_cluster_holds_each_pools_node_labels_and_taints():
    foreign = Peering(None, None, None, "c1", "p1").foreign_cluster(pooled(), {})
    assert foreign["spec"]["pools"] == [
        {"name": "real", "nodeLabels": {"example.com/disk": "ssd"}},
        {"name": "gpu", "nodeTaints": [{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}]},
    ]


@pytest.mark.parametrize("pools", [None, []])
def test_without_pools_neither_spec_has_the_field(pools):
    peering = Peering(None, None, None, "c1", "p1")
    assert "pools" not in peering.resource_offer(params(pools=pools))["spec"]
    assert "pools" not in peering.foreign_cluster(params(pools=pools), {})["spec"]


def test_the_peerings_virtual_nodes_are_its_pools_else_its_one_node():
    assert virtual_nodes("p1", pooled()) == ["catamaran-p1.real", "catamaran-p1.gpu"]
    assert virtual_nodes("p1", params(pools=[])) == ["catamaran-p1"]
    assert virtual_nodes("p1", params()) == ["catamaran-p1"]


# -- applied: the pools, their removal, check mode and diff ---------------------------------------------------------


def pool_clusters():
    return clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")], provider_objects=[tenant_credential()])


def stored_spec(cluster, api_version, kind, name, namespace):
    return cluster.get(api_version, kind, name, namespace)["spec"]


def offer_on(provider):
    api, namespace = "offloading.catamaran.io/v1alpha1", "catamaran-tenant-c1"
    return stored_spec(provider, api, "ResourceOffer", "resources", namespace)


def foreign_on(consumer):
    return stored_spec(consumer, "core.catamaran.io/v1alpha1", "ForeignCluster", "p1", "catamaran-system")


def test_pools_are_applied_and_dropping_the_option_removes_them_from_both_sides():
    consumer, provider = pool_clusters()
    Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").present(pooled())
    assert [pool["name"] for pool in offer_on(provider)["pools"]] == ["real", "gpu"]
    assert [pool["name"] for pool in foreign_on(consumer)["pools"]] == ["real", "gpu"]

    # One pool left: the other goes from both specs (a server-side apply of the whole spec by the one field manager).
    changes = Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").present(
        params(sharing_percentage=70, pools=[GPU])
    )
    assert changes.changed
    assert [pool["name"] for pool in offer_on(provider)["pools"]] == ["gpu"]
    assert [pool["name"] for pool in foreign_on(consumer)["pools"]] == ["gpu"]

    # No pools: the field itself goes, the specs are those of a peering that never had pools.
    changes = Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").present(
        params(sharing_percentage=70)
    )
    assert "pools" not in offer_on(provider)
    assert "pools" not in foreign_on(consumer)
    assert changes.before[OFFER]["spec"]["pools"][0]["name"] == "gpu"
    assert "pools" not in changes.after[OFFER]["spec"]
    assert "pools" not in changes.after[FOREIGN]["spec"]
    # And again: nothing to do.
    again = Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").present(params(sharing_percentage=70))
    assert not again.changed


def test_check_mode_shows_the_pools_in_the_diff_and_changes_nothing():
    consumer, provider = pool_clusters()
    Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").present(params(sharing_percentage=70))
    offer_before, foreign_before = offer_on(provider), foreign_on(consumer)

    plan = Peering(FakeModule(check_mode=True), consumer, provider, "c1", "p1").present(pooled())
    assert plan.changed
    assert f"update {OFFER}" in plan.actions
    assert f"update {FOREIGN}" in plan.actions
    assert "pools" not in plan.before[OFFER]["spec"]
    assert [pool["name"] for pool in plan.after[OFFER]["spec"]["pools"]] == ["real", "gpu"]
    assert plan.after[FOREIGN]["spec"]["pools"][0] == {"name": "real", "nodeLabels": {"example.com/disk": "ssd"}}
    assert offer_on(provider) == offer_before
    assert foreign_on(consumer) == foreign_before
    shown = plan.result()["diff"]
    assert shown["after"][OFFER]["spec"]["pools"][1]["cordon"] == {"drain": True, "reason": "driver upgrade"}


def without_pools_in_the_crd(cluster, crd_name):
    for version in cluster.crds[crd_name]["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("pools")


def test_an_upgrade_plan_writes_the_pools_once_the_crds_serve_them():
    """A check-mode run of an upgrade: the served CRDs are still the previous release's, which a dry run of
    spec.pools would fail against."""
    consumer, provider = pool_clusters()
    without_pools_in_the_crd(provider, RESOURCE_OFFER_CRD)
    without_pools_in_the_crd(consumer, FOREIGN_CLUSTER_CRD)
    plan = Peering(FakeModule(check_mode=True), consumer, provider, "c1", "p1").present(pooled())
    assert "pools" not in plan.after[OFFER]["spec"]
    assert "pools" not in plan.after[FOREIGN]["spec"]
    assert any("write the terms of the tenant's node pools (spec.pools) once" in action for action in plan.actions)
    awaited = "node pools' virtual nodes (spec.pools) once its ForeignCluster CRD"
    assert any(awaited in action for action in plan.actions)


@pytest.mark.parametrize(("side", "crd_name"), [("provider", RESOURCE_OFFER_CRD), ("consumer", FOREIGN_CLUSTER_CRD)])
def test_pools_a_served_crd_would_drop_are_refused_before_any_change(side, crd_name):
    consumer, provider = pool_clusters()
    without_pools_in_the_crd({"provider": provider, "consumer": consumer}[side], crd_name)
    stored = (dict(consumer.objects), dict(provider.objects))
    label = {"provider": "p1", "consumer": "c1"}[side]
    with pytest.raises(InvalidInput, match=rf"^{label}: its CRD {crd_name} has no spec.pools, so the pools real, gpu"):
        Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").present(pooled())
    assert (consumer.objects, provider.objects) == stored


def test_the_pools_fit_the_crds():
    """The limits the module checks are those of the CRDs, which hold the same list in both."""
    for crd in INSTALLED_CRDS:
        if crd["metadata"]["name"] not in (RESOURCE_OFFER_CRD, FOREIGN_CLUSTER_CRD):
            continue
        for version in crd["spec"]["versions"]:
            pools = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["pools"]
            assert pools["maxItems"] == MAX_POOLS
            assert pools["items"]["properties"]["name"]["maxLength"] == MAX_POOL_NAME
            assert pools["items"]["properties"]["name"]["pattern"] == validation.DNS1123_LABEL.pattern
            if crd["metadata"]["name"] == RESOURCE_OFFER_CRD:
                assert pools["items"]["properties"]["tolerations"]["maxItems"] == validation.MAX_TOLERATIONS
                reason = pools["items"]["properties"]["cordon"]["properties"]["reason"]
                assert reason["maxLength"] == validation.MAX_CORDON_REASON


# -- refused before any change --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ([module_pool("GPU")], r"^pools\[0\]\.name: 'GPU' is not a pool name \(a DNS-1123 label"),
        ([module_pool("gpu-")], r"^pools\[0\]\.name: 'gpu-' is not a pool name"),
        ([module_pool("a.b")], r"^pools\[0\]\.name: 'a.b' is not a pool name"),
        ([module_pool("x" * 21)], r"^pools\[0\]\.name: 'x{21}' is not a pool name .* at most 20 characters"),
        ([module_pool(None)], r"^pools\[0\]: a pool needs a name"),
        (
            [module_pool("a"), module_pool("b"), module_pool("a")],
            r"^pools\[2\]: pool a is listed before, as pools\[0\]",
        ),
        ([module_pool(f"p{n}") for n in range(17)], r"^pools: at most 16 pools per peering, got 17"),
        ([{"name": "a", "gpus": 1}], r"^pools\[0\]: unknown gpus \(allowed: name, provider_node_selector"),
        (["a"], r"^pools\[0\] must be a mapping with a name, got 'a'"),
        ({"name": "a"}, r"^pools must be a list of pools"),
        (
            [module_pool("a", sharing_percentage=0)],
            r"^pools\[0\] \(pool a\)\.sharing_percentage must be an integer from 1 to 100, got 0",
        ),
        ([module_pool("a", sharing_percentage=101)], r"sharing_percentage must be an integer from 1 to 100, got 101"),
        (
            [module_pool("a", provider_node_selector={"bad key!": "x"})],
            r"^pools\[0\] \(pool a\)\.provider_node_selector: label key 'bad key!'",
        ),
        (
            [module_pool("a", provider_tolerations=[module_toleration(operator="Equal")])],
            r"^pools\[0\] \(pool a\)\.provider_tolerations\[0\]: operator Equal needs a key",
        ),
        (
            [module_pool("a", provider_tolerations=[module_toleration(key="k", operator="Exists", value="v")])],
            r"provider_tolerations\[0\]: operator Exists takes no value",
        ),
        (
            [module_pool("a", provider_tolerations=[module_toleration(key="k")] * 33)],
            r"^pools\[0\] \(pool a\)\.provider_tolerations: at most 32 tolerations, got 33",
        ),
        ([module_pool("a", node_labels={"tier": "-gold"})], r"^pools\[0\] \(pool a\)\.node_labels\.tier: label value"),
        (
            [module_pool("a", node_labels={"catamaran.io/pool": "b"})],
            r"node_labels: the virtual kubelet sets the label catamaran.io/pool=a itself",
        ),
        (
            [module_pool("a", node_taints=[{"key": "k", "effect": "NoSchedule"}] * 2)],
            r"^pools\[0\] \(pool a\)\.node_taints\[1\]: a taint with key k and effect NoSchedule is listed before",
        ),
        (
            [module_pool("a", node_taints=[{"key": "virtual-node.catamaran.io/not-allowed", "effect": "NoExecute"}])],
            r"node_taints\[0\]: the virtual kubelet sets the taint virtual-node.catamaran.io/not-allowed itself",
        ),
        (
            [module_pool("a", cordon={"state": "paused", "reason": None})],
            r"^pools\[0\] \(pool a\)\.cordon\.state: 'paused' is not one of cordoned, drained, uncordoned",
        ),
        (
            [module_pool("a", cordon={"state": "cordoned", "reason": "x" * 257})],
            r"^pools\[0\] \(pool a\)\.cordon\.reason: at most 256 characters",
        ),
    ],
)
def test_a_bad_pool_is_refused_naming_it(pools, message):
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(params(pools=pools))


def test_a_pools_virtual_node_name_must_fit_a_hostname_label():
    provider = "p" * 40  # catamaran-<40>. leaves 12 characters for the pool's name
    fits = virtual_node_name(provider, "x" * 12)
    assert len(fits) == 63
    Peering.validate(params(provider_id=provider, pools=[module_pool("x" * 12)]))
    with pytest.raises(
        InvalidInput,
        match=rf"^pools\[1\] \(pool y{{13}}\): the pool's virtual node catamaran-p{{40}}\.y{{13}} would have 64 "
        rf"characters, more than the 63 of a kubernetes.io/hostname label \(with provider {provider}, a pool name of "
        r"at most 12 characters fits\)",
    ):
        Peering.validate(params(provider_id=provider, pools=[module_pool("x" * 12), module_pool("y" * 13)]))


def test_sixteen_pools_of_twenty_characters_pass():
    pools = [module_pool(f"pool-{n:02d}".ljust(MAX_POOL_NAME, "x")) for n in range(MAX_POOLS)]
    Peering.validate(params(pools=pools))
    assert len(Peering(None, None, None, "c1", "p1").resource_offer(params(pools=pools))["spec"]["pools"]) == 16


# -- waiting for the pools' nodes, and un-peering them ---------------------------------------------------------------


def virtual_node(name, ready=True, provider="p1"):
    obj = node(name, virtual=True)
    obj["metadata"]["labels"]["catamaran.io/remote-cluster-id"] = provider
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return obj


def pod(name, node_name):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"nodeName": node_name},
    }


def test_waiting_for_a_peering_with_pools_waits_for_each_pools_node():
    consumer, provider = clusters(consumer_nodes=[virtual_node("catamaran-p1.real"), virtual_node("catamaran-p1.gpu")])
    peering = Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1")
    # No pool-less node exists: waiting for it would time out.
    assert peering.wait_ready(5, nodes=virtual_nodes("p1", pooled()))
    consumer.objects[("v1", "Node", None, "catamaran-p1.gpu")] = virtual_node("catamaran-p1.gpu", ready=False)
    with pytest.raises(InvalidInput, match=r"^c1: virtual node catamaran-p1\.gpu is not Ready after 5s"):
        peering.wait_ready(5, nodes=virtual_nodes("p1", pooled()))
    with pytest.raises(InvalidInput, match=r"^c1: virtual node catamaran-p1 is not Ready after 5s"):
        peering.wait_ready(5)


def lease(name):
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
    }


def unpeering_clusters():
    nodes = [
        virtual_node("catamaran-p1"),
        virtual_node("catamaran-p1.real"),
        virtual_node("catamaran-p1.gpu"),
        virtual_node("catamaran-p10.real", provider="p10"),  # another provider's pool: same prefix, no dot after p1
    ]
    pods = [pod("on-real", "catamaran-p1.real"), pod("on-gpu", "catamaran-p1.gpu"), pod("on-p10", "catamaran-p10.real")]
    leases = [lease("catamaran-p1.gpu"), lease("catamaran-p10.real")]
    return clusters(consumer_nodes=nodes + pods + leases, provider_objects=[tenant_credential()])


def test_un_peering_cordons_and_drains_every_node_of_the_peering_and_no_other():
    consumer, provider = unpeering_clusters()
    plan, _forced, _not_cleaned = Peering(FakeModule(check_mode=True), consumer, provider, "c1", "p1").absent(5, 5)
    assert {action for action in plan.actions if "Node" in action} == {
        "patch c1: Node catamaran-p1",
        "patch c1: Node catamaran-p1.gpu",
        "patch c1: Node catamaran-p1.real",
    }
    assert {action for action in plan.actions if "Pod" in action} == {
        "delete c1: Pod demo/on-real",
        "delete c1: Pod demo/on-gpu",
    }
    assert plan.after["c1: Node catamaran-p1.gpu"]["spec"]["unschedulable"] is True
    assert consumer.get("v1", "Pod", "on-gpu", "demo") is not None  # check mode: nothing done


def test_un_peering_deletes_the_pool_nodes_no_virtual_kubelet_removed():
    consumer, provider = unpeering_clusters()
    _changes, forced, _not_cleaned = Peering(FakeModule(check_mode=False), consumer, provider, "c1", "p1").absent(5, 5)
    assert forced == [
        "deleted virtual node catamaran-p1 (no virtual kubelet removed it)",
        "deleted virtual node catamaran-p1.gpu (no virtual kubelet removed it)",
        "deleted virtual node catamaran-p1.real (no virtual kubelet removed it)",
    ]
    left = sorted(name for (_api, kind, _ns, name) in consumer.objects if kind in ("Node", "Pod", "Lease"))
    assert left == ["catamaran-p10.real", "catamaran-p10.real", "on-p10"]  # the other provider's node, Lease, pod
    assert ("Lease", "catamaran-p1.gpu") in consumer.deleted


def test_un_peering_takes_for_a_pools_node_only_a_virtual_node_of_the_peering():
    consumer, _provider = unpeering_clusters()
    consumer.objects[("v1", "Node", None, "catamaran-p1.real")]["metadata"]["labels"].pop(LABEL_TYPE)
    peering = Peering(FakeModule(check_mode=True), consumer, None, "c1", "p1")
    names = [n["metadata"]["name"] for n in peering._live_virtual_nodes()]
    # A real node that merely has the name is not taken for a pool's; the pool-less node is found by name.
    assert names == ["catamaran-p1", "catamaran-p1.gpu"]
