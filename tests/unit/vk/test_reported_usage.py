"""Usage a provider reports (vk/reported_usage.py): finite, clamped, under its ceilings."""

from __future__ import annotations

import pytest

from catamaran.vk import reported_usage
from tests.unit.vk.provider_reports import kinds

# -- usage a provider reports ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown", "kind"),
    [
        (0.25, 0.25, ""),
        ("250m", 0.25, ""),
        (3, 3.0, ""),
        (float("nan"), None, reported_usage.USAGE_REFUSED),
        ("NaN", None, reported_usage.USAGE_REFUSED),
        (float("inf"), None, reported_usage.USAGE_REFUSED),
        (-1, None, reported_usage.USAGE_REFUSED),
        ("lots", None, reported_usage.USAGE_REFUSED),
        (None, None, reported_usage.USAGE_REFUSED),
        (True, None, reported_usage.USAGE_REFUSED),
        (1e300, 8.0, reported_usage.USAGE_CLAMPED),
        ("1e400", 8.0, reported_usage.USAGE_CLAMPED),
    ],
)
def test_usage_figures_are_finite_not_negative_and_clamped(value, shown, kind):
    assert reported_usage.usage_figure(value, 8.0) == (shown, kind)


def test_usage_ceilings_are_the_limits_else_what_the_provider_can_allocate():
    spec = {
        "containers": [
            {"name": "limited", "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
            {"name": "free"},
        ],
        "ephemeralContainers": [{"name": "debugger"}],
    }
    ceilings = reported_usage.usage_ceilings(spec, {"cpu": "8", "memory": "32Gi", "pods": "110"})
    assert ceilings["limited"] == reported_usage.UsageCeilings(0.5 * reported_usage.CPU_LIMIT_TOLERANCE, 256 * 2**20)
    assert ceilings["free"] == ceilings["debugger"] == reported_usage.UsageCeilings(16.0, 64 * 2**30)
    unknown = reported_usage.usage_ceilings(spec, {"cpu": "1e400", "memory": "plenty"})["free"]
    assert unknown == reported_usage.UsageCeilings(
        reported_usage.CPU_CORES_CEILING, reported_usage.MEMORY_BYTES_CEILING
    )
    assert reported_usage.usage_ceilings(spec, "garbage")["free"] == unknown  # type: ignore[arg-type]
    pod_level = reported_usage.usage_ceilings({**spec, "resources": {"limits": {"memory": "1Gi"}}}, {})
    assert pod_level["free"].memory_bytes == 2**30


def test_a_cpu_counter_rises_no_faster_than_its_ceiling():
    assert reported_usage.bounded_counter(100.0, 10.0, None, 2.0) == 100.0  # a first sample: no rate yet
    assert reported_usage.bounded_counter(1e15, 20.0, (100.0, 10.0), 2.0) == 120.0  # 2 cores for 10 s at most
    assert reported_usage.bounded_counter(110.0, 20.0, (100.0, 10.0), 2.0) == 110.0
    assert reported_usage.bounded_counter(3.0, 20.0, (100.0, 10.0), 2.0) == 3.0  # the container restarted
    assert reported_usage.bounded_counter(1e300, 20.0, None, 2.0) == reported_usage.CPU_SECONDS_CEILING
    assert reported_usage.bounded_counter(500.0, 10.0, (100.0, 10.0), 2.0) == 100.0  # the same sample time again


def test_counters_of_no_container_of_the_spec_or_not_numbers_are_left_out():
    ceilings = {"app": reported_usage.UsageCeilings(2.0, 2**30)}
    counters, refusals = reported_usage.accepted_counters(
        {"name": "app", "cpuSeconds": 5, "memoryWorkingSetBytes": 1e300, "startTime": 1e300, "sampledAt": 99.5},
        ceilings,
        now=100.0,
    )
    assert counters == reported_usage.ContainerUsageReport("app", 5.0, float(2**30), None, 99.5)
    assert kinds(refusals) == {
        reported_usage.USAGE_CLAMPED,
        reported_usage.USAGE_REFUSED,
    }  # the working set, the start time
    for reported in ({"name": "ghost", "cpuSeconds": 1}, {"name": "app", "cpuSeconds": float("nan")}, "x"):
        counters, refusals = reported_usage.accepted_counters(reported, ceilings, now=100.0)
        assert counters is None
        assert kinds(refusals) == {reported_usage.USAGE_REFUSED}
    rates, refusals = reported_usage.accepted_rates(
        {"name": "app", "usage": {"cpu": "1e400", "memory": "10Mi"}}, ceilings
    )
    assert rates == reported_usage.ContainerUsageReport("app", 2.0, float(10 * 2**20))
    assert kinds(refusals) == {reported_usage.USAGE_CLAMPED}
    assert reported_usage.accepted_rates({"name": "app", "usage": "much"}, ceilings)[
        0
    ] == reported_usage.ContainerUsageReport("app", 0.0, 0.0)
