"""Kubernetes resource quantities, pod requests, and the virtual node's share of a provider. Pure."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

# Decimal suffixes are powers of 1000 (n to E), binary ones powers of 1024 (Ki to Ei).
_SUFFIXES = {
    **{
        suffix: Fraction(1000) ** power
        for power, suffix in enumerate(("n", "u", "m", "", "k", "M", "G", "T", "P", "E"), -3)
    },
    **{suffix: Fraction(1024) ** power for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")

# Resources that may be fractional: cpu is expressed in millicores. Everything else counts whole units
# (bytes, pods, devices), so a share of it is rounded down to an integer.
MILLI_RESOURCES = frozenset({"cpu"})


# Pods and nodes repeat a handful of amounts ("100m", "64Mi"); each parse costs tens of microseconds in Fraction
# arithmetic, a cache hit well under one. Bounded, so that ever-new amounts (reported usage) cannot grow it.
@functools.lru_cache(maxsize=4096)
def parse(quantity: str | int | float) -> Fraction:
    text = str(quantity).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent:
        return value * Fraction(10) ** int(exponent[1:])
    return value * _SUFFIXES[suffix or ""]


def format_quantity(resource: str, value: Fraction) -> str:
    if resource in MILLI_RESOURCES:
        millis = int(value * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    return str(int(value))


def round_down(resource: str, value: Fraction) -> Fraction:
    if resource in MILLI_RESOURCES:
        return Fraction(int(value * 1000), 1000)
    return Fraction(int(value))


def holds_resources(wanted: Mapping, shown: Mapping) -> bool:
    """Does a container's `resources` (`shown`) hold every request and limit of `wanted` in equal amounts ("1000m"
    being "1": the API server writes quantities in its own canonical form)? It may hold more."""
    for kind in ("requests", "limits"):
        theirs = shown.get(kind) or {}
        for name, amount in (wanted.get(kind) or {}).items():
            if theirs.get(name) is None or parse(theirs[name]) != parse(amount):
                return False
    return True


def same_resources(a: Mapping, b: Mapping) -> bool:
    """Do two containers' `resources` ask for the same amounts (holds_resources both ways)? Other fields (claims)
    compare as they are."""
    if not (holds_resources(a, b) and holds_resources(b, a)):
        return False
    rest = ("requests", "limits")
    return {k: v for k, v in a.items() if k not in rest} == {k: v for k, v in b.items() if k not in rest}


def add(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> dict[str, Fraction]:
    for resource, amount in amounts.items():
        total[resource] = total.get(resource, Fraction(0)) + amount
    return total


def _requests(holder: Mapping) -> dict[str, Fraction]:
    """The requests of a container, or of a pod spec's pod-level `resources`."""
    resources = holder.get("resources") or {}
    # The API server copies limits into missing requests, but a raw spec may not have been defaulted yet.
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse(value) for name, value in merged.items()}


def pod_requests(spec: Mapping) -> dict[str, Fraction]:
    """Effective requests of a pod (init containers, sidecars, overhead), per resource the larger of its pod-level
    requests and its containers' (a pod-level request alone must not make a pod free)."""
    total = _container_requests(spec)
    for resource, amount in _requests(spec).items():  # pod-level `spec.resources`, limits defaulting requests
        total[resource] = max(total.get(resource, Fraction(0)), amount)
    overhead = {name: parse(value) for name, value in (spec.get("overhead") or {}).items()}
    return add(total, overhead)


def _container_requests(spec: Mapping) -> dict[str, Fraction]:
    running: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        add(running, _requests(container))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in spec.get("initContainers") or []:
        requests = _requests(container)
        if container.get("restartPolicy") == "Always":
            add(sidecars, requests)
            continue
        during = add(dict(sidecars), requests)
        for resource, amount in during.items():
            init_peak[resource] = max(init_peak.get(resource, Fraction(0)), amount)
    total = add(dict(running), sidecars)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, Fraction(0)), amount)
    return total


def free_resources(
    allocatable: Iterable[Mapping[str, str]], requests: Iterable[Mapping[str, Fraction]]
) -> dict[str, Fraction]:
    """Sum of node allocatable minus the given pod requests, never below zero."""
    free: dict[str, Fraction] = {}
    for node in allocatable:
        add(free, {name: parse(value) for name, value in node.items()})
    for pod in requests:
        for resource, amount in pod.items():
            if resource in free:
                free[resource] -= amount
    return {resource: max(amount, Fraction(0)) for resource, amount in free.items()}


def share(free: Mapping[str, str], percentage: int) -> tuple[dict[str, str], list[str]]:
    """The virtual node's capacity: `percentage` of `free`, rounded down per resource.

    Returns the capacity and the resources the provider has but that rounded down to zero.
    """
    capacity: dict[str, str] = {}
    vanished: list[str] = []
    for resource, text in sorted(free.items()):
        available = parse(text)
        amount = round_down(resource, available * percentage / 100)
        capacity[resource] = format_quantity(resource, amount)
        if amount == 0 and available > 0:
            vanished.append(resource)
    return capacity, vanished
