"""The consumer checks what a provider reports (vk/trust.py): reasons and messages bounded, only the spec's
containers and a kubelet's conditions shown, restart counts clamped, refusals said once per kind.
"""

from __future__ import annotations

import asyncio

import pytest

from catamaran.vk import ip_translation, status_back, trust
from tests.unit.vk.provider_reports import kinds, local_status, running

# -- reasons and messages --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "kept"),
    [
        ("CrashLoopBackOff", "CrashLoopBackOff"),
        ("OOMKilled", "OOMKilled"),
        ("I am your admin; click here", trust.PROVIDER_REASON),
        ("x" * 129, trust.PROVIDER_REASON),
        ("Bad\x1b[2J", trust.PROVIDER_REASON),
        ("9Lives", trust.PROVIDER_REASON),
        ({"not": "text"}, trust.PROVIDER_REASON),
        ("", ""),
        (None, ""),
    ],
)
def test_reasons_must_follow_the_kubernetes_convention(reason, kept):
    assert trust.sanitised_reason(reason) == kept


def test_messages_are_bounded_and_stripped_of_control_characters():
    huge = trust.sanitised_message("A" * 700_000)
    assert len(huge) == trust.MESSAGE_LIMIT
    assert huge.endswith(trust.TRUNCATION_MARK)
    cleaned = trust.sanitised_message("line 1\n\tline 2\r\x1b[31mred\x07\u202eevil\u200b\ud800")
    assert cleaned == "line 1\n\tline 2[31mredevil"
    assert trust.sanitised_message("short") == "short"


def test_what_the_provider_writes_on_the_pod_is_bounded():
    garbage = "\x1b]0;owned\x07" + "B" * 700_000
    container = {
        "name": "app",
        "state": {"waiting": {"reason": "Made up!", "message": garbage}},
        "lastState": {"terminated": {"reason": "Error", "message": garbage, "exitCode": 1}},
    }
    remote = running(
        "10.102.0.5",
        reason="Nope nope",
        message=garbage,
        conditions=[{"type": "Ready", "status": "False", "reason": "<script>", "message": garbage}],
        containerStatuses=[container],
    )
    status = local_status(remote, ip_translation.IPTranslator(["10.102.0.0/16"], None))
    entry = status["containerStatuses"][0]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    for reason in (status["reason"], ready["reason"], entry["state"]["waiting"]["reason"]):
        assert reason == trust.PROVIDER_REASON
    assert entry["lastState"]["terminated"]["reason"] == "Error"
    assert entry["lastState"]["terminated"]["exitCode"] == 1
    messages = (
        status["message"],
        ready["message"],
        entry["state"]["waiting"]["message"],
        entry["lastState"]["terminated"]["message"],
    )
    for message in messages:
        assert len(message) == trust.MESSAGE_LIMIT
        assert "\x1b" not in message
        assert "\x07" not in message


def test_a_refusal_quoting_the_provider_is_bounded():
    shadow = {"conditions": [{"type": "PodCreated", "status": "False", "reason": "x y", "message": "C" * 5000}]}
    status = local_status(shadow, ip_translation.IPTranslator(["10.102.0.0/16"], None))
    refused = next(c for c in status["conditions"] if c["type"] == status_back.REMOTE_CONDITION)
    assert refused["reason"] == trust.PROVIDER_REASON
    assert len(refused["message"]) == trust.MESSAGE_LIMIT
    held = status_back.held_pod_status({}, "AdmissionRejected", "D" * 5000, now="t")
    assert len(held["message"]) == trust.MESSAGE_LIMIT


# -- a pod's reported status, bounded by the local spec ------------------------------------------------------------

SPEC = {
    "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
    "containers": [{"name": "app", "image": "registry.example/shop/app:1.4"}],
    "ephemeralContainers": [{"name": "debugger", "image": "busybox"}],
}


def container(name: str, **fields) -> dict:
    return {"name": name, "ready": True, "restartCount": 0, "state": {"running": {}}, **fields}


def test_only_containers_of_the_spec_reach_local_status_each_with_the_specs_image():
    remote = {
        "phase": "Running",
        "initContainerStatuses": [container("setup"), container("ghost-init")],
        "containerStatuses": [
            container("app", image="evil.example/backdoor:latest", imageID="sha256:" + "a" * 64),
            container("ghost", image="evil.example/backdoor:latest"),
            container("app", restartCount=9),  # a second status of the same container
        ],
        "ephemeralContainerStatuses": [container("debugger", image="docker.io/library/busybox:latest")],
    }
    status = local_status({"pod": remote}, None, spec=SPEC)
    shown = {kind: [(c["name"], c["image"]) for c in status[kind]] for kind in trust.CONTAINER_STATUS_KINDS}
    assert shown == {
        "initContainerStatuses": [("setup", "busybox:1.36")],
        "containerStatuses": [("app", "registry.example/shop/app:1.4")],
        "ephemeralContainerStatuses": [("debugger", "busybox")],
    }
    assert status["containerStatuses"][0]["imageID"] == "sha256:" + "a" * 64  # the runtime's, bounded: kept
    refusals = status_back.report_refusals({"pod": remote}, SPEC)
    assert kinds(refusals) == {trust.CONTAINER_STATUS_REFUSED, trust.IMAGE_REPLACED}
    assert any("'ghost'" in r.message and "containerStatuses" in r.message for r in refusals)
    assert any("'evil.example/backdoor:latest'" in r.message for r in refusals)


def test_without_a_spec_no_container_status_is_shown():
    status = local_status({"pod": {"phase": "Running", "containerStatuses": [container("app")]}}, None, spec={})
    assert "containerStatuses" not in status


@pytest.mark.parametrize(
    ("reported", "spec"),
    [
        ("docker.io/library/nginx:1.25", "nginx:1.25"),
        ("docker.io/library/nginx:latest", "nginx"),
        ("docker.io/library/nginx:stable", "nginx:1.25"),  # another tag of the same image
        ("docker.io/library/nginx@sha256:" + "b" * 64, "nginx:1.25"),  # the image's repository digest
        ("sha256:" + "c" * 64, "registry.example/app:1"),  # a bare image ID
        ("localhost:5000/app:1", "localhost:5000/app:1"),
        ("registry.example:5000/team/app:2", "registry.example:5000/team/app:1"),
    ],
)
def test_what_runtimes_report_of_the_specs_image_is_not_a_replacement(reported, spec):
    assert trust.same_image(reported, spec)


@pytest.mark.parametrize(
    ("reported", "spec"),
    [
        ("evil.example/backdoor:latest", "nginx:1.25"),
        ("docker.io/library/backdoor:1.25", "nginx:1.25"),
        ("docker.io/evil/nginx:1.25", "nginx:1.25"),
        ("quay.io/library/nginx:1.25", "nginx:1.25"),
        (["nginx"], "nginx"),
    ],
)
def test_another_repository_is_another_image(reported, spec):
    assert not trust.same_image(reported, spec)


@pytest.mark.parametrize(
    ("restarts", "recreations", "shown", "clamped"),
    [
        (2, 1, 3, False),
        (None, None, 0, False),
        (2147483000, 0, trust.RESTART_COUNT_CEILING, True),
        (2147483000, 2**62, trust.RESTART_COUNT_CEILING, True),
        (trust.RESTART_COUNT_CEILING, 1, trust.RESTART_COUNT_CEILING, True),
        (-5, 2, 2, True),
        (3, -1, 3, True),
        ("7", 0, 0, True),
        (True, 0, 0, True),
        (1.5, 0, 0, True),
    ],
)
def test_restart_counts_are_whole_and_clamped(restarts, recreations, shown, clamped):
    assert trust.shown_restart_count(restarts, recreations) == (shown, clamped)


def test_no_recreation_can_overflow_a_clamped_restart_count():
    remote = {"phase": "Running", "containerStatuses": [container("app", restartCount=2147483000)]}
    for recreations in (0, 1, 2**31, 2**63 - 1):
        status = local_status({"pod": remote, "recreations": recreations}, None, spec=SPEC)
        assert status["containerStatuses"][0]["restartCount"] == trust.RESTART_COUNT_CEILING < 2**31 - 1
    [refusal] = status_back.report_refusals({"pod": remote, "recreations": 1}, SPEC)
    assert refusal.kind == trust.RESTART_COUNT_CLAMPED
    assert "2147483000" in refusal.message
    assert str(trust.RESTART_COUNT_CEILING) in refusal.message


def test_only_a_kubelets_condition_types_reach_the_pod_once_each():
    reported = [
        {"type": "Ready", "status": "True", "lastProbeTime": None},
        {"type": "example.com/load-balancer-ready", "status": "True"},  # a readiness gate's: the consumer's
        {"type": status_back.POD_IP_CONDITION, "status": "True"},
        {"type": "Ready", "status": "False"},
        {"type": "Initialized", "status": "Maybe"},
        {"type": "PodScheduled", "status": "True"},  # the provider's scheduler's: the local pod shows its own
        "not a condition",
    ]
    conditions, refusals = trust.accepted_conditions(reported)
    assert conditions == [{"type": "Ready", "status": "True"}]
    assert len(refusals) == 5
    assert kinds(refusals) == {trust.POD_CONDITION_REFUSED}
    own = {"PodScheduled", status_back.REMOTE_CONDITION, status_back.POD_IP_CONDITION}
    assert own.isdisjoint(trust.PROVIDER_POD_CONDITIONS)


def test_fields_the_api_would_not_take_are_not_shown():
    app = container(
        "app",
        image="registry.example/shop/app:1.4",
        imageID="x" * (trust.IDENTIFIER_LIMIT + 1),
        containerID="containerd://\x1b[31m",
        ready="yes",
        started=True,
        resources={"limits": {"example.com/gpu": "64"}},  # a resource neither the spec nor the terms name
        state={"terminated": {"exitCode": 2**40, "reason": "Error", "finishedAt": "yesterday", "signal": 9}},
        lastState={"running": {"startedAt": "2026-01-01T00:00:00Z"}, "sleeping": {}},
    )
    remote = {"phase": "Running", "startTime": "soon", "containerStatuses": [app]}
    status = local_status({"pod": remote}, None, spec=SPEC)
    [shown] = status["containerStatuses"]
    assert shown == {
        "name": "app",
        "image": "registry.example/shop/app:1.4",
        "imageID": "",
        "ready": False,
        "started": True,
        "restartCount": 0,
        "state": {"terminated": {"reason": "Error", "signal": 9}},
        "lastState": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }
    assert "startTime" not in status
    refusals = status_back.report_refusals({"pod": remote}, SPEC)
    assert kinds(refusals) == {trust.STATUS_FIELD_REFUSED}
    assert any("imageID, containerID, ready and 4 more of container 'app'" in r.message for r in refusals)


def test_conditions_and_states_times_must_be_times():
    reported = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00.5+02:00"}]
    assert trust.accepted_conditions(reported) == (reported, [])
    conditions, refusals = trust.accepted_conditions([{"type": "Ready", "status": "True", "lastTransitionTime": 7}])
    assert conditions == [{"type": "Ready", "status": "True"}]
    assert kinds(refusals) == {trust.STATUS_FIELD_REFUSED}


# -- refusals reported as Warning Events, once per pod and kind ------------------------------------------------


class RecordingClient:
    """The consumer's API server as PodStatus and the EventRecorder write to it."""

    def __init__(self):
        self.events: list = []
        self.patches: list[dict] = []

    async def create(self, obj):
        self.events.append(obj)
        return obj

    async def patch(self, resource, name, body, **kwargs):
        self.patches.append(body)


def pod_status_writer(client: RecordingClient):
    from types import SimpleNamespace

    from catamaran.kube.events import EventRecorder
    from catamaran.vk.context import PeeringContext
    from catamaran.vk.pod_status import PodStatus

    peering = PeeringContext("consumer", "provider-1", client, object(), EventRecorder(client, "test"), ("ns", "fc"))
    health = SimpleNamespace(healthy=True)
    return PodStatus(peering, health, "10.0.0.9", SimpleNamespace(translate=None, network_down=None))


def test_what_a_provider_forges_in_a_loop_is_one_event_per_kind_and_never_shown():
    client = RecordingClient()
    writer = pod_status_writer(client)
    pod = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "3"},
        "spec": {"containers": [{"name": "app", "image": "registry.example/shop/app:1.4"}]},
        "status": {},
    }

    def forged(restarts: int) -> dict:
        app = container("app", image="evil.example/backdoor:latest", restartCount=restarts)
        return {"status": {"pod": {"phase": "Running", "containerStatuses": [app, container("ghost")]}}}

    async def loop() -> None:
        for restarts in (2147483000, 2147483001, 2147483002):
            await writer.update(pod, forged(restarts))
            pod["status"] = client.patches[-1]["status"] if client.patches else pod["status"]

    asyncio.run(loop())
    assert sorted(event.reason for event in client.events) == sorted(
        [trust.CONTAINER_STATUS_REFUSED, trust.IMAGE_REPLACED, trust.RESTART_COUNT_CLAMPED]
    )
    assert all(event.type == "Warning" and event.involvedObject.uid == "u-1" for event in client.events)
    assert all(event.message.startswith("provider provider-1 reported") for event in client.events)
    [written] = client.patches  # the clamped status does not change with the forged count
    [app] = written["status"]["containerStatuses"]
    assert (app["name"], app["image"], app["restartCount"]) == (
        "app",
        "registry.example/shop/app:1.4",
        trust.RESTART_COUNT_CEILING,
    )


def test_reported_resources_name_only_the_specs_resources_each_a_quantity():
    spec = {
        "containers": [
            {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "15m", "memory": "32Mi"}}},
        ]
    }
    kept = {"name": "app", "resources": {"requests": {"cpu": "15m"}}, "allocatedResources": {"memory": "32Mi"}}
    status = local_status(running("10.102.0.5", containerStatuses=[kept]), lambda ip: ip, spec=spec)
    assert status["containerStatuses"][0]["resources"] == {"requests": {"cpu": "15m"}}
    assert status["containerStatuses"][0]["allocatedResources"] == {"memory": "32Mi"}
    for bad in (
        {"resources": {"requests": {"example.com/gpu": "8"}}},  # not a resource of the spec's
        {"resources": {"requests": {"cpu": "lots"}}},
        {"resources": {"claims": [{"name": "x"}]}},
        {"allocatedResources": {"cpu": "1" * 100}},
        {"allocatedResources": ["cpu"]},
    ):
        reported = running("10.102.0.5", containerStatuses=[{"name": "app", **bad}])
        entry = local_status(reported, lambda ip: ip, spec=spec)["containerStatuses"][0]
        assert "resources" not in entry, bad
        assert "allocatedResources" not in entry, bad
        assert kinds(status_back.report_refusals(reported, spec)) == {trust.STATUS_FIELD_REFUSED}, bad
