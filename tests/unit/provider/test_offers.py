"""The provider's ResourceOffer (provider/offers.py): what it counts, its placement, the tenant's default terms, its
node pools' terms and status."""

from __future__ import annotations

from fractions import Fraction

from lightkube.resources.core_v1 import Node, Pod

from catamaran import quantities
from catamaran.constants import DEFAULT_POD_SECURITY_LEVEL, DEFAULT_SHARING_PERCENTAGE, RESOURCE_OFFER_NAME
from catamaran.kube.resources import ResourceOffer
from catamaran.provider.offers import NodeSummary, Placement, PodSummary, PoolTerms, TenantTerms, offer_status
from tests.unit.fakes.offloading import CONSUMER, TENANT, TWIN, run
from tests.unit.provider.placements import placement
from tests.unit.provider.pools import (
    GPU_POOL,
    GPU_TOLERATION,
    OFFER,
    SMALL_POOL,
    pool_world,
    provider_pod,
    requesting,
    running_pod,
    shadow_of_pool,
)


def summary(node, tenant=None, cpu="1"):
    return PodSummary(node=node, tenant=tenant, requests={"cpu": quantities.parse(cpu)})


def test_offer_ignores_the_tenants_own_pods_and_unschedulable_nodes():
    nodes = {
        (None, "a"): NodeSummary(True, {"cpu": "4", "pods": "10"}, ("10.1.1.0/24",), frozenset()),
        (None, "b"): NodeSummary(False, {"cpu": "100"}, ("10.1.2.0/24",), frozenset()),
    }
    pods = {
        ("x", "mine"): summary("a", tenant="consumer", cpu="2"),
        ("x", "other"): summary("a", tenant=None, cpu="1"),
        ("x", "elsewhere"): summary("b", tenant=None, cpu="50"),
    }
    status = offer_status(nodes, pods, "consumer")
    assert status["free"] == {"cpu": "3", "pods": "10"}
    assert status["nodes"] == 1
    assert status["podCIDRs"] == ["10.1.0.0/22"]


def test_pressure_is_reported_only_when_every_node_has_it():
    nodes = {
        (None, "a"): NodeSummary(True, {"cpu": "1"}, (), frozenset({"MemoryPressure", "DiskPressure"})),
        (None, "b"): NodeSummary(True, {"cpu": "1"}, (), frozenset({"MemoryPressure"})),
    }
    assert offer_status(nodes, {}, "t")["pressure"] == ["MemoryPressure"]


REAL = (("catamaran.io/lab-node-kind", "real"),)
REAL_TAINT = ("catamaran.io/lab-node-kind", "real", "NoSchedule")


def test_placement_admits_nodes_it_selects_and_whose_taints_it_tolerates():
    tainted_real = NodeSummary(True, {"cpu": "2"}, (), frozenset(), REAL, (REAL_TAINT,))
    plain = NodeSummary(True, {"cpu": "8"}, (), frozenset(), (("other", "x"),), ())
    real_only = placement({"catamaran.io/lab-node-kind": "real"})
    assert not real_only.admits(tainted_real), "the taint is not tolerated"
    assert not real_only.admits(plain)
    exact = {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    assert placement({"catamaran.io/lab-node-kind": "real"}, [exact]).admits(tainted_real)
    assert placement(tolerations=[{"operator": "Exists"}]).admits(tainted_real)
    assert not placement(tolerations=[{**exact, "effect": "NoExecute"}]).admits(tainted_real)
    assert Placement().admits(plain)
    assert not Placement().admits(tainted_real), "an empty placement keeps off tainted nodes, as before"


def test_offer_counts_only_the_nodes_the_placement_admits():
    nodes = {
        (None, "real"): NodeSummary(True, {"cpu": "2", "pods": "110"}, ("10.1.255.0/24",), frozenset(), REAL),
        (None, "fake"): NodeSummary(True, {"cpu": "8", "pods": "110"}, ("10.1.1.0/24",), frozenset(), ()),
    }
    status = offer_status(nodes, {}, "t", placement({"catamaran.io/lab-node-kind": "real"}))
    assert status["free"]["cpu"] == "2"
    assert status["nodes"] == 1
    assert offer_status(nodes, {}, "t")["free"]["cpu"] == "10"


def test_terms_default_to_restricted_and_the_default_share():
    terms = TenantTerms.from_offer_spec({"clusterID": "p"})
    assert (terms.pod_security, terms.sharing_percentage) == (DEFAULT_POD_SECURITY_LEVEL, DEFAULT_SHARING_PERCENTAGE)
    assert terms == TenantTerms()
    given = TenantTerms.from_offer_spec(
        {"podSecurity": "privileged", "sharingPercentage": 50, "nodeSelector": {"k": "v"}}
    )
    assert (given.pod_security, given.sharing_percentage, given.placement) == (
        "privileged",
        50,
        Placement(node_selector=(("k", "v"),)),
    )


def test_a_pools_terms_come_from_its_entry_its_share_defaulting_to_the_tenants():
    terms = TenantTerms.from_offer_spec(
        {
            **OFFER,
            "pools": [GPU_POOL, {**SMALL_POOL, "cordon": {"reason": "disk swap", "drain": True}}, {"name": "gpu"}],
        }
    )
    assert [p.name for p in terms.pools] == ["gpu", "small"], "a name's first entry only"
    assert terms.pool("gpu") == PoolTerms(
        name="gpu", placement=placement({"pool": "gpu"}, [GPU_TOLERATION]), sharing_percentage=50
    )
    assert terms.pool("small") == PoolTerms(
        name="small",
        placement=placement({"pool": "small"}),
        sharing_percentage=80,  # the tenant's, not the default
        cordoned=True,
        cordon_reason="disk swap",
    )
    assert terms.pool("tpu") is None
    assert TenantTerms.from_offer_spec({"clusterID": "p"}).pools == ()
    assert TenantTerms.from_offer_spec({"pools": [{"name": "a", "cordon": {}}]}).pool("a").cordoned


GPU_POOL_STATUS = {
    "name": "gpu",
    # gpu-1 and gpu-2; a provider pod on gpu-1 takes its part, the tenant's own pods (of any pool) do not.
    "free": {
        "cpu": "9750m",
        "ephemeral-storage": "214748364800",
        "example.com/gpu": "2",
        "memory": "51539607552",
        "pods": "220",
    },
    "allocatable": {
        "cpu": "11",
        "ephemeral-storage": "214748364800",
        "example.com/gpu": "3",
        "memory": "51539607552",
        "pods": "220",
    },
    "nodes": 2,
    "pressure": [],
    # 50 %, rounded down: 1.5 GPUs are 1, 5.5 CPUs 5500m.
    "quota": {
        "cpu": "5500m",
        "ephemeral-storage": "107374182400",
        "example.com/gpu": "1",
        "memory": "25769803776",
        "pods": "110",
    },
    # Its pod's requests after the terms' container defaults (memory 128Mi, ephemeral-storage 256Mi).
    "used": {"cpu": "2", "ephemeral-storage": "268435456", "example.com/gpu": "1", "memory": "134217728", "pods": "1"},
}
SMALL_POOL_STATUS = {
    "name": "small",
    "free": {"cpu": "2500m", "ephemeral-storage": "107374182400", "memory": "4294967296", "pods": "50"},
    "allocatable": {"cpu": "2500m", "ephemeral-storage": "107374182400", "memory": "4294967296", "pods": "50"},
    "nodes": 1,
    "pressure": [],
    # The tenant's 80 %: 4Gi * 0.8 = 3435973836.8 bytes, rounded down.
    "quota": {"cpu": "2", "ephemeral-storage": "85899345920", "memory": "3435973836", "pods": "40"},
    "used": {"cpu": "0", "ephemeral-storage": "0", "memory": "0", "pods": "0"},
}


def _offer_status(world) -> dict:
    return world.cluster.read(ResourceOffer, RESOURCE_OFFER_NAME, TENANT)["status"]


def test_each_pool_is_published_as_the_tenant_is_for_its_placement_and_its_bucket():
    """status.pools: free, allocatable, nodes and pressure of the nodes the pool's placement admits, its quota and
    what its pods use; the tenant-level fields stay the tenant's own placement and bucket."""

    async def scenario():
        world = pool_world()
        world.cluster.add(Pod, provider_pod("system", "gpu-1", {"cpu": "1250m", "example.com/gpu": "1"}))
        train = shadow_of_pool("gpu", "train", containers=[requesting({"cpu": "2", "example.com/gpu": "1"})])
        world.cluster.add(Pod, running_pod(train, "gpu", "gpu-1"))
        db = shadow_of_pool(None, "db", containers=[requesting({"cpu": "1"})])
        world.cluster.add(Pod, running_pod(db, None, "provider-worker"))
        await world.start()
        await world.offers.reconcile(TENANT)
        await world.settle()
        first = _offer_status(world)
        patches = len(world.cluster.requests("patch", ResourceOffer.Status))
        await world.offers.reconcile(TENANT)  # nothing changed: nothing written
        await world.settle()
        again = len(world.cluster.requests("patch", ResourceOffer.Status))

        await world.cluster.client().delete(Pod, "train", namespace=train["metadata"]["namespace"], grace_period=0)
        await world.settle()
        await world.offers.reconcile(TENANT)
        await world.settle()
        freed = _offer_status(world)

        offer = {**OFFER, "pools": [SMALL_POOL]}  # the gpu pool taken back: the list is written whole
        world.cluster.update(ResourceOffer, RESOURCE_OFFER_NAME, TENANT, lambda o: o.update(spec=offer))
        await world.settle()
        await world.offers.reconcile(TENANT)
        await world.settle()
        return world, first, patches, again, freed, _offer_status(world)

    world, first, patches, again, freed, fewer = run(scenario)
    assert first["pools"] == [GPU_POOL_STATUS, SMALL_POOL_STATUS]
    # The tenant's own: the worker alone (80 % of 4 CPUs), its one pod of no pool.
    assert (first["nodes"], first["free"]["cpu"], first["quota"]["cpu"]) == (1, "4", "3200m")
    assert first["used"] == {"cpu": "1", "ephemeral-storage": "268435456", "memory": "134217728", "pods": "1"}
    assert again == patches
    assert freed["pools"][0]["used"] == {
        "cpu": "0",
        "ephemeral-storage": "0",
        "example.com/gpu": "0",
        "memory": "0",
        "pods": "0",
    }
    assert freed["used"]["cpu"] == "1"
    assert fewer["pools"] == [SMALL_POOL_STATUS]
    assert world.offers.quota(TENANT, "gpu") == {}, "a pool no longer lent has no quota"


def test_a_pools_quota_follows_its_terms_and_its_nodes():
    async def scenario():
        world = await pool_world().start()
        before = world.offers.quota(TENANT, "gpu")
        offer = {**OFFER, "pools": [{**GPU_POOL, "sharingPercentage": 100}, SMALL_POOL]}
        world.cluster.update(ResourceOffer, RESOURCE_OFFER_NAME, TENANT, lambda o: o.update(spec=offer))
        await world.settle()
        raised = world.offers.quota(TENANT, "gpu")
        world.cluster.update(Node, "gpu-2", None, lambda n: n["spec"].update(unschedulable=True))
        await world.settle()
        return before, raised, world.offers.quota(TENANT, "gpu"), world.offers.quota(TENANT)

    before, raised, one_node, own = run(scenario)
    assert (before["example.com/gpu"], raised["example.com/gpu"], one_node["example.com/gpu"]) == (1, 3, 2)
    assert one_node["cpu"] == 8
    assert own["cpu"] == Fraction(16, 5), "the tenant's own quota is 80 % of its worker, whatever its pools"


def test_the_usage_of_a_pool_falling_may_admit_the_tenants_refused_pods():
    async def scenario():
        world = pool_world()
        train = shadow_of_pool("gpu", "train", containers=[requesting({"cpu": "1"})])
        world.cluster.add(Pod, running_pod(train, "gpu", "gpu-1"))
        serve = shadow_of_pool("gpu", "serve", containers=[requesting({"cpu": "1"})])
        world.cluster.add(Pod, running_pod(serve, "gpu", "gpu-2"))
        await world.start()
        told: list = []
        world.offers.on_admission_may_change(told.append)
        await world.cluster.client().delete(Pod, "train", namespace=TWIN, grace_period=0)
        await world.settle()
        deleted = list(told)
        # A pod taken out of its pool (a provider admin's relabelling) leaves the pool's bucket too.
        world.cluster.update(Pod, "serve", TWIN, lambda pod: pod["metadata"]["labels"].pop("catamaran.io/pool"))
        await world.settle()
        return deleted, told[len(deleted) :], world.offers.ledger.used(CONSUMER, pool="gpu")

    deleted, relabelled, left = run(scenario)
    assert (deleted, relabelled, left) == ([CONSUMER], [CONSUMER], {})


def test_a_pod_is_summarized_with_its_pool():
    from catamaran.provider.offers import summarize_pod

    pod = running_pod(shadow_of_pool("gpu", containers=[requesting({"cpu": "1"})]), "gpu", "gpu-1")
    found = summarize_pod(pod)
    assert (found.node, found.tenant, found.requests["cpu"], found.pool) == ("gpu-1", CONSUMER, 1, "gpu")
    pod["metadata"]["labels"].pop("catamaran.io/pool")
    assert summarize_pod(pod).pool is None


def test_a_pods_status_report_costs_the_ledger_nothing_unless_a_reservation_waits_on_it():
    async def scenario():
        world = pool_world()
        train = shadow_of_pool("gpu", "train", containers=[requesting({"cpu": "1"})])
        world.cluster.add(Pod, running_pod(train, "gpu", "gpu-1"))
        await world.start()
        ledger = world.offers.ledger
        observed: list = []
        observe = ledger.observe
        ledger.observe = lambda key, *args: (observed.append(key[1]), observe(key, *args))

        async def report(ip: str) -> None:
            world.cluster.update(Pod, "train", TWIN, lambda pod: pod["status"].update(podIP=ip))
            await world.settle()

        await report("10.0.0.1")
        quiet = list(observed)
        # The same pod admitted again (made again after its deletion, say): its next report settles the reservation.
        requests = world.offers.pods.get(TWIN, "train").requests
        room = {resource: 10**12 for resource in (*requests, "pods")}
        assert ledger.admit((TWIN, "train"), CONSUMER, requests, room, pool="gpu") == []
        await report("10.0.0.2")
        return quiet, observed[len(quiet) :], ledger.reserves((TWIN, "train")), ledger.used(CONSUMER, pool="gpu")

    quiet, settling, waits, used = run(scenario)
    assert (quiet, settling, waits) == ([], ["train"], False)
    assert (used["cpu"], used["pods"]) == (1, 1)  # the pod once, not with its reservation besides
