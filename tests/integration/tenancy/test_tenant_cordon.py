"""A provider stops lending to a tenant without un-peering: its ResourceOffer's spec.cordon, as the peering module
writes it from the provider's catamaran_cordoned_tenants (written here by the provider's admin with server-side
apply, as the module does; the module's and the inventory's part is unit-tested), observed on both sides:

  - cordoned: the consumer's virtual node is tainted and says why (condition catamaran.io/ProviderCordoned, a
    Warning Event); the pods running there stay; a pod bound there anyway gets no remote pod, the provider's manager
    refusing its ShadowPod (TenantCordoned), which the consumer's pod shows;
  - drained: the virtual kubelet evicts the pods bound there through the consumer's Eviction API: a
    PodDisruptionBudget that allows one disruption lets one go and holds the other (ProviderDrainBlocked);
  - uncordoned: the taint goes, the replacement runs there again, the refused pod gets its remote pod.
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import tenant_namespace, virtual_node_name

from .. import federation
from ..lab_access import get_json, wait_for
from ..manifests import container, deployment, to_virtual_node
from . import CONSUMER, PROVIDER

pytestmark = pytest.mark.integration

NAMESPACE = "cordon"
TWIN = f"{NAMESPACE}-{CONSUMER}"
NODE = virtual_node_name(PROVIDER)
CORDON_TAINT = "catamaran.io/provider-cordoned"
TO_VIRTUAL_NODE = to_virtual_node(NODE)
REASON = "node maintenance until Monday"


@pytest.fixture(scope="module")
def fed(lab, peering):
    """The package's peering, with a namespace of this module's offloaded; the tenant uncordoned after, whatever
    happened (the package's other modules share the tenant)."""
    with federation.offloaded(lab, CONSUMER, PROVIDER, NAMESPACE):
        try:
            yield
        finally:
            cordon(lab)


def cordon(lab, **spec) -> None:
    """spec.cordon of the tenant's ResourceOffer, by its own field manager (as the peering module's run would set
    it); no spec: uncordoned."""
    federation.grant_terms(lab, CONSUMER, PROVIDER, field_manager="cordon", **({"cordon": spec} if spec else {}))


def node(lab) -> dict:
    return get_json(lab, CONSUMER, "node", NODE)


def cordoned_condition(lab) -> dict:
    return next(c for c in node(lab)["status"]["conditions"] if c["type"] == "catamaran.io/ProviderCordoned")


def tainted(lab) -> bool:
    return any(t["key"] == CORDON_TAINT for t in node(lab)["spec"].get("taints") or [])


def pods(lab) -> dict[str, dict]:
    listed = get_json(lab, CONSUMER, "pods", "-n", NAMESPACE)["items"]
    return {p["metadata"]["name"]: p for p in listed}


def running(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def events(lab, reason: str) -> list[dict]:
    listed = get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", f"reason={reason}")["items"]
    return listed


def apply(lab, *objects: dict) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(body))


def one_kept_available(app: str) -> dict:
    """A PodDisruptionBudget keeping one pod of `app` available."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }


def test_a_tenant_cordoned_drained_and_uncordoned_as_both_sides_see_it(lab, fed):
    web = deployment("web", 2, {**TO_VIRTUAL_NODE, "containers": [container()]})
    apply(lab, web, one_kept_available("web"))
    first = wait_for(
        lambda: len(names := sorted(n for n, p in pods(lab).items() if running(p))) == 2 and names,
        what="both web replicas Running on the virtual node",
    )

    # Cordoned: the node is tainted and says why; what runs stays.
    cordon(lab, reason=REASON)
    wait_for(lambda: tainted(lab), what=f"the {CORDON_TAINT} taint on {NODE}")
    condition = cordoned_condition(lab)
    assert (condition["status"], condition["reason"]) == ("True", "Cordoned"), condition
    assert REASON in condition["message"]
    node_events = get_json(lab, CONSUMER, "events", "-n", "default", "--field-selector", f"involvedObject.name={NODE}")
    assert any(e["reason"] == "ProviderCordoned" and e["type"] == "Warning" for e in node_events["items"])
    assert sorted(n for n, p in pods(lab).items() if running(p)) == first

    # A pod bound to the node anyway (no scheduler asked): the provider refuses its ShadowPod, and the pod says why.
    bound = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound"},
        "spec": {"nodeName": NODE, "tolerations": TO_VIRTUAL_NODE["tolerations"], "containers": [container()]},
    }
    apply(lab, bound)

    def refused() -> dict | bool:
        conditions = pods(lab)["bound"]["status"].get("conditions") or []
        found = next((c for c in conditions if c["type"] == "catamaran.io/RemotePodCreated"), {})
        return found.get("reason") == "TenantCordoned" and found

    condition = wait_for(refused, what="the bound pod refused by the provider (TenantCordoned)")
    assert REASON in condition["message"], condition
    shadow = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, "bound")
    created = next(c for c in shadow["status"]["conditions"] if c["type"] == "PodCreated")
    assert (created["status"], created["reason"]) == ("False", "TenantCordoned")
    assert lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", "bound", check=False).returncode != 0
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "bound", "--wait=false")

    # Drained: one replica evicted, the budget holding the other; the replacement finds no node to run on.
    cordon(lab, reason=REASON, drain=True)
    wait_for(lambda: cordoned_condition(lab)["reason"] == "Drained", what="ProviderCordoned reason Drained")
    blocked = wait_for(lambda: events(lab, "ProviderDrainBlocked"), what="an eviction the budget refused")
    (held,) = {e["involvedObject"]["name"] for e in blocked}
    assert held in first
    assert events(lab, "ProviderDrain"), "no eviction reported"
    now = pods(lab)
    assert running(now[held])
    assert not any(running(p) for name, p in now.items() if name in first and name != held)
    replacements = [name for name in now if name not in first and name != "bound"]
    assert replacements, now.keys()
    assert all(now[name]["status"].get("phase") == "Pending" for name in replacements)
    assert len([p for p in now.values() if running(p)]) == 1  # minAvailable: 1, kept

    # Uncordoned: the taint goes, and the replacement runs on the virtual node again.
    cordon(lab)
    wait_for(lambda: not tainted(lab), what=f"the {CORDON_TAINT} taint gone")
    assert (cordoned_condition(lab)["status"], cordoned_condition(lab)["reason"]) == ("False", "NotCordoned")
    wait_for(
        lambda: len([p for p in pods(lab).values() if running(p) and p["metadata"]["name"] != "bound"]) == 2,
        timeout=90,
        what="both web replicas Running again",
    )
    offer = get_json(lab, PROVIDER, "resourceoffer", "-n", tenant_namespace(CONSUMER), "resources")
    assert "cordon" not in offer["spec"]


def test_the_consumers_own_cordon_and_drain_of_the_virtual_node_work_as_for_a_real_node(lab, fed):
    """`kubectl cordon` and `kubectl drain` on the consumer, whatever the provider says: the node turns unschedulable
    (the virtual kubelet leaves spec.unschedulable alone), the drain evicts through the Eviction API as for a real node
    (a PodDisruptionBudget holding one pod until its replacement runs on the consumer's own nodes), the remote pods go
    with their local ones, and `kubectl uncordon` gives the node back."""
    preferring_the_virtual_node = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]
                },
            }
        ]
    }
    api = deployment(
        "api",
        2,
        {
            "affinity": {"nodeAffinity": preferring_the_virtual_node},
            "tolerations": TO_VIRTUAL_NODE["tolerations"],
            "containers": [container()],
        },
    )
    apply(lab, api, one_kept_available("api"))

    def on_the_virtual_node() -> list[str]:
        return sorted(n for n, p in pods(lab).items() if n.startswith("api-") and p["spec"].get("nodeName") == NODE)

    offloaded = wait_for(
        lambda: len(names := on_the_virtual_node()) == 2 and all(running(pods(lab)[n]) for n in names) and names,
        what="both api replicas Running on the virtual node",
    )
    wait_for(
        lambda: all(lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", n, check=False).returncode == 0 for n in offloaded),
        what="their remote pods",
    )
    lab.kubectl(CONSUMER, "cordon", NODE)
    try:
        assert node(lab)["spec"].get("unschedulable") is True
        drained = lab.kubectl(
            CONSUMER, "drain", NODE, "--pod-selector=app=api", "--ignore-daemonsets", "--timeout=120s", timeout=150
        )
        assert "drained" in drained.stdout, drained.stdout
        assert on_the_virtual_node() == []
        now = pods(lab)
        replacements = [n for n, p in now.items() if n.startswith("api-") and n not in offloaded]
        assert len(replacements) == 2
        assert all(running(now[n]) and now[n]["spec"]["nodeName"] != NODE for n in replacements)
        wait_for(
            lambda: all(
                lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", n, check=False).returncode != 0 for n in offloaded
            ),
            what="the evicted pods' remote pods gone",
        )
        assert node(lab)["spec"].get("unschedulable") is True, "the virtual kubelet kept the consumer's cordon"
    finally:
        lab.kubectl(CONSUMER, "uncordon", NODE)
    wait_for(lambda: not node(lab)["spec"].get("unschedulable"), what=f"{NODE} schedulable again")
    ready = next(c for c in node(lab)["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "deployment", "api", "--wait=false")
