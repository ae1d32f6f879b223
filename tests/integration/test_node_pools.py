"""Node pools: provider cluster-2 lends consumer cluster-1 two pools, its real node (`real`) and its kwok nodes
(`fake`, one with an nvidia.com/gpu), written as the peering module writes them (the provider's ResourceOffer
spec.pools, the consumer's ForeignCluster spec.pools; the module's and the inventory's part is unit-tested):

  - each pool is a virtual node of its own, with its own capacity from the nodes its placement admits (the GPU only
    on the kwok pool's, its own share), its consumer-side labels and taints; the pool-less node goes;
  - a pod pinned to a pool (nodeSelector catamaran.io/pool) runs remotely on that pool's provider nodes only, a real
    container on the real node, a GPU pod on the kwok node with the GPU; the offer's status.pools counts each;
  - a pool cordoned: its node tainted and saying why, a pod bound there anyway refused (PoolCordoned, on both
    sides); drained: its pods evicted on the consumer, a PodDisruptionBudget holding one (ProviderDrainBlocked);
    uncordoned: all returns, the other pool untouched throughout;
  - a pool removed from the offer: its node cordoned, its pods evicted, then the node and its Lease deleted;
  - with the tenant's own credential, a ShadowPod naming a pool not lent gets no pod (PoolNotOffered), and one whose
    pod template claims another pool than its own is placed and counted in its own.
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import (
    LABEL_POOL,
    RESOURCE_OFFER_NAME,
    VIRTUAL_NODE_TAINT_KEY,
    tenant_namespace,
    virtual_node_name,
)
from catamaran_lab.config import NODE_KIND_LABEL

from . import federation
from .lab_access import get_json, require_real_node, wait_for
from .manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, container, deployment, restricted_busybox

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NAMESPACE = "pools"
TWIN = f"{NAMESPACE}-{CONSUMER}"
REAL, FAKE = virtual_node_name(PROVIDER, "real"), virtual_node_name(PROVIDER, "fake")
GPU = "nvidia.com/gpu"  # the lab's cluster-2 has one, on its first kwok node
CORDON_TAINT = "catamaran.io/provider-cordoned"
REASON = "GPU firmware update"
POOLS = [
    {
        "name": "real",
        "nodeSelector": REAL_NODE_SELECTOR,
        "tolerations": [REAL_NODE_TOLERATION],
        "sharingPercentage": 50,
    },
    {"name": "fake", "nodeSelector": {NODE_KIND_LABEL: "fake"}, "sharingPercentage": 100},
]
# The consumer's side: the kwok pool's node tainted, so only pods that ask for it land there.
FAKE_TAINT = {"key": "example.com/accelerated", "value": "true", "effect": "NoSchedule"}
# Both pools taken (a pool has a node only when both sides list it), the kwok pool's node labelled and tainted.
CONSUMER_POOLS = [
    {"name": "real"},
    {"name": "fake", "nodeLabels": {"example.com/accelerator": "gpu"}, "nodeTaints": [FAKE_TAINT]},
]


def lend(lab, pools: list[dict]) -> None:
    """The provider's pools in the tenant's ResourceOffer, by their own field manager (as the peering module sets
    them); none: the peering without pools."""
    federation.grant_terms(lab, CONSUMER, PROVIDER, field_manager="pools", **({"pools": pools} if pools else {}))


@pytest.fixture(scope="module")
def pooled(lab, lab_config_in_use):
    require_real_node(lab_config_in_use.cluster(PROVIDER))
    with federation.one_real_peering(lab, CONSUMER, PROVIDER, NAMESPACE, pools=CONSUMER_POOLS):
        try:
            lend(lab, POOLS)
            for name in (REAL, FAKE):
                wait_for(lambda n=name: federation.node_ready(lab, CONSUMER, n) == "True", what=f"{name} Ready")
            yield
        finally:
            lend(lab, [])  # the peering's one node again, for the processes' own clean-up
            wait_for(
                lambda: federation.node_ready(lab, CONSUMER, virtual_node_name(PROVIDER)) == "True",
                timeout=90,
                what="the pool-less node back once the pools go",
            )


def node(lab, name: str) -> dict:
    return get_json(lab, CONSUMER, "node", name)


def provider_nodes(lab) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in get_json(lab, PROVIDER, "nodes")["items"]}


def pods(lab) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in get_json(lab, CONSUMER, "pods", "-n", NAMESPACE)["items"]}


def remote(lab, name: str) -> dict | None:
    result = lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def running(pod: dict | None) -> bool:
    return bool(pod) and pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def apply(lab, *objects: dict) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(body))


def to_pool(pool: str) -> dict:
    """Pod spec fields that pin a pod to a pool's virtual node (and tolerate what that node carries)."""
    tolerations = [{"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}]
    if pool == "fake":
        tolerations.append({**FAKE_TAINT, "operator": "Equal"})
    return {"nodeSelector": {LABEL_POOL: pool}, "tolerations": tolerations}


def offer_pools(lab) -> dict[str, dict]:
    offer = get_json(lab, PROVIDER, "resourceoffer", "-n", tenant_namespace(CONSUMER), RESOURCE_OFFER_NAME)
    return {p["name"]: p for p in (offer.get("status") or {}).get("pools") or []}


def events(lab, reason: str) -> list[dict]:
    return get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", f"reason={reason}")["items"]


def test_each_pool_is_a_virtual_node_with_its_own_capacity_labels_and_taints(lab, pooled):
    real, fake = node(lab, REAL), node(lab, FAKE)
    assert real["metadata"]["labels"][LABEL_POOL] == "real"
    assert fake["metadata"]["labels"][LABEL_POOL] == "fake"
    assert fake["metadata"]["labels"]["example.com/accelerator"] == "gpu"
    assert "example.com/accelerator" not in real["metadata"]["labels"]
    assert FAKE_TAINT["key"] in [t["key"] for t in fake["spec"]["taints"]]
    assert FAKE_TAINT["key"] not in [t["key"] for t in real["spec"]["taints"]]
    # The pool-less node is gone: the peering's nodes are its pools.
    wait_for(
        lambda: lab.kubectl(CONSUMER, "get", "node", virtual_node_name(PROVIDER), check=False).returncode != 0,
        what="the pool-less node deleted once the provider lends pools",
    )
    # Capacity from the nodes each placement admits: the GPU only in the kwok pool (100 % of one), each its share.
    assert fake["status"]["capacity"].get(GPU) == "1", fake["status"]["capacity"]
    assert GPU not in real["status"]["capacity"]
    provider = provider_nodes(lab)
    real_nodes = [n for n in provider.values() if n["metadata"]["labels"].get(NODE_KIND_LABEL) == "real"]
    fake_nodes = [n for n in provider.values() if n["metadata"]["labels"].get(NODE_KIND_LABEL) == "fake"]
    offered = offer_pools(lab)
    assert (offered["real"]["nodes"], offered["fake"]["nodes"]) == (len(real_nodes), len(fake_nodes))
    assert offered["fake"]["quota"].get(GPU) == "1"
    assert GPU not in offered["real"]["quota"]
    # Each node shows its own port: metrics-server reads each node's pods apart.
    ports = {n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] for n in (real, fake)}
    assert len(ports) == 2, ports
    foreign = get_json(lab, CONSUMER, "foreigncluster", "-n", "catamaran-system", PROVIDER)
    assert foreign["status"]["virtualNode"] == f"{FAKE}, {REAL}"


def test_a_pod_pinned_to_a_pool_runs_on_that_pools_provider_nodes_only(lab, pooled):
    on_real = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-real"},
        "spec": {**to_pool("real"), **restricted_busybox(["sleep", "3600"])},
    }
    gpu = {**container(), "resources": {"requests": {"cpu": "100m", GPU: "1"}, "limits": {GPU: "1"}}}
    on_fake = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-fake"},
        "spec": {**to_pool("fake"), "containers": [gpu]},
    }
    apply(lab, on_real, on_fake)
    for name, pool in (("on-real", REAL), ("on-fake", FAKE)):
        wait_for(lambda n=name: running(pods(lab).get(n)), timeout=90, what=f"{name} Running on the consumer")
        assert pods(lab)[name]["spec"]["nodeName"] == pool
    provider = provider_nodes(lab)
    placed_real, placed_fake = remote(lab, "on-real"), remote(lab, "on-fake")
    assert provider[placed_real["spec"]["nodeName"]]["metadata"]["labels"][NODE_KIND_LABEL] == "real"
    assert provider[placed_fake["spec"]["nodeName"]]["metadata"]["labels"][NODE_KIND_LABEL] == "fake"
    assert provider[placed_fake["spec"]["nodeName"]]["status"]["allocatable"].get(GPU) == "1"
    assert (placed_real["metadata"]["labels"][LABEL_POOL], placed_fake["metadata"]["labels"][LABEL_POOL]) == (
        "real",
        "fake",
    )
    # The offer counts each pod in its pool only.
    used = wait_for(
        lambda: (p := offer_pools(lab)) and p["fake"].get("used", {}).get(GPU) == "1" and p,
        what="the GPU counted as used in the kwok pool",
    )
    assert used["real"]["used"].get("pods") == "1"
    assert used["fake"]["used"].get("pods") == "1"
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "on-real", "on-fake", "--wait=true", timeout=120)


def test_a_pool_cordoned_drained_and_uncordoned_as_both_sides_see_it(lab, pooled):
    web = deployment("fake-web", 2, {**to_pool("fake"), "containers": [container()]})
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "fake-web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "fake-web"}}},
    }
    apply(lab, web, budget)
    first = wait_for(
        lambda: len(n := sorted(k for k, p in pods(lab).items() if k.startswith("fake-web") and running(p))) == 2 and n,
        what="both fake-web replicas Running on the kwok pool's node",
    )

    # Cordoned: only the pool's node is tainted and says why; what runs stays.
    lend(lab, [POOLS[0], {**POOLS[1], "cordon": {"reason": REASON}}])

    def tainted(name: str) -> bool:
        return any(t["key"] == CORDON_TAINT for t in node(lab, name)["spec"].get("taints") or [])

    wait_for(lambda: tainted(FAKE), what=f"the {CORDON_TAINT} taint on {FAKE}")
    assert not tainted(REAL), "the other pool is not cordoned"
    cordoned = next(c for c in node(lab, FAKE)["status"]["conditions"] if c["type"] == "catamaran.io/ProviderCordoned")
    assert (cordoned["status"], cordoned["reason"]) == ("True", "Cordoned"), cordoned
    assert REASON in cordoned["message"]

    # A pod bound to the pool's node anyway: the provider refuses it (PoolCordoned), and the consumer's pod says why.
    bound = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound"},
        "spec": {"nodeName": FAKE, "tolerations": to_pool("fake")["tolerations"], "containers": [container()]},
    }
    apply(lab, bound)

    def refused() -> dict | bool:
        conditions = pods(lab)["bound"]["status"].get("conditions") or []
        found = next((c for c in conditions if c["type"] == "catamaran.io/RemotePodCreated"), {})
        return found.get("reason") == "PoolCordoned" and found

    condition = wait_for(refused, what="the bound pod refused by the provider (PoolCordoned)")
    assert REASON in condition["message"], condition
    shadow = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, "bound")
    created = next(c for c in shadow["status"]["conditions"] if c["type"] == "PodCreated")
    assert (created["status"], created["reason"]) == ("False", "PoolCordoned")
    assert remote(lab, "bound") is None
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "bound", "--wait=false")

    # Drained: one replica evicted, the budget holding the other.
    lend(lab, [POOLS[0], {**POOLS[1], "cordon": {"reason": REASON, "drain": True}}])
    blocked = wait_for(lambda: events(lab, "ProviderDrainBlocked"), what="an eviction the budget refused")
    (held,) = {e["involvedObject"]["name"] for e in blocked}
    assert held in first
    wait_for(
        lambda: [k for k in first if k in pods(lab) and running(pods(lab)[k])] == [held],
        what="one replica evicted, the budget holding the other",
    )

    # Uncordoned: the taint goes and the replacement runs on the pool's node again.
    lend(lab, POOLS)
    wait_for(lambda: not tainted(FAKE), what=f"the {CORDON_TAINT} taint gone from {FAKE}")
    wait_for(
        lambda: len([k for k, p in pods(lab).items() if k.startswith("fake-web") and running(p)]) == 2,
        timeout=90,
        what="two fake-web replicas Running again",
    )
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "deployment,pdb", "fake-web", "--wait=true", timeout=120)


def test_a_pool_removed_has_its_pods_evicted_and_its_node_deleted(lab, pooled):
    web = deployment("real-web", 1, {**to_pool("real"), **restricted_busybox(["sleep", "3600"])})
    apply(lab, web)
    (pod,) = wait_for(
        lambda: [k for k, p in pods(lab).items() if k.startswith("real-web") and running(p)] or None,
        what="real-web Running on the real pool's node",
    )
    lend(lab, [POOLS[1]])
    wait_for(lambda: any(e["involvedObject"]["name"] == pod for e in events(lab, "ProviderDrain")), what="evicted")
    wait_for(
        lambda: lab.kubectl(CONSUMER, "get", "node", REAL, check=False).returncode != 0,
        timeout=90,
        what=f"{REAL} deleted once its pod left",
    )
    lease = lab.kubectl(CONSUMER, "-n", "kube-node-lease", "get", "lease", REAL, check=False)
    assert lease.returncode != 0, "its Lease went with it"
    assert remote(lab, pod) is None, "the remote pod went with its evicted pod"
    # The replacement has no pool to run in now: Pending, never on the other pool.
    replacement = wait_for(
        lambda: [p for k, p in pods(lab).items() if k.startswith("real-web") and k != pod] or None,
        what="the Deployment's replacement",
    )
    assert not replacement[0]["spec"].get("nodeName")
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "deployment", "real-web", "--wait=true", timeout=120)
    lend(lab, POOLS)
    wait_for(lambda: federation.node_ready(lab, CONSUMER, REAL) == "True", what=f"{REAL} back with its pool")


def test_the_tenants_own_credential_cannot_use_a_pool_not_lent_nor_move_a_pod_between_pools(lab, pooled, tmp_path):
    """ShadowPods written with the tenant's real credential, as a consumer could without its virtual kubelet: one
    naming a pool the provider does not lend gets no pod (PoolNotOffered); one of pool `real` whose pod template
    claims pool `fake` gets a pod of pool `real`, placed on the real node and counted there."""
    tenant = federation.tenant_kubectl(lab, CONSUMER, PROVIDER, tmp_path, duration="10m")

    def shadowpod(name: str, pool: str, template_labels: dict) -> dict:
        return {
            "apiVersion": "offloading.catamaran.io/v1alpha1",
            "kind": "ShadowPod",
            "metadata": {"name": name, "namespace": TWIN, "labels": {LABEL_POOL: pool}},
            "spec": {"pod": {"metadata": {"labels": template_labels}, "spec": restricted_busybox(["sleep", "3600"])}},
        }

    written = tenant(
        "apply",
        "-f",
        "-",
        input=federation.as_list(
            [shadowpod("unlent", "tpu", {}), shadowpod("mislabelled", "real", {LABEL_POOL: "fake"})]
        ),
    )
    assert written.returncode == 0, written.stderr

    def refusal(name: str) -> dict | None:
        status = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == "PodCreated"), None)

    refused = wait_for(
        lambda: (c := refusal("unlent")) and c["status"] == "False" and c, what="the unlent pool refused"
    )
    assert refused["reason"] == "PoolNotOffered", refused
    assert "tpu" in refused["message"], refused
    assert "real" in refused["message"], refused  # the pools it is lent
    assert remote(lab, "unlent") is None

    pod = wait_for(lambda: remote(lab, "mislabelled"), what="the pod of pool real")
    assert pod["metadata"]["labels"][LABEL_POOL] == "real", "the manager's pool label, not the template's"
    provider = provider_nodes(lab)
    node = wait_for(lambda: (p := remote(lab, "mislabelled")) and p["spec"].get("nodeName"), what="its node")
    assert provider[node]["metadata"]["labels"][NODE_KIND_LABEL] == "real"
    counted = wait_for(
        lambda: (p := offer_pools(lab)) and p["real"]["used"].get("pods") == "1" and p,
        what="the pod counted in pool real",
    )
    assert counted["fake"]["used"].get("pods") == "0"
    deleted = tenant("-n", TWIN, "delete", "shadowpod", "unlent", "mislabelled", "--wait=true")
    assert deleted.returncode == 0, deleted.stderr
