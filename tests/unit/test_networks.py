"""Issue 37: a provider's pod ranges are accepted only inside what the consumer consented to at peering
(spec.networking.podCIDRs), and never a part of another provider's. Pure decisions, then the virtual kubelet's
report with fakes."""

from __future__ import annotations

import asyncio

import pytest

from catamaran import networks
from catamaran.fabric.peerings import provider_behind, routed_ranges
from catamaran.fabric.routeagent import wanted
from catamaran.vk import forge
from catamaran.vk.pod_ips import CONSENT_CONDITION, RANGES_NOT_CONSENTED, REFUSED_CONDITION, PodIPs

CONSENT = ["10.102.0.0/16"]


@pytest.mark.parametrize("announced", ["8.8.8.0/24", "52.0.0.0/8", "10.0.0.0/8", "10.103.0.0/16"])
def test_a_range_outside_the_consent_is_refused(announced):
    accepted, refused = networks.judge_announced([announced], CONSENT)
    assert accepted == []
    assert refused == [(announced, networks.OUTSIDE_CONSENT, "outside the consented ranges (10.102.0.0/16)")]


def test_the_consent_and_its_sub_ranges_are_accepted():
    accepted, refused = networks.judge_announced(["10.102.0.0/16", "10.102.128.0/17", "10.102.3.0/24"], CONSENT)
    assert (accepted, refused) == (["10.102.0.0/16", "10.102.128.0/17", "10.102.3.0/24"], [])


def test_a_longer_prefix_of_another_providers_range_is_refused_even_inside_the_consent():
    others = {"cluster-3": ["10.101.0.0/16"]}
    accepted, refused = networks.judge_announced(["10.101.7.0/24"], ["10.96.0.0/12"], others)
    assert accepted == []
    assert refused == [
        ("10.101.7.0/24", networks.OTHER_PROVIDERS_RANGE, "overlaps provider cluster-3's range 10.101.0.0/16")
    ]


def test_no_consent_accepts_nothing_and_garbage_is_named():
    accepted, refused = networks.judge_announced(["10.102.0.0/16", "nonsense"], [])
    assert accepted == []
    assert [reason for _, reason, _ in refused] == [networks.OUTSIDE_CONSENT, networks.NOT_A_RANGE]


def test_what_a_peering_consents_to_see():
    assert networks.consented_view({"podCIDRs": CONSENT}) == CONSENT
    assert networks.consented_view({"podCIDRs": CONSENT, "podCIDRRemap": "100.64.0.0/16"}) == ["100.64.0.0/16"]
    assert networks.consented_view({"mode": "Fabric"}) is None
    # The virtual kubelet: the real ranges; without a record (a peering of an earlier release), no check until the
    # peering runs again, so that an upgrade keeps the peering's traffic.
    assert forge.consented_pod_cidrs({"mode": "Fabric", "podCIDRs": CONSENT}) == CONSENT
    assert forge.consented_pod_cidrs({"mode": "Fabric"}) is None
    assert forge.consented_pod_cidrs({"mode": "Fabric", "podCIDRRemap": "100.64.0.0/16"}) is None
    assert forge.consented_pod_cidrs({"mode": "Flat"}) is None


def test_the_translator_shows_and_routes_only_consented_ranges():
    translate = forge.IPTranslator(["10.102.0.0/16", "8.8.8.0/24"], None, (), consented=CONSENT)
    assert translate("10.102.1.5") == "10.102.1.5"
    assert translate("8.8.8.8") is None
    reason, message = translate.refusal("8.8.8.8")
    assert reason == forge.POD_IP_NOT_CONSENTED
    assert "8.8.8.0/24" in message
    assert "outside the consented ranges (10.102.0.0/16)" in message
    assert translate.seen_ranges() == ["10.102.0.0/16"]  # status.network.remotePodCIDRs: what the gateway routes


def test_a_new_consent_is_a_new_verdict():
    before = forge.IPTranslator(["10.102.0.0/16"], None, (), consented=CONSENT)
    after = forge.IPTranslator(["10.102.0.0/16"], None, (), consented=["10.102.0.0/15"])
    assert not before.same_as(after)


def test_route_agents_route_only_what_the_gateway_routes():
    foreigns = [
        {
            "spec": {"clusterID": "p1", "networking": {"mode": "Fabric", "podCIDRs": CONSENT}},
            "status": {"network": {"remotePodCIDRs": ["10.102.0.0/16", "52.0.0.0/8"]}},
        },
        {
            "spec": {"clusterID": "p2", "networking": {"mode": "Fabric", "podCIDRs": ["10.103.0.0/16"]}},
            "status": {"network": {"remotePodCIDRs": ["10.103.0.0/16", "10.102.9.0/24"]}},
        },
    ]
    routed, refused = routed_ranges(provider_behind(f) for f in foreigns)
    assert routed == {"p1": ("10.102.0.0/16",), "p2": ("10.103.0.0/16",)}
    assert set(refused) == {"p1", "p2"}
    ranges, _, _ = wanted(list(routed.items()), [("node-a", "172.30.0.1")], "node-b")
    assert ranges == ["10.102.0.0/16", "10.103.0.0/16"]


# -- the virtual kubelet's report, with fakes ------------------------------------------------------


class FakeLocal:
    """The consumer's API server as PodIPs uses it: the ForeignCluster read, its status patched."""

    def __init__(self):
        self.foreign = {"metadata": {"name": "p1", "namespace": "catamaran-system"}, "status": {}}
        self.patches: list[dict] = []

    async def get(self, resource, name, namespace=None):
        return self.foreign

    async def patch(self, resource, name, body, namespace=None, patch_type=None):
        self.patches.append(body)
        status = body.get("status") or {}
        self.foreign["status"].update(status)

    def list(self, resource, *, chunk_size):  # LocalRanges' probes: not started here
        raise AssertionError("not expected")


class FakeEvents:
    def __init__(self):
        self.recorded: list[tuple[str, str, str]] = []

    async def record(self, involved, kind_type, reason, message):
        self.recorded.append((kind_type, reason, message))


class FakeNodes:
    def get(self, namespace, name):
        return None  # the virtual node not created yet: only the ForeignCluster is written

    def on_change(self, handler):
        pass


def test_a_refused_range_is_a_condition_and_an_event_and_not_in_the_routed_ranges():
    from catamaran.vk.context import PeeringContext

    local, events = FakeLocal(), FakeEvents()
    peering = PeeringContext("c1", "p1", local, None, events, ("catamaran-system", "p1"))
    requeued = []
    ips = PodIPs(peering, "10.0.0.9", None, FakeNodes(), lambda: requeued.append(1), consented=CONSENT)

    async def scenario():
        ips.local_ranges.synced.set()
        ips.update_pod_cidrs(["10.102.0.0/16", "8.8.8.0/24"])
        loop = asyncio.create_task(ips._report_loop())
        await asyncio.sleep(0.05)
        first = dict(local.foreign["status"])
        ips.update_consent(["10.102.0.0/16", "8.8.8.0/24"])  # the admin's new consent, from a new peering run
        await asyncio.sleep(0.05)
        loop.cancel()
        return first

    first = asyncio.run(scenario())
    conditions = {c["type"]: c for c in first["conditions"]}
    assert conditions[CONSENT_CONDITION]["status"] == "True"
    assert conditions[CONSENT_CONDITION]["reason"] == RANGES_NOT_CONSENTED
    assert "8.8.8.0/24 (outside the consented ranges (10.102.0.0/16))" in conditions[CONSENT_CONDITION]["message"]
    assert conditions[REFUSED_CONDITION]["status"] == "False"
    assert first["network"] == {"remotePodCIDRs": ["10.102.0.0/16"]}
    assert ("Warning", RANGES_NOT_CONSENTED) in [(kind, reason) for kind, reason, _ in events.recorded]
    # The new consent: both ranges shown and routed, the condition back to False.
    assert local.foreign["status"]["network"] == {"remotePodCIDRs": ["10.102.0.0/16", "8.8.8.0/24"]}
    now = {c["type"]: c for c in local.foreign["status"]["conditions"]}
    assert now[CONSENT_CONDITION]["status"] == "False"
    assert requeued  # every pod's IP judged again
