"""The consumer checks what a provider reports: pod IPs only inside its announced ranges, ranges that overlap the
consumer's own refused unless remapped, and reasons and messages bounded before they reach the consumer's objects."""

from __future__ import annotations

import asyncio

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.networking_v1 import ServiceCIDR

from catamaran.vk import forge, trust
from catamaran.vk.local_ranges import LocalRanges
from catamaran.vk.pod_ips import (
    CONSENT_CONDITION,
    NO_CONSENT_RECORDED,
    NO_PROVIDER_RANGES,
    REFUSED_CONDITION,
    UNTRANSLATED_CONDITION,
    translation_conditions,
)
from catamaran.vk.remote_events import compact_event

API_SERVER = "172.31.40.165"
CONSUMER = trust.own_ranges(
    [
        ("10.101.1.0/24", "node worker-1's pod range"),
        ("172.31.40.2", "node worker-1's address"),
        ("10.0.0.0/24", "service range (ServiceCIDR kubernetes)"),
        (API_SERVER, "API server's address"),
        ("worker-1", "node worker-1's address"),  # a Hostname address: not an IP, skipped
    ]
)


def running(pod_ip: str, **remote) -> dict:
    return {"pod": {"phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], **remote}}


APP = {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}


def local_status(shadow_status: dict, translate, local: dict | None = None, spec: dict | None = None) -> dict:
    return forge.local_pod_status(
        local or {},
        shadow_status,
        node_ip="10.0.0.9",
        translate=translate,
        provider_reachable=True,
        now="t",
        spec=APP if spec is None else spec,
    )


def ip_condition(status: dict) -> dict | None:
    return next((c for c in status["conditions"] if c["type"] == forge.POD_IP_CONDITION), None)


# -- pod IPs -------------------------------------------------------------------------------------


def test_an_ip_inside_the_announced_range_is_shown():
    status = local_status(running("10.102.3.7"), forge.IPTranslator(["10.102.0.0/16"], None, CONSUMER))
    assert (status["podIP"], status["podIPs"]) == ("10.102.3.7", [{"ip": "10.102.3.7"}])
    assert ip_condition(status) is None


def test_an_ip_outside_the_announced_range_is_refused_and_said_so():
    status = local_status(running("192.168.7.7"), forge.IPTranslator(["10.102.0.0/16"], None, CONSUMER))
    assert (status["podIP"], status["podIPs"]) == (None, None)  # merge patch nulls: a shown IP goes
    refused = ip_condition(status)
    assert (refused["status"], refused["reason"]) == ("False", forge.POD_IP_OUTSIDE_PROVIDER_RANGES)
    assert "'192.168.7.7'" in refused["message"]
    assert "10.102.0.0/16" in refused["message"]


def test_the_consumers_api_server_address_is_refused():
    """The issue's attack: the provider sets its pod's IP to the consumer's API server address."""
    translate = forge.IPTranslator(["10.102.0.0/16"], None, CONSUMER)
    assert translate(API_SERVER) is None
    status = local_status(running(API_SERVER), translate)
    assert status["podIP"] is None
    assert API_SERVER in ip_condition(status)["message"]


def test_announcing_a_range_around_the_api_server_refuses_every_ip():
    translate = forge.IPTranslator(["172.31.0.0/16"], None, CONSUMER)
    assert translate(API_SERVER) is None
    assert translate("172.31.9.9") is None  # the whole range, not only the consumer's addresses in it
    reason, message = translate.conflict
    assert reason == forge.PROVIDER_RANGE_OVERLAPS_CONSUMER
    assert f"API server's address {API_SERVER}:" in message
    assert "spec.networking.podCIDRRemap" in message
    assert translate.refusal("172.31.9.9") == translate.conflict


def test_no_ip_is_shown_before_the_provider_announces_a_range():
    translate = forge.IPTranslator([], None, CONSUMER)
    status = local_status(running("10.102.3.7"), translate)
    assert status["podIP"] is None
    assert "none yet" in ip_condition(status)["message"]
    conditions = translation_conditions(translate, [])
    assert [(c["type"], c["status"], c["reason"]) for c in conditions] == [
        (CONSENT_CONDITION, "False", NO_CONSENT_RECORDED),
        (REFUSED_CONDITION, "True", NO_PROVIDER_RANGES),
    ]


def test_until_the_ranges_are_known_the_pod_keeps_what_it_shows():
    shown = {"podIP": "10.102.3.7", "podIPs": [{"ip": "10.102.3.7"}]}
    status = local_status(running("10.102.3.8"), None, local=shown)
    assert (status["podIP"], status["podIPs"]) == (shown["podIP"], shown["podIPs"])


@pytest.mark.parametrize("announced", ["10.101.0.0/16", "172.31.40.0/24", "10.0.0.0/8", "0.0.0.0/0", "127.0.0.0/8"])
def test_a_provider_range_overlapping_the_consumers_is_refused_without_a_remap_range(announced):
    translate = forge.IPTranslator([announced], None, CONSUMER)
    assert translate.conflict is not None
    refused = translation_conditions(translate, [])[-1]
    assert (refused["type"], refused["status"], refused["reason"]) == (
        REFUSED_CONDITION,
        "True",
        forge.PROVIDER_RANGE_OVERLAPS_CONSUMER,
    )


def test_an_overlapping_range_is_translated_with_a_remap_range():
    translate = forge.IPTranslator(["10.101.0.0/16"], "10.200.0.0/16", CONSUMER)
    assert translate.conflict is None
    assert translate("10.101.1.5") == "10.200.1.5"
    conditions = {c["type"]: c for c in translation_conditions(translate, [])}
    assert conditions[REFUSED_CONDITION]["status"] == "False"
    assert "as 10.200.0.0/16" in conditions[REFUSED_CONDITION]["message"]
    assert conditions[UNTRANSLATED_CONDITION]["status"] == "False"


def test_a_remap_range_overlapping_the_consumers_is_refused():
    translate = forge.IPTranslator(["10.102.0.0/16"], "10.101.0.0/16", CONSUMER)
    assert translate("10.102.1.5") is None
    reason, message = translate.conflict
    assert reason == forge.REMAP_OVERLAPS_CONSUMER
    assert "node worker-1's pod range 10.101.1.0/24" in message


def test_ips_a_small_remap_range_cannot_hold_are_refused_not_shown_untranslated():
    translate = forge.IPTranslator(["10.0.0.0/16"], "10.200.0.0/24", ())
    status = local_status(running("10.0.3.7"), translate)
    assert status["podIP"] is None
    assert ip_condition(status)["reason"] == forge.POD_IP_NOT_TRANSLATABLE
    assert "beyond the first 256" in ip_condition(status)["message"]


def test_a_remap_range_of_another_family_holds_nothing_of_it():
    translate = forge.IPTranslator(["10.102.0.0/16", "fd00:102::/64"], "10.200.0.0/16", ())
    assert translate("10.102.0.1") == "10.200.0.1"
    assert translate("fd00:102::1") is None
    assert "another address family" in translate.problem


def test_a_pod_shows_at_most_one_ip_per_family_the_primary_first():
    translate = forge.IPTranslator(["10.102.0.0/16", "fd00:102::/64"], None, ())
    remote = running("10.102.0.5", podIPs=[{"ip": "10.102.0.5"}, {"ip": "fd00:102::5"}, {"ip": "10.102.0.6"}])
    status = local_status(remote, translate)
    assert status["podIP"] == "10.102.0.5"
    assert status["podIPs"] == [{"ip": "10.102.0.5"}, {"ip": "fd00:102::5"}]


@pytest.mark.parametrize("ip", ["not-an-ip", "10.102.0.5/32", "169.254.169.254"])
def test_garbage_and_special_ips_are_refused(ip):
    assert forge.IPTranslator(["10.102.0.0/16"], None)(ip) is None


@pytest.mark.parametrize("announced", ["0.0.0.0/0", "169.254.0.0/16", "::/0"])
def test_ranges_holding_addresses_no_pod_has_are_refused_whatever_the_consumer_uses(announced):
    assert forge.IPTranslator([announced], None).conflict is not None


def test_announced_ranges_are_bounded_and_garbage_ignored():
    translate = forge.IPTranslator(["nonsense", *(f"10.{n}.0.0/16" for n in range(102, 122))], None, ())
    assert len(translate.sources) == trust.PROVIDER_RANGES_LIMIT - 1
    assert translate.ignored[0] == "'nonsense'"
    assert translate.ignored[-1].endswith(f"beyond the first {trust.PROVIDER_RANGES_LIMIT}")
    assert "ignored announced ranges" in translation_conditions(translate, [])[-1]["message"]


def test_what_the_check_went_without_is_said():
    translate = forge.IPTranslator(["10.102.0.0/16"], None, CONSUMER)
    refused = translation_conditions(translate, ["Nodes (forbidden to this credential)"])[-1]
    assert refused["status"] == "False"
    assert "checked without the consumer's Nodes (forbidden to this credential)" in refused["message"]


def test_a_provider_cannot_set_the_conditions_the_virtual_kubelet_owns():
    spoofed = [{"type": forge.POD_IP_CONDITION, "status": "True"}, {"type": forge.REMOTE_CONDITION, "status": "True"}]
    status = local_status(running("192.168.7.7", conditions=spoofed), forge.IPTranslator(["10.102.0.0/16"], None))
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [(forge.POD_IP_CONDITION, "False")]


# -- the consumer's own ranges ---------------------------------------------------------------------


def test_the_consumers_ranges_come_from_nodes_servicecidrs_and_the_kubernetes_service():
    node = {
        "metadata": {"name": "worker-1"},
        "spec": {"podCIDR": "10.101.1.0/24"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "172.31.40.2"}, {"type": "Hostname", "address": "w"}]
        },
    }
    entries = [
        *trust.node_entries(node),
        *trust.service_cidr_entries({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.0.0.0/24"]}}),
        *trust.kubernetes_service_entries({"spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}}),
        *trust.api_server_entries({"endpoints": [{"addresses": [API_SERVER]}]}),
    ]
    own = trust.own_ranges(entries)
    described = {what for _, what in own}
    assert {"node worker-1's pod range", "node worker-1's address", "API server's address"} <= described
    assert len(own) == 5  # the Hostname is not an address
    assert trust.kubernetes_service_entries(None) == []


class ProbedClient:
    """Answers the one-item lists LocalRanges tries: forbidden, not served, or one object."""

    def __init__(self, answers: dict):
        self.answers = answers

    def list(self, resource, *, chunk_size):
        assert chunk_size == 1
        answer = self.answers[resource]

        async def listing():
            if isinstance(answer, int):
                raise api_error(answer)
            for item in answer:
                yield item

        return listing()


def api_error(code: int) -> ApiError:
    class Response:
        status_code = code

        def json(self):
            return {"kind": "Status", "code": code, "message": "no", "status": "Failure"}

    return ApiError(response=Response())


class Watched:
    """Stands for one of the reflection's cluster-wide informers."""

    def __init__(self, objects: dict):
        self.objects, self.handlers, self.synced = objects, [], asyncio.Event()

    def get(self, namespace, name):
        return self.objects.get((namespace, name))

    def on_change(self, handler):
        self.handlers.append(handler)

    def change(self, key, new):
        old, self.objects[key] = self.objects.get(key), new
        for handler in self.handlers:
            handler("MODIFIED", key, new, old)


def test_the_consumers_ranges_are_read_from_what_the_credential_allows():
    """Deployment mode: nodes are forbidden, ServiceCIDRs not served; the kubernetes Service comes from the
    reflection's watches. Listeners hear once when all has listed, then on each change."""
    kubernetes = ("default", "kubernetes")
    services = Watched({kubernetes: {"spec": {"clusterIP": "10.0.0.1"}}})
    slices = Watched({kubernetes: {"endpoints": [{"addresses": [API_SERVER]}]}})
    ranges = LocalRanges(ProbedClient({Node: 403, ServiceCIDR: 404}), "10.0.0.9")
    ranges.follow_kubernetes_service(services, slices)
    told = []
    ranges.listeners.append(lambda: told.append({what for _, what in ranges.ranges()}))

    async def scenario():
        for informer in (services, slices):
            informer.synced.set()
        await asyncio.wait_for(ranges._run(), 5)
        slices.change(("default", "other"), {"endpoints": [{"addresses": ["10.9.9.9"]}]})  # not the API server's
        slices.change(kubernetes, {"endpoints": [{"addresses": ["172.31.40.166"]}]})

    asyncio.run(scenario())
    assert ranges.unread == ["Nodes (forbidden to this credential)", "ServiceCIDRs (not served by this API server)"]
    assert len(told) == 2
    assert told[0] == {"virtual node's address", "kubernetes Service's cluster IP", "API server's address"}
    assert ("172.31.40.166/32", "API server's address") in {(str(n), what) for n, what in ranges.ranges()}


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
    status = local_status(remote, forge.IPTranslator(["10.102.0.0/16"], None))
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
    status = local_status(shadow, forge.IPTranslator(["10.102.0.0/16"], None))
    refused = next(c for c in status["conditions"] if c["type"] == forge.REMOTE_CONDITION)
    assert refused["reason"] == trust.PROVIDER_REASON
    assert len(refused["message"]) == trust.MESSAGE_LIMIT
    held = forge.held_pod_status({}, "AdmissionRejected", "D" * 5000, now="t")
    assert len(held["message"]) == trust.MESSAGE_LIMIT


def test_mirrored_events_are_bounded():
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "shop-c1"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "shop-c1"},
        "type": "Warning",
        "reason": "Totally Legit",
        "message": "\u202e" + "E" * 700_000,
    }
    compact = compact_event(Event.from_dict(event))
    assert compact["reason"] == trust.PROVIDER_REASON
    assert len(compact["message"]) == trust.MESSAGE_LIMIT
    assert not compact["message"].startswith("\u202e")


# -- a pod's reported status, bounded by the local spec ------------------------------------------------------------

SPEC = {
    "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
    "containers": [{"name": "app", "image": "registry.example/shop/app:1.4"}],
    "ephemeralContainers": [{"name": "debugger", "image": "busybox"}],
}


def container(name: str, **fields) -> dict:
    return {"name": name, "ready": True, "restartCount": 0, "state": {"running": {}}, **fields}


def kinds(refusals: list[trust.Refusal]) -> set[str]:
    return {refusal.kind for refusal in refusals}


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
    refusals = forge.report_refusals({"pod": remote}, SPEC)
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
    [refusal] = forge.report_refusals({"pod": remote, "recreations": 1}, SPEC)
    assert refusal.kind == trust.RESTART_COUNT_CLAMPED
    assert "2147483000" in refusal.message
    assert str(trust.RESTART_COUNT_CEILING) in refusal.message


def test_only_a_kubelets_condition_types_reach_the_pod_once_each():
    reported = [
        {"type": "Ready", "status": "True", "lastProbeTime": None},
        {"type": "example.com/load-balancer-ready", "status": "True"},  # a readiness gate's: the consumer's
        {"type": forge.POD_IP_CONDITION, "status": "True"},
        {"type": "Ready", "status": "False"},
        {"type": "Initialized", "status": "Maybe"},
        {"type": "PodScheduled", "status": "True"},  # the provider's scheduler's: the local pod shows its own
        "not a condition",
    ]
    conditions, refusals = trust.accepted_conditions(reported)
    assert conditions == [{"type": "Ready", "status": "True"}]
    assert len(refusals) == 5
    assert kinds(refusals) == {trust.POD_CONDITION_REFUSED}
    own = {"PodScheduled", forge.REMOTE_CONDITION, forge.POD_IP_CONDITION}
    assert own.isdisjoint(trust.PROVIDER_POD_CONDITIONS)


def test_fields_the_api_would_not_take_are_not_shown():
    app = container(
        "app",
        image="registry.example/shop/app:1.4",
        imageID="x" * (trust.IDENTIFIER_LIMIT + 1),
        containerID="containerd://\x1b[31m",
        ready="yes",
        started=True,
        resources={"limits": {"cpu": "64"}},  # not a field the local pod shows of the remote one
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
    refusals = forge.report_refusals({"pod": remote}, SPEC)
    assert kinds(refusals) == {trust.STATUS_FIELD_REFUSED}
    assert any("imageID, containerID, ready and 3 more of container 'app'" in r.message for r in refusals)


def test_conditions_and_states_times_must_be_times():
    reported = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00.5+02:00"}]
    assert trust.accepted_conditions(reported) == (reported, [])
    conditions, refusals = trust.accepted_conditions([{"type": "Ready", "status": "True", "lastTransitionTime": 7}])
    assert conditions == [{"type": "Ready", "status": "True"}]
    assert kinds(refusals) == {trust.STATUS_FIELD_REFUSED}


# -- usage a provider reports ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown", "kind"),
    [
        (0.25, 0.25, ""),
        ("250m", 0.25, ""),
        (3, 3.0, ""),
        (float("nan"), None, trust.USAGE_REFUSED),
        ("NaN", None, trust.USAGE_REFUSED),
        (float("inf"), None, trust.USAGE_REFUSED),
        (-1, None, trust.USAGE_REFUSED),
        ("lots", None, trust.USAGE_REFUSED),
        (None, None, trust.USAGE_REFUSED),
        (True, None, trust.USAGE_REFUSED),
        (1e300, 8.0, trust.USAGE_CLAMPED),
        ("1e400", 8.0, trust.USAGE_CLAMPED),
    ],
)
def test_usage_figures_are_finite_not_negative_and_clamped(value, shown, kind):
    assert trust.usage_figure(value, 8.0) == (shown, kind)


def test_usage_ceilings_are_the_limits_else_what_the_provider_can_allocate():
    spec = {
        "containers": [
            {"name": "limited", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
            {"name": "free"},
        ],
        "ephemeralContainers": [{"name": "debugger"}],
    }
    ceilings = trust.usage_ceilings(spec, {"cpu": "8", "memory": "32Gi", "pods": "110"})
    assert ceilings["limited"] == trust.UsageCeilings(0.5 * trust.CPU_LIMIT_TOLERANCE, 256 * 2**20)
    assert ceilings["free"] == ceilings["debugger"] == trust.UsageCeilings(16.0, 64 * 2**30)
    unknown = trust.usage_ceilings(spec, {"cpu": "1e400", "memory": "plenty"})["free"]
    assert unknown == trust.UsageCeilings(trust.CPU_CORES_CEILING, trust.MEMORY_BYTES_CEILING)
    assert trust.usage_ceilings(spec, "garbage")["free"] == unknown  # type: ignore[arg-type]
    pod_level = trust.usage_ceilings({**spec, "resources": {"limits": {"memory": "1Gi"}}}, {})
    assert pod_level["free"].memory_bytes == 2**30


def test_a_cpu_counter_rises_no_faster_than_its_ceiling():
    assert trust.bounded_counter(100.0, 10.0, None, 2.0) == 100.0  # a first sample: no rate yet
    assert trust.bounded_counter(1e15, 20.0, (100.0, 10.0), 2.0) == 120.0  # 2 cores for 10 s at most
    assert trust.bounded_counter(110.0, 20.0, (100.0, 10.0), 2.0) == 110.0
    assert trust.bounded_counter(3.0, 20.0, (100.0, 10.0), 2.0) == 3.0  # the container restarted
    assert trust.bounded_counter(1e300, 20.0, None, 2.0) == trust.CPU_SECONDS_CEILING
    assert trust.bounded_counter(500.0, 10.0, (100.0, 10.0), 2.0) == 100.0  # the same sample time again


def test_counters_of_no_container_of_the_spec_or_not_numbers_are_left_out():
    ceilings = {"app": trust.UsageCeilings(2.0, 2**30)}
    counters, refusals = trust.accepted_counters(
        {"name": "app", "cpuSeconds": 5, "memoryWorkingSetBytes": 1e300, "startTime": 1e300, "sampledAt": 99.5},
        ceilings,
        now=100.0,
    )
    assert counters == trust.ContainerUsageReport("app", 5.0, float(2**30), None, 99.5)
    assert kinds(refusals) == {trust.USAGE_CLAMPED, trust.USAGE_REFUSED}  # the working set, the start time
    for reported in ({"name": "ghost", "cpuSeconds": 1}, {"name": "app", "cpuSeconds": float("nan")}, "x"):
        counters, refusals = trust.accepted_counters(reported, ceilings, now=100.0)
        assert counters is None
        assert kinds(refusals) == {trust.USAGE_REFUSED}
    rates, refusals = trust.accepted_rates({"name": "app", "usage": {"cpu": "1e400", "memory": "10Mi"}}, ceilings)
    assert rates == trust.ContainerUsageReport("app", 2.0, float(10 * 2**20))
    assert kinds(refusals) == {trust.USAGE_CLAMPED}
    assert trust.accepted_rates({"name": "app", "usage": "much"}, ceilings)[0] == trust.ContainerUsageReport(
        "app", 0.0, 0.0
    )


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
    node = SimpleNamespace(healthy=True, settings=SimpleNamespace(node_ip="10.0.0.9"))
    return PodStatus(peering, node, SimpleNamespace(translate=None, network_down=None))


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


def test_refusals_are_remembered_per_pod_and_kind_within_a_bound():
    from catamaran.vk.refusals import RefusalEvents

    refusals = RefusalEvents(events=None, provider_id="p", memory=2)  # type: ignore[arg-type]
    web, db = ({"metadata": {"name": name, "namespace": "shop", "uid": name}} for name in ("web", "db"))
    clamped, other = trust.Refusal("UsageClamped", "a"), trust.Refusal("UsageClamped", "b")
    assert refusals.first_of_their_kind(web, [clamped, other]) == [clamped]  # one per kind
    assert refusals.first_of_their_kind(web, [other]) == []
    assert refusals.first_of_their_kind(db, [other]) == [other]  # another pod
    refusals.first_of_their_kind(db, [trust.Refusal("UsageRefused", "c")])  # web's is the oldest: forgotten
    assert refusals.first_of_their_kind(web, [clamped]) == [clamped]
