"""`stats/summary` and `metrics/resource` for this virtual node's pods, from the provider's counters.

A kubelet reports cumulative CPU seconds, from which metrics-server derives rates. The provider's manager
serves its own kubelets' counters of a twin's pods (`metrics.catamaran.io` podcounters, provider/counters.py):
passed on as they are, they are monotonic across this process's restarts and never a made-up zero. A provider
without that API (an older manager, or one not serving it) has its `metrics.k8s.io` usage rates integrated here
instead, as a last resort. The node's figures are the sum over this node's pods: the virtual node's own load,
not the provider's. One list per twin namespace, at most `fan_out` at once, shared by concurrent callers and
cached for `cache_seconds`.

Nothing the provider reports is passed on unchecked (vk/reported_usage.py): only containers of the local pod's
spec, figures that are finite numbers at least 0, bounded by the container's limits or what the provider can
allocate, and CPU counters that rise no faster than that; what is refused or clamped is a Warning Event on the pod,
once per kind.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...constants import COUNTERS_GROUP, COUNTERS_RESOURCE, VERSION
from ...kube.reads import SharedReads
from ...logs import fields
from ..refusals import RefusalEvents
from ..reported_usage import (
    CPU_SECONDS_CEILING,
    UNTIMED_SAMPLE_SLACK,
    UsageCeilings,
    accepted_counters,
    accepted_rates,
    bounded_counter,
    counter_clamped,
    usage_ceilings,
)
from ..trust import Refusal
from .channel import ProviderChannel, ProviderError

log = logging.getLogger(__name__)

CACHE_SECONDS = 5.0
FAN_OUT = 8
# A provider without the counters API is asked again after this long (it may be upgraded meanwhile).
COUNTERS_RETRY_SECONDS = 60.0


@dataclass
class ContainerUsage:
    name: str
    cpu_cores: float
    memory_bytes: int
    cpu_seconds: float  # cumulative: the provider kubelet's counter, or integrated here
    start_time: float
    sampled_at: float | None = None  # unix seconds of the counter's sample (None: the snapshot's time)


@dataclass
class PodUsage:
    namespace: str
    name: str
    uid: str
    start_time: float
    containers: list[ContainerUsage] = field(default_factory=list)

    @property
    def cpu_cores(self) -> float:
        return sum(c.cpu_cores for c in self.containers)

    @property
    def memory_bytes(self) -> int:
        return sum(c.memory_bytes for c in self.containers)

    @property
    def cpu_seconds(self) -> float:
        return sum(c.cpu_seconds for c in self.containers)


@dataclass
class Snapshot:
    taken: float  # unix seconds
    pods: list[PodUsage]
    node_cpu_cores: float
    node_cpu_seconds: float
    node_memory_bytes: int


def _epoch(timestamp: str | None, default: float) -> float:
    if not timestamp or not isinstance(timestamp, str):
        return default
    try:
        return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default  # a local pod's status from before its times were checked (vk/trust.py)


def _started(pod: dict, container: str, default: float) -> float:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            running = (status.get("state") or {}).get("running") or {}
            return _epoch(running.get("startedAt"), default)
    return default


class UsageIntegrator:
    """Cumulative CPU seconds per container and for the node, from successive rate samples."""

    def __init__(self):
        self.containers: dict[tuple[str, str, str], tuple[float, float]] = {}  # key -> (seconds, at)
        self.node_seconds = 0.0
        self.node_at: float | None = None

    def container(self, key: tuple[str, str, str], cores: float, now: float, started: float) -> float:
        seconds, at = self.containers.get(key, (cores * max(now - started, 0.0), now))
        seconds += cores * max(now - at, 0.0)
        self.containers[key] = (seconds, now)
        return seconds

    def node(self, cores: float, now: float) -> float:
        if self.node_at is not None:
            self.node_seconds += cores * max(now - self.node_at, 0.0)
        self.node_at = now
        return self.node_seconds

    def forget_except(self, live: set[tuple[str, str, str]]) -> None:
        for key in [k for k in self.containers if k not in live]:
            del self.containers[key]


class CounterRates:
    """Each container's CPU rate between its last two counter samples (stats/summary's usageNanoCores)."""

    def __init__(self):
        self.previous: dict[tuple[str, str, str], tuple[float, float]] = {}  # key -> (seconds, at)
        self.rates: dict[tuple[str, str, str], float] = {}

    def rate(self, key: tuple[str, str, str], seconds: float, at: float) -> float:
        before = self.previous.get(key)
        if before is not None and at > before[1]:
            self.rates[key] = max(seconds - before[0], 0.0) / (at - before[1])
        if before is None or at > before[1]:
            self.previous[key] = (seconds, at)
        return self.rates.get(key, 0.0)

    def bounded(self, key: tuple[str, str, str], seconds: float, at: float, cores: float) -> float:
        """The counter as shown: rising no faster than `cores` since the last sample shown
        (reported_usage.bounded_counter)."""
        return bounded_counter(seconds, at, self.previous.get(key), cores)

    def forget_except(self, live: set[tuple[str, str, str]]) -> None:
        for key in [k for k in self.previous if k not in live]:
            del self.previous[key]
            self.rates.pop(key, None)


def counted_containers(
    item: dict, local: dict, start: float, rates: CounterRates, ceilings: Mapping[str, UsageCeilings], now: float
) -> tuple[list[ContainerUsage], list[Refusal]]:
    """A podcounters item's containers as usage (its counters as the provider's kubelet took them, checked against
    `ceilings`, one per container of the local pod's spec), and what was refused or clamped."""
    meta = local["metadata"]
    usages, refusals = [], []
    for reported in _listed(item.get("containers")):
        counters, found = accepted_counters(reported, ceilings, now)
        refusals += found
        if counters is None:
            continue
        key = (meta["namespace"], meta["name"], counters.name)
        at = counters.sampled_at or now
        cores = ceilings[counters.name].cpu_cores * (1 if counters.sampled_at else UNTIMED_SAMPLE_SLACK)
        seconds = rates.bounded(key, counters.cpu, at, cores)
        if seconds < counters.cpu:
            refusals.append(counter_clamped(counters.name, counters.cpu, seconds, cores))
        usages.append(
            ContainerUsage(
                name=counters.name,
                cpu_cores=rates.rate(key, seconds, at),
                memory_bytes=int(counters.memory_bytes),
                cpu_seconds=seconds,
                start_time=counters.start_time or _started(local, counters.name, start),
                sampled_at=counters.sampled_at,
            )
        )
    return usages, refusals


def _listed(value: object) -> list:
    return value if isinstance(value, list) else []


class NodeStats:
    def __init__(
        self,
        channel: ProviderChannel,
        pods_on_node: Callable[[], list[dict]],
        twin_of: Callable[[str], str | None],
        node_name: str,
        *,
        allocatable: Callable[[], Mapping] = dict,
        refusals: RefusalEvents | None = None,
        cache_seconds: float = CACHE_SECONDS,
        fan_out: int = FAN_OUT,
    ):
        self.channel = channel
        self.pods_on_node = pods_on_node
        self.twin_of = twin_of
        self.node_name = node_name
        self.allocatable = allocatable  # the provider's, from its ResourceOffer: a ceiling of usage without limits
        self.refusals = refusals
        self.limit = asyncio.Semaphore(fan_out)
        self.integrator = UsageIntegrator()
        self.rates = CounterRates()
        self.counters_unavailable_until = 0.0
        self.started = time.time()
        self.snapshots: SharedReads[None, Snapshot] = SharedReads(self._collect, cache_seconds)

    async def snapshot(self) -> Snapshot:
        return await self.snapshots.get(None)

    async def _collect(self, _: None = None) -> Snapshot:
        pods = self.pods_on_node()
        by_twin: dict[str, dict[str, dict]] = {}
        for pod in pods:
            meta = pod["metadata"]
            twin = self.twin_of(meta["namespace"])
            if twin:
                by_twin.setdefault(twin, {})[meta["name"]] = pod
        listed = await asyncio.gather(
            *(self._list(twin, _running(pods)) for twin, pods in by_twin.items()), return_exceptions=True
        )
        now = time.time()
        usages: list[PodUsage] = []
        for twin, result in zip(by_twin, listed, strict=True):
            if isinstance(result, BaseException):
                log.warning("pod metrics unavailable", extra=fields(namespace=twin, error=str(result)))
                continue
            for item, counted in merged_items(*result):
                local = by_twin[twin].get(_item_name(item) or "")
                if local is not None:
                    usages.append(self._pod_usage(item, counted, local, now))
        live = {(p.namespace, p.name, c.name) for p in usages for c in p.containers}
        self.rates.forget_except(live)
        self.integrator.forget_except(live)
        node_cores = sum(p.cpu_cores for p in usages)
        return Snapshot(
            taken=now,
            pods=usages,
            node_cpu_cores=node_cores,
            node_cpu_seconds=self.integrator.node(node_cores, now),
            node_memory_bytes=sum(p.memory_bytes for p in usages),
        )

    def _pod_usage(self, item: dict, counted: bool, local: dict, now: float) -> PodUsage:
        """One pod's usage from its counters (`counted`) or its usage rates; what was refused, reported."""
        meta = local["metadata"]
        start = _epoch((local.get("status") or {}).get("startTime"), now)
        usage = PodUsage(meta["namespace"], meta["name"], meta.get("uid") or "", start)
        ceilings = usage_ceilings(local.get("spec") or {}, self.allocatable() or {})
        if counted:
            usage.containers, refusals = counted_containers(item, local, start, self.rates, ceilings, now)
        else:
            usage.containers, refusals = self._integrated(item, local, start, now, ceilings)
        if refusals and self.refusals is not None:
            self.refusals.record_later(local, refusals)
        return usage

    def _integrated(
        self, item: dict, local: dict, start: float, now: float, ceilings: Mapping[str, UsageCeilings]
    ) -> tuple[list[ContainerUsage], list[Refusal]]:
        """A metrics.k8s.io item's containers, their rates integrated into cumulative seconds here."""
        meta = local["metadata"]
        usages, refusals = [], []
        for reported in _listed(item.get("containers")):
            rates, found = accepted_rates(reported, ceilings)
            refusals += found
            if rates is None:
                continue
            key = (meta["namespace"], meta["name"], rates.name)
            started = _started(local, rates.name, start)
            usages.append(
                ContainerUsage(
                    name=rates.name,
                    cpu_cores=rates.cpu,
                    memory_bytes=int(rates.memory_bytes),
                    cpu_seconds=min(self.integrator.container(key, rates.cpu, now, started), CPU_SECONDS_CEILING),
                    start_time=started,
                )
            )
        return usages, refusals

    async def _list(self, twin: str, wanted: set[str]) -> tuple[dict | None, dict | None]:
        """The twin's podcounters from the provider's manager, and its metrics.k8s.io pods when some `wanted` pod
        has no counters there (a kubelet the manager cannot read, such as a fake node's; or no such API)."""
        async with self.limit:
            counters = None
            if time.monotonic() >= self.counters_unavailable_until:
                path = f"/apis/{COUNTERS_GROUP}/{VERSION}/namespaces/{twin}/{COUNTERS_RESOURCE}"
                try:
                    counters = await self.channel.get_json(path)
                except ProviderError as error:
                    if error.status not in (404, 503):
                        raise
                    log.info(
                        "provider serves no pod counters; integrating its usage rates",
                        extra=fields(status=error.status),
                    )
                    self.counters_unavailable_until = time.monotonic() + COUNTERS_RETRY_SECONDS
            counted = {_item_name(item) for item in _items(counters)}
            if counters is not None and wanted <= counted:
                return counters, None
            return counters, await self.channel.get_json(f"/apis/metrics.k8s.io/v1beta1/namespaces/{twin}/pods")


def _running(pods: dict[str, dict]) -> set[str]:
    return {name for name, pod in pods.items() if (pod.get("status") or {}).get("phase") == "Running"}


def merged_items(counters: dict | None, rates: dict | None) -> list[tuple[dict, bool]]:
    """(item, counted) for each pod: its counters where the provider's manager has them, else its usage rates."""
    items = [(item, True) for item in _items(counters) if _item_name(item)]
    counted = {_item_name(item) for item, _ in items}
    items += [(item, False) for item in _items(rates) if _item_name(item) and _item_name(item) not in counted]
    return items


def _items(listed: object) -> list[dict]:
    """A provider's list's items that are objects (anything else in it is not a pod's figures)."""
    items = listed.get("items") if isinstance(listed, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _item_name(item: dict) -> str | None:
    meta = item.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _nanos(value: float) -> int:
    """Nanoseconds (or nanocores) as stats/summary holds them: readers decode them into int64, which a node's sum of
    many containers' bounded counters could still pass."""
    return min(int(value * 1e9), 2**63 - 1)


def summary(snapshot: Snapshot, node_name: str, node_started: float) -> dict:
    """The kubelet's stats/summary (statsapi.Summary), CPU and memory only."""
    at = _iso(snapshot.taken)

    def cpu(cores: float, seconds: float) -> dict:
        return {"time": at, "usageNanoCores": _nanos(cores), "usageCoreNanoSeconds": _nanos(seconds)}

    def memory(working_set: int) -> dict:
        return {"time": at, "workingSetBytes": working_set, "usageBytes": working_set}

    return {
        "node": {
            "nodeName": node_name,
            "startTime": _iso(node_started),
            "cpu": cpu(snapshot.node_cpu_cores, snapshot.node_cpu_seconds),
            "memory": memory(snapshot.node_memory_bytes),
        },
        "pods": [
            {
                "podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                "startTime": _iso(pod.start_time),
                "containers": [
                    {
                        "name": c.name,
                        "startTime": _iso(c.start_time),
                        "cpu": cpu(c.cpu_cores, c.cpu_seconds),
                        "memory": memory(c.memory_bytes),
                    }
                    for c in pod.containers
                ],
                "cpu": cpu(pod.cpu_cores, pod.cpu_seconds),
                "memory": memory(pod.memory_bytes),
            }
            for pod in snapshot.pods
        ],
    }


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def resource_metrics(snapshot: Snapshot) -> str:
    """The kubelet's /metrics/resource (Prometheus text), the metrics metrics-server reads."""
    ms = int(snapshot.taken * 1000)
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]], at: list[int] | None = None):
        lines.append(f"# HELP {name} [STABLE] {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        stamps = at or [ms] * len(samples)
        lines.extend(
            f"{name}{labels} {value!r} {stamp}" for (labels, value), stamp in zip(samples, stamps, strict=True)
        )

    def pod_labels(pod: PodUsage) -> str:
        return f'{{namespace="{_label(pod.namespace)}",pod="{_label(pod.name)}"}}'

    def container_labels(pod: PodUsage, container: ContainerUsage) -> str:
        return f'{{container="{_label(container.name)}",namespace="{_label(pod.namespace)}",pod="{_label(pod.name)}"}}'

    containers = [(pod, c) for pod in snapshot.pods for c in pod.containers]
    # metrics-server takes a rate from two samples' values and times: a counter keeps the time it was read at.
    family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
        [(container_labels(p, c), c.cpu_seconds) for p, c in containers],
        [int((c.sampled_at or snapshot.taken) * 1000) for _, c in containers],
    )
    family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
        [(container_labels(p, c), float(c.memory_bytes)) for p, c in containers],
    )
    family(
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
        [(container_labels(p, c), c.start_time) for p, c in containers],
    )
    family(
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
        [("", snapshot.node_cpu_seconds)],
    )
    family(
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
        [("", float(snapshot.node_memory_bytes))],
    )
    family(
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
        [(pod_labels(p), p.cpu_seconds) for p in snapshot.pods],
    )
    family(
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
        [(pod_labels(p), float(p.memory_bytes)) for p in snapshot.pods],
    )
    lines.append(
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise"
    )
    lines.append("# TYPE resource_scrape_error gauge")
    lines.append("resource_scrape_error 0")
    return "\n".join(lines) + "\n"
