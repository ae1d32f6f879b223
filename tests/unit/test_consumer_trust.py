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
from catamaran.vk.pod_ips import NO_PROVIDER_RANGES, REFUSED_CONDITION, UNTRANSLATED_CONDITION, translation_conditions
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


def local_status(shadow_status: dict, translate, local: dict | None = None) -> dict:
    return forge.local_pod_status(
        local or {}, shadow_status, node_ip="10.0.0.9", translate=translate, provider_reachable=True, now="t"
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
        (REFUSED_CONDITION, "True", NO_PROVIDER_RANGES)
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
