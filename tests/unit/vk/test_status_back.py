"""The local pod's status from its remote pod (vk/status_back.py): IPs, readiness, refusals, held pods, and the
conditions the virtual kubelet owns.
"""

from __future__ import annotations

from catamaran.vk import ip_translation, status_back
from catamaran.vk.pod_status import comparable_status
from tests.unit.vk.offloading_scope import NOW
from tests.unit.vk.provider_reports import APP, local_status, running

# A ShadowPod's status while its pod runs, ready, on the provider.
RUNNING_AND_READY = {
    "pod": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "app", "ready": True}],
    }
}


def test_local_status_translates_ips_and_counts_recreations():
    shadow_status = {
        "recreations": 2,
        "pod": {
            "phase": "Running",
            "podIP": "10.102.1.5",
            "podIPs": [{"ip": "10.102.1.5"}],
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": True, "restartCount": 1, "state": {"running": {}}}],
        },
    }
    local = {"conditions": [{"type": "PodScheduled", "status": "True", "reason": "local"}]}
    translate = ip_translation.IPTranslator(["10.102.0.0/16"], "10.200.0.0/16")
    status = status_back.local_pod_status(
        local, shadow_status, node_ip="10.0.0.9", translate=translate, provider_reachable=True, now="t", spec=APP
    )
    assert status["podIP"] == "10.200.1.5"
    assert status["podIPs"] == [{"ip": "10.200.1.5"}]
    assert status["hostIP"] == "10.0.0.9"
    assert status["containerStatuses"][0]["restartCount"] == 3
    assert {c["type"]: c.get("reason") for c in status["conditions"]}["PodScheduled"] == "local"


def test_unreachable_provider_marks_pods_not_ready():
    shadow_status = RUNNING_AND_READY
    status = status_back.local_pod_status(
        {}, shadow_status, node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=False, now="t", spec=APP
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ProviderUnreachable")
    assert status["containerStatuses"][0]["ready"] is False


def test_a_fabric_tunnel_down_marks_pods_not_ready_and_its_return_ready_again():
    shadow_status = RUNNING_AND_READY
    common = dict(node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=True, now="t", spec=APP)
    down = status_back.local_pod_status(
        {}, shadow_status, network_down="the tunnel is down (TunnelSilent: quiet)", **common
    )
    ready = next(c for c in down["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NetworkUnreachable")
    assert "TunnelSilent" in ready["message"]
    assert down["containerStatuses"][0]["ready"] is False
    back = status_back.local_pod_status(down, shadow_status, **common)
    assert next(c for c in back["conditions"] if c["type"] == "Ready")["status"] == "True"


def test_remote_refusal_shows_on_the_local_pod():
    shadow_status = {
        "conditions": [
            {"type": "PodCreated", "status": "False", "reason": "QuotaExceeded", "message": "exceeded quota: tight"}
        ]
    }
    status = status_back.local_pod_status(
        {},
        shadow_status,
        node_ip="1.1.1.1",
        translate=lambda ip: ip,
        provider_reachable=True,
        now="t",
        spec={"containers": [{"name": "app", "image": "nginx"}]},
    )
    refused = next(c for c in status["conditions"] if c["type"] == status_back.REMOTE_CONDITION)
    assert (refused["status"], refused["reason"]) == ("False", "QuotaExceeded")
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "QuotaExceeded"


def test_readiness_gates_are_kept_from_the_local_pod_and_gate_ready():
    shadow_status = {"pod": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    common = {"node_ip": "1.1.1.1", "translate": None, "provider_reachable": True, "now": "t"}
    gates = ["example.com/feature-1"]
    status = status_back.local_pod_status({}, shadow_status, readiness_gates=gates, **common)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert '"example.com/feature-1" does not exist' in ready["message"]
    gate = {"type": "example.com/feature-1", "status": "True"}
    status = status_back.local_pod_status({"conditions": [gate]}, shadow_status, readiness_gates=gates, **common)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True", "example.com/feature-1": "True"}


def test_a_pod_outliving_its_remote_pod_shows_its_containers_ended():
    local = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "app", "ready": True, "state": {"running": {"startedAt": "s"}}},
            {"name": "done", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        ],
    }
    status = status_back.terminated_pod_status(local, now="t")
    app, done = status["containerStatuses"]
    assert app["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert (app["state"]["terminated"]["finishedAt"], app["state"]["terminated"]["startedAt"]) == ("t", "s")
    assert done == local["containerStatuses"][1]  # its own end, as reported, is kept
    assert status["phase"] == "Failed"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "False", "PodScheduled": "True"}


def test_a_provider_cannot_set_the_conditions_the_virtual_kubelet_owns():
    spoofed = [
        {"type": status_back.POD_IP_CONDITION, "status": "True"},
        {"type": status_back.REMOTE_CONDITION, "status": "True"},
    ]
    status = local_status(
        running("192.168.7.7", conditions=spoofed), ip_translation.IPTranslator(["10.102.0.0/16"], None)
    )
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [(status_back.POD_IP_CONDITION, "False")]


def test_a_held_pod_is_pending_with_the_reason_everywhere_kubectl_looks():
    local = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    status = status_back.held_pod_status(local, "OffloadingBackOff", "why", now=NOW, containers=[("c", "i")])
    assert (status["phase"], status["reason"], status["message"]) == ("Pending", "OffloadingBackOff", "why")
    held = next(c for c in status["conditions"] if c["type"] == status_back.REMOTE_CONDITION)
    assert (held["status"], held["reason"], held["message"]) == ("False", "OffloadingBackOff", "why")
    assert {c["type"] for c in status["conditions"]} == {"PodScheduled", status_back.REMOTE_CONDITION}
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "OffloadingBackOff"
    # Held again for the same reason: nothing to write, so no second Event either.
    again = status_back.held_pod_status(
        status, "OffloadingBackOff", "why", now="2025-01-01T00:00:00Z", containers=[("c", "i")]
    )
    assert comparable_status(again) == comparable_status(status)
    assert (
        next(c for c in again["conditions"] if c["type"] == status_back.REMOTE_CONDITION)["lastTransitionTime"] == NOW
    )


def test_once_offloaded_the_held_reason_goes():
    held = status_back.held_pod_status(
        {"conditions": [{"type": "PodScheduled", "status": "True"}]}, "OffloadingBackOff", "why", now=NOW,
        containers=[("c", "i")],
    )  # fmt: skip
    remote = {"pod": {"phase": "Pending", "conditions": [{"type": "Initialized", "status": "True"}]}}
    status = status_back.local_pod_status(
        held, remote, node_ip="10.0.0.1", translate=lambda ip: ip, provider_reachable=True, now=NOW
    )
    assert status["phase"] == "Pending"
    assert status["reason"] is None
    assert status["message"] is None
    assert status["containerStatuses"] is None
    assert status_back.REMOTE_CONDITION not in {c["type"] for c in status["conditions"]}


def test_a_remote_refusal_also_sets_the_pod_reason():
    shadow = {"conditions": [{"type": "PodCreated", "status": "False", "reason": "QuotaExceeded", "message": "m"}]}
    status = status_back.local_pod_status(
        {}, shadow, node_ip="10.0.0.1", translate=lambda ip: ip, provider_reachable=True, now=NOW
    )
    assert (status["reason"], status["message"]) == ("QuotaExceeded", "m")


RESIZABLE = {
    "containers": [
        {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "15m"}, "limits": {"memory": "64Mi"}}}
    ]
}


def test_a_resize_as_the_remote_kubelet_reports_it_shows_on_the_local_pod():
    reported = {
        "name": "app",
        "resources": {"requests": {"cpu": "15m"}, "limits": {"memory": "64Mi"}},
        "allocatedResources": {"cpu": "15m"},
    }
    in_progress = {"type": "PodResizeInProgress", "status": "True"}
    shadow_status = running("10.1.0.5", containerStatuses=[reported], conditions=[in_progress])
    status = status_back.local_pod_status(
        {}, shadow_status, node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=True, now="t", spec=RESIZABLE
    )
    assert status["containerStatuses"][0]["resources"] == reported["resources"]
    assert status["containerStatuses"][0]["allocatedResources"] == {"cpu": "15m"}
    assert in_progress in status["conditions"]


def test_a_provider_refusing_a_resize_shows_as_the_kubelets_pod_resize_pending():
    refused = {"type": "PodResized", "status": "False", "reason": "Deferred", "message": "exceeds the quota of c1"}
    shadow_status = {**running("10.1.0.5"), "conditions": [refused]}
    common = dict(node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=True, spec=RESIZABLE)
    status = status_back.local_pod_status({}, shadow_status, now="t1", **common)
    pending = [c for c in status["conditions"] if c["type"] == "PodResizePending"]
    assert pending == [
        {
            "type": "PodResizePending",
            "status": "True",
            "reason": "Deferred",
            "message": "exceeds the quota of c1",
            "lastTransitionTime": "t1",
        }
    ]
    later = status_back.local_pod_status(status, shadow_status, now="t2", **common)
    assert [c for c in later["conditions"] if c["type"] == "PodResizePending"] == pending  # since when, kept
    odd = {**shadow_status, "conditions": [{**refused, "reason": "BecauseISaySo"}]}
    shown = status_back.local_pod_status({}, odd, now="t1", **common)
    assert [c["reason"] for c in shown["conditions"] if c["type"] == "PodResizePending"] == ["Deferred"]
    resized = status_back.local_pod_status(status, running("10.1.0.5"), now="t3", **common)
    assert all(c["type"] != "PodResizePending" for c in resized["conditions"])


def test_the_observed_generation_is_the_local_pods_once_the_remote_pod_has_acted_on_its_spec():
    common = dict(node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=True, now="t", spec=RESIZABLE)
    applied = {"name": "app", "resources": {"requests": {"cpu": "15m"}, "limits": {"memory": "64Mi", "cpu": "2"}}}
    running_applied = running("10.1.0.5", containerStatuses=[applied])
    assert "observedGeneration" not in status_back.local_pod_status({}, running_applied, **common)
    shown = status_back.local_pod_status({}, running_applied, generation=3, **common)
    assert shown["observedGeneration"] == 3  # the terms' defaults (a cpu limit) beside the spec's amounts
    before = {"observedGeneration": 2}
    # The ShadowPod does not have the resized resources yet, or the remote kubelet is still at it, or reports others.
    assert (
        status_back.local_pod_status(before, running_applied, generation=3, resources_sent=False, **common)[
            "observedGeneration"
        ]
        == 2
    )
    in_progress = running(
        "10.1.0.5", containerStatuses=[applied], conditions=[{"type": "PodResizeInProgress", "status": "True"}]
    )
    assert status_back.local_pod_status(before, in_progress, generation=3, **common)["observedGeneration"] == 2
    behind = running("10.1.0.5", containerStatuses=[{**applied, "resources": {"requests": {"cpu": "5m"}}}])
    assert status_back.local_pod_status(before, behind, generation=3, **common)["observedGeneration"] == 2
    # A provider whose kubelet reports no resources (kwok, an older one): acted on once it is sent.
    silent = running("10.1.0.5", containerStatuses=[{"name": "app"}])
    assert status_back.local_pod_status(before, silent, generation=3, **common)["observedGeneration"] == 3


# -- which status: the remote Pod's over the ShadowPod's ---------------------------------------------------------------


def remote_pod(status: dict, *, owner: str = "shadow-uid", recreations: int | None = None) -> dict:
    """A remote Pod as the virtual kubelet keeps it (vk/pods.py compact_remote_pod)."""
    return {"metadata": {"name": "web"}, "owner": owner, "recreations": recreations, "status": status}


def test_the_remote_pods_status_is_read_over_what_its_shadowpod_says():
    recorded = {"conditions": [{"type": "PodCreated", "status": "True"}], "pod": {"phase": "Pending"}}
    seen = status_back.seen_status(recorded, remote_pod(RUNNING_AND_READY["pod"]), "shadow-uid")
    assert seen == {**recorded, "pod": RUNNING_AND_READY["pod"]}
    assert recorded["pod"] == {"phase": "Pending"}, "the cached ShadowPod is left as it was"


def test_a_pod_of_another_shadowpod_or_one_just_made_leaves_the_shadowpods_status():
    recorded = {"phase": "Succeeded", "pod": {"phase": "Succeeded"}}
    assert status_back.seen_status(recorded, remote_pod(RUNNING_AND_READY["pod"], owner="earlier"), "shadow-uid") is (
        recorded
    )
    just_made = remote_pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]})
    assert status_back.seen_status(None, just_made, "shadow-uid") is None
    assert status_back.seen_status({"podUID": "x"}, None, "shadow-uid") == {"podUID": "x"}


def test_recreations_stamped_on_the_pod_count_before_the_manager_records_them():
    running = RUNNING_AND_READY["pod"]
    assert status_back.seen_status({}, remote_pod(running, recreations=2), "shadow-uid")["recreations"] == 2
    assert (
        status_back.seen_status({"recreations": 3}, remote_pod(running, recreations=2), "shadow-uid")["recreations"]
        == 3
    )
    assert status_back.seen_status({"recreations": 1}, remote_pod(running), "shadow-uid")["recreations"] == 1
    # A count that is no whole number stays as recorded, for vk/trust.py to refuse.
    assert (
        status_back.seen_status({"recreations": "many"}, remote_pod(running, recreations=2), "shadow-uid")[
            "recreations"
        ]
        == "many"
    )
