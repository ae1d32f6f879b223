"""The pod controller's decisions (vk/pods.py): create refusals, and an intruder's pods kept off the victim's
twin (issue 37, twin_cases.py). PodController.reconcile against in-memory clusters: test_pods_reconciler.py.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube.resources.core_v1 import Pod

from catamaran.kube.events import EventRecorder
from catamaran.twin_claims import TWIN_TAKEN
from catamaran.vk.context import PeeringContext
from catamaran.vk.pods import create_refusal
from tests.unit.twin_cases import CONSUMER, EVIL, TWIN, VICTIM, Recorder, add_offloading, hold_twin


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (403, 'shadowpods "p" is forbidden: exceeded quota: q', "QuotaExceeded"),
        (403, 'shadowpods "p" is forbidden: User cannot create', "AdmissionRejected"),
        (422, "ShadowPod.offloading.catamaran.io is invalid", "AdmissionRejected"),
        (400, "admission webhook denied the request", "AdmissionRejected"),
        (404, 'namespaces "apps-cluster-1" not found', "NamespaceMissing"),
    ],
)
def test_a_refused_shadowpod_create_is_named_on_the_pod(code, message, reason):
    named, detail = create_refusal(code, message, "cluster-2")
    assert named == reason
    assert detail == f"provider cluster-2 refused the ShadowPod: {message}"


@pytest.mark.parametrize("code", [409, 429, 500, 503])
def test_transient_create_errors_are_retried_without_a_reason(code):
    assert create_refusal(code, "busy", "cluster-2") is None


def pod_controller():
    from catamaran.vk.assembly import OffloadingParts
    from catamaran.vk.pools import PeeringNode
    from catamaran.vk.reflection.policy import settings_from_spec
    from tests.unit.fakes.offloading import unserved_nodes

    local, provider = Recorder(), Recorder()
    peering = PeeringContext(CONSUMER, "p1", local, provider, EventRecorder(local, "test"), ("catamaran-system", "p1"))
    nodes = unserved_nodes(peering, "10.0.0.1")
    pods = OffloadingParts(peering, nodes, settings_from_spec(None), remap_cidr=None).pods
    nodes.add_node(PeeringNode(peering.node_name))  # its pods' watch added, not run
    nodes.informer._store((None, peering.node_name), {})
    add_offloading(pods.twins, "victim", VICTIM)
    add_offloading(pods.twins, "evil", EVIL)
    hold_twin(pods.twins, "victim")
    return pods, local, provider


def local_pod(namespace: str, name: str = "web", deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": namespace, "uid": f"pod-{namespace}", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    return {"metadata": meta, "spec": {"containers": [{"name": "app", "image": "nginx"}]}, "status": {}}


def test_the_intruders_pods_wait_pending_and_never_reach_the_victims_twin():

    pods, local, provider = pod_controller()
    pods.local_pods.source(pods.peering.node_name)._store(("evil", "web"), local_pod("evil"))
    assert asyncio.run(pods.reconcile(("evil", "web"))) is None
    assert provider.calls == []
    [status] = [call[4]["status"] for call in local.calls if call[0] == "patch"]
    assert status["phase"] == "Pending"
    assert any(c.get("reason") == TWIN_TAKEN for c in status["conditions"])
    assert pods.twin_for("evil") is None
    assert pods.twin_for("victim") == TWIN


def test_deleting_the_intruders_pod_releases_it_without_touching_the_victims_shadowpod():
    pods, local, provider = pod_controller()
    pods.local_pods.source(pods.peering.node_name)._store(("evil", "web"), local_pod("evil", deleting=True))
    asyncio.run(pods.reconcile(("evil", "web")))
    assert provider.calls == []  # the victim's ShadowPod "web" is not deleted
    assert [call[:4] for call in local.calls if call[0] == "delete"] == [("delete", Pod, "web", "evil")]


def test_a_shadowpod_in_a_twin_is_judged_against_the_twins_origin_not_what_it_says_of_itself():
    pods, _, _ = pod_controller()
    shadow = {"metadata": {"name": "web", "namespace": TWIN, "annotations": {"catamaran.io/local-namespace": "evil"}}}
    pods.shadow_changed("ADDED", (TWIN, "web"), shadow, None)
    assert pods.queue._queued == {("victim", "web")}


def test_a_shadowpod_the_tenant_wrote_itself_is_left_to_the_providers_terms():
    """No local namespace named: no virtual kubelet made it, so it is no pod's and never deleted as an orphan."""
    pods, _, _ = pod_controller()
    shadow = {"metadata": {"name": "direct", "namespace": TWIN}}
    pods.shadow_changed("ADDED", (TWIN, "direct"), shadow, None)
    assert pods.queue._queued == set()
