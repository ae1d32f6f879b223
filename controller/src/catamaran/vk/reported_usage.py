"""What the consumer takes of the usage a provider reports (its pod counters, or metrics.k8s.io). Pure.

Usage figures are finite, non-negative and bounded by ceilings; what is refused or clamped is returned as a
vk/trust.py `Refusal`, which the virtual kubelet reports as a Warning Event.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from .. import quantities
from .trust import CONTAINER_STATUS_KINDS, Refusal, quoted_value

# The kinds of usage refusal, each a Warning Event's reason on the local pod (as vk/trust.py's).
USAGE_REFUSED = "UsageRefused"  # a counter that is not a finite, non-negative number, or of no container of the spec
USAGE_CLAMPED = "UsageClamped"

# A container's ceilings when neither its limits nor the provider's allocatable say more: above what any single node
# has (the largest machines have under 2000 CPUs and 32 TiB), and a container runs on one node.
CPU_CORES_CEILING = 4096.0
MEMORY_BYTES_CEILING = float(2**46)  # 64 TiB
# A container's cumulative CPU seconds at most (272 core-years): in nanoseconds, stats/summary's unit, inside int64,
# which its readers decode it into.
CPU_SECONDS_CEILING = float(2**33)
# A CPU rate between two samples may pass the limit a little: the samples' times and the CFS periods do not align.
CPU_LIMIT_TOLERANCE = 1.1
# Without limits a container may use what its node keeps from allocation for the system too: never as much again.
ALLOCATABLE_HEADROOM = 2
# A counter sampled at no time the provider says is timed here, on reads cached on both sides: two of its samples may
# be further apart than the times taken here, so its rise is bounded by twice its ceiling.
UNTIMED_SAMPLE_SLACK = 2
# Times a provider reports may be this far ahead of the consumer's clock.
CLOCK_SKEW_SECONDS = 3600.0


@dataclass(frozen=True)
class UsageCeilings:
    """The most one container can use: CPU (its rate, and its counter's rise) and working set."""

    cpu_cores: float
    memory_bytes: float


@dataclass(frozen=True)
class ContainerUsageReport:
    """One container's figures as accepted: cumulative CPU seconds (counters) or cores (rates), working set."""

    name: str
    cpu: float
    memory_bytes: float
    start_time: float | None = None  # unix seconds, when the report gave a real one
    sampled_at: float | None = None


def usage_ceilings(spec: Mapping, allocatable: Mapping) -> dict[str, UsageCeilings]:
    """Each container of a local pod's spec, and the most it can use: its limit (or its pod's) where the spec sets
    one, as the provider's kubelet enforces it; else ALLOCATABLE_HEADROOM times what the provider's usable nodes can
    allocate together (its ResourceOffer's status.allocatable); never more than the absolute ceilings."""
    pod_limits = (spec.get("resources") or {}).get("limits") or {}
    allocatable = allocatable if isinstance(allocatable, Mapping) else {}  # the provider's, as it reports it
    ceilings = {}
    for kind in CONTAINER_STATUS_KINDS.values():
        for container in spec.get(kind) or []:
            held = [(container.get("resources") or {}).get("limits") or {}, pod_limits]
            ceilings[container["name"]] = UsageCeilings(
                _ceiling("cpu", held, allocatable, CPU_LIMIT_TOLERANCE, CPU_CORES_CEILING),
                _ceiling("memory", held, allocatable, 1, MEMORY_BYTES_CEILING),
            )
    return ceilings


def _ceiling(resource: str, limits: list[Mapping], allocatable: Mapping, tolerance: float, absolute: float) -> float:
    known = [_quantity(held.get(resource), tolerance) for held in limits]
    if all(value is None for value in known):
        known = [_quantity(allocatable.get(resource), ALLOCATABLE_HEADROOM)]
    return min([absolute, *(value for value in known if value is not None)])


def _quantity(value: object, scale: float) -> float | None:
    """A positive quantity times `scale`, as a float (cut where a float would overflow); None when not one."""
    amount = _number(value)
    if amount is None or amount <= 0:
        return None
    return float(min(amount * Fraction(scale), _FLOAT_GUARD))


_FLOAT_GUARD = Fraction(2**64)


def _number(value: object) -> Fraction | None:
    """A finite number, from JSON or a Kubernetes quantity; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Fraction(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return quantities.parse(value)
        except (ValueError, ZeroDivisionError):
            return None
    return None


def usage_figure(value: object, ceiling: float) -> tuple[float | None, str]:
    """A reported usage figure as shown: None when it is not a finite number at least 0, else at most `ceiling`; and
    the kind of refusal (USAGE_REFUSED, USAGE_CLAMPED) or ""."""
    number = _number(value)
    if number is None or number < 0:
        return None, USAGE_REFUSED
    if number > Fraction(ceiling):
        return ceiling, USAGE_CLAMPED
    return float(number), ""


def reported_epoch(value: object, now: float) -> float | None:
    """A unix time a provider reported, when it is one: after 1970, and no further ahead of `now` than clock skew."""
    number = _number(value)
    if number is None or not 0 < number <= now + CLOCK_SKEW_SECONDS:
        return None
    return float(number)


def accepted_counters(
    reported: object, ceilings: Mapping[str, UsageCeilings], now: float
) -> tuple[ContainerUsageReport | None, list[Refusal]]:
    """One container of a podcounters item as shown: a container of the local spec (`ceilings` has one per
    container), its cumulative CPU seconds (at most CPU_SECONDS_CEILING) and its working set (at most its ceiling)
    finite numbers at least 0, else it is left out, as a kubelet leaves out a container it has no figures of; a time
    that is not one is left to the caller's default. Also what was refused or clamped."""
    named = _named(reported, ceilings)
    if named is None:
        return None, [_unknown_container(reported)]
    name, reported = named
    seconds = ("cpuSeconds", reported.get("cpuSeconds") or 0, CPU_SECONDS_CEILING)
    memory = ("memoryWorkingSetBytes", reported.get("memoryWorkingSetBytes") or 0, ceilings[name].memory_bytes)
    (cpu, memory_bytes), refusals = _figures(name, [seconds, memory])
    times = {key: reported_epoch(reported.get(key), now) for key in ("startTime", "sampledAt")}
    for key, value in times.items():
        if value is None and reported.get(key) is not None:
            refusals.append(
                Refusal(
                    USAGE_REFUSED,
                    f"reported {key} {quoted_value(reported[key])} of container {name!r}, not a time: not shown",
                )
            )
    if cpu is None or memory_bytes is None:
        return None, refusals
    return ContainerUsageReport(name, cpu, memory_bytes, times["startTime"], times["sampledAt"]), refusals


def accepted_rates(
    reported: object, ceilings: Mapping[str, UsageCeilings]
) -> tuple[ContainerUsageReport | None, list[Refusal]]:
    """One container of a metrics.k8s.io PodMetrics as shown: as accepted_counters, its CPU in cores (a rate)."""
    named = _named(reported, ceilings)
    if named is None:
        return None, [_unknown_container(reported)]
    name, reported = named
    usage = reported.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    ceiling = ceilings[name]
    cpu_figure = ("usage.cpu", usage.get("cpu") or 0, ceiling.cpu_cores)
    memory_figure = ("usage.memory", usage.get("memory") or 0, ceiling.memory_bytes)
    (cpu, memory_bytes), refusals = _figures(name, [cpu_figure, memory_figure])
    if cpu is None or memory_bytes is None:
        return None, refusals
    return ContainerUsageReport(name, cpu, memory_bytes), refusals


def _named(reported: object, ceilings: Mapping[str, UsageCeilings]) -> tuple[str, dict] | None:
    """(its name, the report) when `reported` is of a container of the local spec."""
    name = reported.get("name") if isinstance(reported, dict) else None
    return (name, reported) if isinstance(reported, dict) and isinstance(name, str) and name in ceilings else None


def _unknown_container(reported: object) -> Refusal:
    name = reported.get("name") if isinstance(reported, dict) else None
    return Refusal(
        USAGE_REFUSED, f"reported usage of container {quoted_value(name)}, not a container of the pod's spec: left out"
    )


def _figures(name: str, figures: list[tuple[str, object, float]]) -> tuple[list[float | None], list[Refusal]]:
    """(field, value, ceiling) of one container, as shown (usage_figure), and what was refused or clamped."""
    shown, refusals = [], []
    for key, value, ceiling in figures:
        figure, verdict = usage_figure(value, ceiling)
        shown.append(figure)
        if verdict == USAGE_REFUSED:
            message = f"reported {key} {quoted_value(value)} of container {name!r}, not a finite number at least 0"
            refusals.append(Refusal(USAGE_REFUSED, f"{message}: the container's usage is left out"))
        elif verdict == USAGE_CLAMPED:
            message = f"reported {key} {quoted_value(value)} of container {name!r}, above its ceiling"
            refusals.append(
                Refusal(
                    USAGE_CLAMPED, f"{message} (its limit, else what the provider can allocate): shown as {figure:g}"
                )
            )
    return shown, refusals


def bounded_counter(seconds: float, at: float, previous: tuple[float, float] | None, cores: float) -> float:
    """A container's cumulative CPU seconds as shown: since the previous sample shown (`previous`: its seconds and
    time) it rises by at most `cores` per second, so no rate taken from two samples passes the ceiling; a lower
    value is the container's restart and passes. Never above CPU_SECONDS_CEILING."""
    if previous is not None and seconds >= previous[0]:
        seconds = min(seconds, previous[0] + cores * max(at - previous[1], 0.0))
    return min(seconds, CPU_SECONDS_CEILING)


def counter_clamped(name: str, reported: float, shown: float, cores: float) -> Refusal:
    return Refusal(
        USAGE_CLAMPED,
        f"reported cpuSeconds {reported:g} of container {name!r}, rising faster than its ceiling of {cores:g} cores"
        f" (its limit, else what the provider can allocate): shown as {shown:g}",
    )
