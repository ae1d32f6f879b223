"""A tenant's quota on this provider: sums, the admission check and reservations, and whether any one node could
hold a pod at all. Pure.

The quota is the tenant's sharing percentage of the allocatable of the nodes its placement admits,
so a consumer that ignores its virtual node's capacity (pods bound by nodeName, ShadowPods written
directly) still cannot take more. Usage is what the tenant's live pods request, one `pods` each.
A tenant lent node pools has one bucket per pool besides its own: a pod of a pool counts in its
pool's bucket only, against the pool's quota; a pod of none counts in the tenant's own bucket.

Between the manager's decision to create a pod and the moment its informer sees that pod, the
pod is held as a reservation; every admission counts reservations, so concurrent workers never
admit more than the quota together. A resize is reserved the same way until the pod is seen resized.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from fractions import Fraction

from .. import quantities


def tenant_quota(allocatable: Iterable[Mapping[str, str]], percentage: int) -> dict[str, Fraction]:
    """`percentage` of the summed allocatable, rounded down per resource like the virtual node's capacity."""
    total = quantities.free_resources(allocatable, ())
    return {resource: quantities.round_down(resource, amount * percentage / 100) for resource, amount in total.items()}


def pod_usage(requests: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """What one pod takes from its tenant's quota: its effective requests and one pod."""
    return {**{r: v for r, v in requests.items() if v}, "pods": Fraction(1)}


def excess(quota: Mapping[str, Fraction], used: Mapping[str, Fraction], wanted: Mapping[str, Fraction]) -> list[str]:
    """Each resource `wanted` would push past the quota, as "<resource> (requested X, in use Y, quota Z)"."""
    found = []
    for resource, amount in sorted(wanted.items()):
        if amount <= 0:
            continue
        limit = quota.get(resource, Fraction(0))
        in_use = used.get(resource, Fraction(0))
        if in_use + amount > limit:
            requested, in_use_text, limit_text = (
                quantities.format_quantity(resource, value) for value in (amount, in_use, limit)
            )
            found.append(f"{resource} (requested {requested}, in use {in_use_text}, quota {limit_text})")
    return found


def beyond_every_node(allocatable: Iterable[Mapping[str, str]], requests: Mapping[str, Fraction]) -> list[str]:
    """Why no single node could ever hold a pod of these requests (and its one pod), as "<resource> (requested X, the
    most one node has Y)" per resource above what the best-provided node has; [] when some node holds it all."""
    wanted = pod_usage(requests)
    nodes = [{r: quantities.parse(v) for r, v in node.items()} for node in allocatable]
    if any(all(amount <= node.get(r, Fraction(0)) for r, amount in wanted.items()) for node in nodes):
        return []
    found = []
    for resource, amount in sorted(wanted.items()):
        most = max((node.get(resource, Fraction(0)) for node in nodes), default=Fraction(0))
        if amount > most:
            requested, most_text = (quantities.format_quantity(resource, value) for value in (amount, most))
            found.append(f"{resource} (requested {requested}, the most one node has {most_text})")
    # Each resource fits some node, but no node fits them all together.
    return found or ["no one node has all of " + ", ".join(sorted(wanted))]


def formatted(amounts: Mapping[str, Fraction]) -> dict[str, str]:
    return {resource: quantities.format_quantity(resource, value) for resource, value in sorted(amounts.items())}


# Whose usage: (tenant, None) for the tenant's own pods, (tenant, pool) for a pool's.
Bucket = tuple[str, str | None]


class Ledger:
    """Usage per bucket (a tenant's own, or one of its pools') of the pods an informer sees, plus reservations for
    pods not seen yet. `pool` None everywhere is the tenant's own bucket.

    Each bucket's totals are kept as pods and reservations come and go, so an admission costs the same however many
    reservations are outstanding: summing them on every admission took a fifth of the manager's CPU while a
    thousand pods were being created."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[Bucket, dict[str, Fraction]]] = {}  # pod key -> (bucket, usage)
        self._used: dict[Bucket, dict[str, Fraction]] = {}
        self._reserved: dict[Hashable, tuple[Bucket, dict[str, Fraction]]] = {}
        # What each reservation adds to its bucket now (for a pod seen already, what its resize adds), and the sums.
        self._adds: dict[Hashable, tuple[Bucket, dict[str, Fraction]]] = {}
        self._added: dict[Bucket, dict[str, Fraction]] = {}

    def observe(
        self, key: Hashable, tenant: str | None, requests: Mapping[str, Fraction] | None, pool: str | None = None
    ) -> None:
        """A pod as the informer now sees it (`requests` None: gone), of `pool` (None: the tenant's own). Its
        reservation, if any, is settled once the pod is seen created, or seen with the reserved usage (a resize)."""
        previous = self._seen.pop(key, None)
        if previous is not None:
            _subtract(self._used.setdefault(previous[0], {}), previous[1])
        if requests is not None and tenant:
            bucket = (tenant, pool or None)
            usage = pod_usage(requests)
            self._seen[key] = (bucket, usage)
            quantities.add(self._used.setdefault(bucket, {}), usage)
            reserved = self._reserved.get(key)
            if reserved is not None and (previous is None or reserved[1] == usage):
                del self._reserved[key]  # created, or seen resized
        self._recount(key)

    def used(self, tenant: str, excluding: Hashable | None = None, pool: str | None = None) -> dict[str, Fraction]:
        """What the tenant's pods of `pool` (None: of no pool) take now, reservations included; `excluding` a pod
        being replaced."""
        bucket = (tenant, pool or None)
        total = {r: v for r, v in self._used.get(bucket, {}).items() if v}
        quantities.add(total, self._added.get(bucket, {}))
        for own in (self._seen.get(excluding), self._adds.get(excluding)):
            if own is not None and own[0] == bucket:
                _subtract(total, own[1])
        return total

    def admit(
        self,
        key: Hashable,
        tenant: str,
        requests: Mapping[str, Fraction],
        quota: Mapping[str, Fraction],
        pool: str | None = None,
    ) -> list[str]:
        """Reserve the pod's usage in its bucket (the tenant's own, or `pool`'s) when it fits that bucket's `quota`;
        otherwise return what it would exceed."""
        usage = pod_usage(requests)
        refused = excess(quota, self.used(tenant, excluding=key, pool=pool), usage)
        if not refused:
            self._reserved[key] = ((tenant, pool or None), usage)
            self._recount(key)
        return refused

    def reserves(self, key: Hashable) -> bool:
        """Whether a reservation waits for the pod to be seen (created, or resized)."""
        return key in self._reserved

    def release(self, key: Hashable) -> None:
        """Drop a reservation whose pod will not appear (creation failed, ShadowPod gone)."""
        if self._reserved.pop(key, None) is not None:
            self._recount(key)

    def _recount(self, key: Hashable) -> None:
        """What the pod's reservation adds to its bucket, after its reservation or what is seen of it changed."""
        previous = self._adds.pop(key, None)
        if previous is not None:
            _subtract(self._added.setdefault(previous[0], {}), previous[1])
        reserved = self._reserved.get(key)
        if reserved is None:
            return
        bucket, usage = reserved
        # A pod seen already holds a reservation while it is resized: what the resize adds counts.
        seen = self._seen.get(key)
        seen_usage = seen[1] if seen is not None and seen[0] == bucket else {}
        adds = {r: v - seen_usage.get(r, 0) for r, v in usage.items() if v > seen_usage.get(r, 0)}
        self._adds[key] = (bucket, adds)
        quantities.add(self._added.setdefault(bucket, {}), adds)


def _subtract(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for resource, amount in amounts.items():
        left = total.get(resource, Fraction(0)) - amount
        if left:
            total[resource] = left
        else:
            total.pop(resource, None)
