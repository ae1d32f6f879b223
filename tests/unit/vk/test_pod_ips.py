"""A refused pod range (issue 37) is a condition and an Event and is not routed (vk/pod_ips.py), with fakes."""

from __future__ import annotations

import asyncio

from catamaran.vk.pod_ips import CONSENT_CONDITION, RANGES_NOT_CONSENTED, REFUSED_CONDITION, PodIPs
from tests.unit.consent import CONSENT

# -- the virtual kubelet's report, with fakes ------------------------------------------------------


class FakeLocal:
    """The consumer's API server as PodIPs uses it: the ForeignCluster read, its status patched."""

    def __init__(self):
        meta = {"name": "p1", "namespace": "catamaran-system", "resourceVersion": "1"}
        self.foreign = {"metadata": meta, "status": {}}
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
