"""The virtual kubelet's stats (vk/kubelet/stats.py): the summary and resource metrics, counters and their rates,
forged counters.
"""

from __future__ import annotations

import pytest

from catamaran.vk.kubelet.stats import (
    ContainerUsage,
    CounterRates,
    PodUsage,
    Snapshot,
    UsageIntegrator,
    counted_containers,
    merged_items,
    resource_metrics,
    summary,
)
from catamaran.vk.reported_usage import usage_ceilings
from tests.unit.vk.kubelet.kubelet_requests import NODE


def test_cpu_seconds_are_integrated_and_never_decrease():
    integrator = UsageIntegrator()
    key = ("ns", "pod", "c")
    first = integrator.container(key, 0.5, now=100.0, started=90.0)
    assert first == pytest.approx(5.0)  # 0.5 cores since it started
    assert integrator.container(key, 0.25, now=104.0, started=90.0) == pytest.approx(6.0)
    assert integrator.container(key, 0.0, now=110.0, started=90.0) == pytest.approx(6.0)
    assert integrator.node(1.0, now=100.0) == 0.0
    assert integrator.node(2.0, now=103.0) == pytest.approx(6.0)
    integrator.forget_except(set())
    assert integrator.containers == {}


def _snapshot() -> Snapshot:
    pod = PodUsage("demo", "web-0", "uid-1", 1000.0, [ContainerUsage("web", 0.002, 4_194_304, 1.5, 1001.0)])
    return Snapshot(taken=2000.0, pods=[pod], node_cpu_cores=0.002, node_cpu_seconds=3.0, node_memory_bytes=4_194_304)


def test_resource_metrics_are_the_kubelets_text_format():
    text = resource_metrics(_snapshot())
    assert 'container_cpu_usage_seconds_total{container="web",namespace="demo",pod="web-0"} 1.5 2000000' in text
    assert 'container_memory_working_set_bytes{container="web",namespace="demo",pod="web-0"} 4194304.0 2000000' in text
    assert "node_cpu_usage_seconds_total 3.0 2000000" in text
    assert "node_memory_working_set_bytes 4194304.0 2000000" in text
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    assert text.endswith("resource_scrape_error 0\n")


def test_the_summary_holds_this_nodes_pods_and_its_own_totals():
    result = summary(_snapshot(), NODE, 900.0)
    assert result["node"]["nodeName"] == NODE
    assert result["node"]["cpu"]["usageNanoCores"] == 2_000_000
    assert result["node"]["memory"]["workingSetBytes"] == 4_194_304
    [pod] = result["pods"]
    assert pod["podRef"] == {"name": "web-0", "namespace": "demo", "uid": "uid-1"}
    assert pod["containers"][0]["cpu"]["usageCoreNanoSeconds"] == 1_500_000_000


def test_counter_rates_come_from_two_samples_and_survive_a_repeated_one():
    rates = CounterRates()
    key = ("ns", "pod", "c")
    assert rates.rate(key, 10.0, at=100.0) == 0.0  # one sample: no rate yet
    assert rates.rate(key, 12.0, at=104.0) == pytest.approx(0.5)
    assert rates.rate(key, 12.0, at=104.0) == pytest.approx(0.5)  # the same sample again (a cached read)
    assert rates.rate(key, 12.0, at=108.0) == 0.0
    rates.forget_except(set())
    assert rates.previous == {}


def test_counted_containers_pass_the_kubelets_counter_and_sample_time_on():
    spec = {"containers": [{"name": "main"}]}
    local = {"metadata": {"namespace": "shop", "name": "idle"}, "spec": spec, "status": {}}
    item = {"containers": [{"name": "main", "cpuSeconds": 0.02, "sampledAt": 1795592061.692, "startTime": 17.0}]}
    ceilings = usage_ceilings(local["spec"], {})
    (usage,), refusals = counted_containers(item, local, 1.0, CounterRates(), ceilings, now=1795592070.0)
    assert refusals == []
    assert (usage.cpu_seconds, usage.sampled_at, usage.start_time) == (0.02, 1795592061.692, 17.0)
    pod = PodUsage("shop", "idle", "uid", 1.0, [usage])
    text = resource_metrics(
        Snapshot(taken=1795592070.0, pods=[pod], node_cpu_cores=0, node_cpu_seconds=0, node_memory_bytes=0)
    )
    # metrics-server takes its rate from the counter's own sample time, not the moment the node answered.
    assert 'container_cpu_usage_seconds_total{container="main",namespace="shop",pod="idle"} 0.02 1795592061692' in text


def test_pods_without_counters_fall_back_to_their_usage_rates():
    counters = {"items": [{"metadata": {"name": "real"}, "containers": []}]}
    rates = {"items": [{"metadata": {"name": "real"}}, {"metadata": {"name": "on-a-fake-node"}}]}
    assert [(item["metadata"]["name"], counted) for item, counted in merged_items(counters, rates)] == [
        ("real", True),
        ("on-a-fake-node", False),
    ]
    assert [counted for _, counted in merged_items(None, rates)] == [False, False]
    assert merged_items(counters, None) == [(counters["items"][0], True)]


# -- counters a provider reports ---------------------------------------------------------------------------------


class CountersChannel:
    """A provider's manager serving forged podcounters (and garbage items) for twin `shop-c1`."""

    def __init__(self, containers: list[dict]):
        self.containers = containers

    async def get_json(self, path: str, params=None) -> dict:
        assert path.endswith("/namespaces/shop-c1/podcounters")
        items = [{"metadata": {"name": "web"}, "containers": self.containers}, {"metadata": 7}, "garbage"]
        return {"items": items}


class LaterEvents:
    def __init__(self):
        self.recorded: list[tuple] = []

    def later(self, involved: dict, kind_type: str, reason: str, message: str) -> None:
        self.recorded.append((involved["uid"], kind_type, reason, message))


def test_forged_counters_leave_the_summary_and_the_metrics_whole():
    import asyncio
    import json
    import math

    from catamaran.vk.kubelet.stats import NodeStats
    from catamaran.vk.refusals import RefusalEvents
    from catamaran.vk.reported_usage import MEMORY_BYTES_CEILING, USAGE_CLAMPED, USAGE_REFUSED

    web = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": {
            "containers": [
                {"name": "app", "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "cache"},
                {"name": "worker"},
            ]
        },
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
    }
    forged = [
        {"name": "app", "cpuSeconds": 2.0, "memoryWorkingSetBytes": 1e300, "sampledAt": float("inf")},
        {"name": "cache", "cpuSeconds": 3.0, "memoryWorkingSetBytes": 1e300},
        {"name": "worker", "cpuSeconds": float("nan"), "memoryWorkingSetBytes": 5.0},
        {"name": "ghost", "cpuSeconds": 1.0},
        {"cpuSeconds": 1.0},
    ]
    events = LaterEvents()
    stats = NodeStats(
        CountersChannel(forged),
        lambda: [web],
        lambda namespace: "shop-c1",
        NODE,
        refusals=RefusalEvents(events, "p"),  # type: ignore[arg-type]
        cache_seconds=0,
    )
    snapshot = asyncio.run(stats.snapshot())
    snapshot = asyncio.run(stats.snapshot())  # the same forgeries again: no Event more
    [pod] = snapshot.pods
    assert {c.name: c.memory_bytes for c in pod.containers} == {"app": 2**30, "cache": MEMORY_BYTES_CEILING}
    assert all(math.isfinite(c.cpu_seconds) and math.isfinite(c.start_time) for c in pod.containers)
    json.dumps(summary(snapshot, NODE, 900.0), allow_nan=False)
    text = resource_metrics(snapshot)
    assert "nan" not in text.lower()
    assert "inf" not in text.lower()
    assert sorted(reason for _, _, reason, _ in events.recorded) == [USAGE_CLAMPED, USAGE_REFUSED]
    assert all(uid == "u-1" and kind == "Warning" for uid, kind, _, _ in events.recorded)


def test_the_summarys_nanoseconds_stay_within_int64():
    pods = [PodUsage("shop", f"web-{i}", "u", 1.0, [ContainerUsage("app", 1.0, 1, 2.0**33, 1.0)]) for i in range(4)]
    snapshot = Snapshot(taken=10.0, pods=pods, node_cpu_cores=4.0, node_cpu_seconds=2.0**35, node_memory_bytes=4)
    result = summary(snapshot, NODE, 1.0)
    assert result["node"]["cpu"]["usageCoreNanoSeconds"] == 2**63 - 1
    assert result["pods"][0]["cpu"]["usageCoreNanoSeconds"] == 2**33 * 10**9


def test_a_counter_jumping_ahead_is_shown_rising_at_its_ceiling():
    from catamaran.vk.reported_usage import USAGE_CLAMPED

    local = {"metadata": {"namespace": "shop", "name": "web"}, "spec": {"containers": [{"name": "app"}]}}
    ceilings = usage_ceilings(local["spec"], {"cpu": "2"})  # no limit: twice what the provider can allocate
    rates = CounterRates()

    def sample(seconds: float, at: float):
        item = {"containers": [{"name": "app", "cpuSeconds": seconds, "sampledAt": at}]}
        return counted_containers(item, local, 1.0, rates, ceilings, now=at)

    assert sample(10.0, 100.0) == ([ContainerUsage("app", 0.0, 0, 10.0, 1.0, 100.0)], [])
    (usage,), refusals = sample(1e9, 110.0)
    assert (usage.cpu_seconds, usage.cpu_cores) == (50.0, pytest.approx(4.0))  # 4 cores for 10 s at most
    assert [refusal.kind for refusal in refusals] == [USAGE_CLAMPED]
    (usage,), refusals = sample(60.0, 120.0)  # honest again: 10 s in 10 s
    assert (usage.cpu_seconds, usage.cpu_cores, refusals) == (60.0, pytest.approx(1.0), [])
