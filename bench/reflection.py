"""Benchmark: resource reflection of ConfigMaps into a provider's twin namespace, against writing them there directly.

Runs on its own lab (bench/lab.yaml, state in .lab-bench/, ports 28000+, control planes and kwok only)
so it never disturbs the test lab. bench-consumer is peered to bench-provider; both managers and the
consumer's virtual kubelet run as child processes. Phases, all in one run:

  baseline      N ConfigMaps written straight into a plain namespace on the provider (bench-baseline);
                total until a watch has seen all N, and per object create sent -> seen by the watch.
  idle          N ConfigMaps written into bench-reflect on the consumer, offloaded to the provider
                (NamespaceOffloading, podOffloadingStrategy Remote, DefaultName mapping); total until
                a watch on the twin namespace (catamaran.io/managed-by=reflection) has seen every copy,
                and per object local object first seen -> its copy first seen (both watches are here).
  busy          the same into a second offloaded namespace, while the provider takes 20 changes/s
                (merge patches of a ConfigMap in bench-churn).
  memory        --namespaces offloaded namespaces x --objects-per-namespace ConfigMaps; wait until every
                copy is listed on the provider, then the virtual kubelet's VmRSS / VmHWM, and whether its
                virtual node stayed Ready (sampled every few seconds through the phase).

Every phase writes its objects the same way: a lightkube AsyncClient creating them concurrently, at
most 50 requests in flight, so the reflected/baseline ratio compares like with like. It prints
figures; it asserts nothing. A phase that does not complete within --timeout prints what it saw.

    .venv/bin/python bench/reflection.py                      # N = 1000, 200 namespaces x 50
    .venv/bin/python bench/reflection.py --n 200 --skip-memory
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx2  # noqa: E402
from harness import client_for, finish, memory_mib  # noqa: E402
from lightkube import ApiError, AsyncClient  # noqa: E402
from lightkube.models.meta_v1 import ObjectMeta  # noqa: E402
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node  # noqa: E402
from lightkube.types import OnErrorAction, OnErrorResult, PatchType  # noqa: E402

from catamaran.constants import (  # noqa: E402
    LABEL_MANAGED_BY,
    OFFLOADING_GROUP,
    VERSION,
    default_twin_namespace,
    virtual_node_name,
)
from catamaran.kube.resources import NamespaceOffloading  # noqa: E402
from catamaran_lab import config as lab_config  # noqa: E402
from catamaran_lab.lab import Lab  # noqa: E402
from tests.integration import federation  # noqa: E402

CONSUMER, PROVIDER = "bench-consumer", "bench-provider"
REFLECT_NAMESPACE = "bench-reflect"
BUSY_NAMESPACE = "bench-reflect-busy"
BASELINE_NAMESPACE = "bench-baseline"
CHURN_NAMESPACE = "bench-churn"
MEMORY_PREFIX = "bench-mem-"
LAB_FILE = REPO / "bench" / "lab.yaml"

REFLECTED = {LABEL_MANAGED_BY: "reflection"}  # on every copy the virtual kubelet writes
RUN_LABEL = "bench.catamaran.io/run"  # on every object this bench writes; a fresh value per run
IN_FLIGHT = 50
CHURN_PER_SECOND = 20
NODE_SAMPLE_SECONDS = 3
COUNT_POLL_SECONDS = 5
PROGRESS_SECONDS = 30
# The design's per-kind defaults (docs/design.md §4); the controller's own table wins if importable.
DESIGN_DEFAULT_WORKERS = {"configMaps": 4}

Key = tuple[str, str]  # (namespace, name)


# -- clients and writes ---------------------------------------------------------------------------


def config_map(namespace: str, name: str, run: str) -> ConfigMap:
    """A small ConfigMap: three short keys."""
    return ConfigMap(
        metadata=ObjectMeta(name=name, namespace=namespace, labels={RUN_LABEL: run}),
        data={"name": name, "colour": "blue", "size": "small"},
    )


def offloading(namespace: str) -> NamespaceOffloading:
    return NamespaceOffloading(
        apiVersion=f"{OFFLOADING_GROUP}/{VERSION}",
        kind="NamespaceOffloading",
        metadata={"name": "offloading", "namespace": namespace},
        spec={"podOffloadingStrategy": "Remote"},  # DefaultName mapping: twin <namespace>-<consumer>
    )


RETRIED_STATUS = {429, 500, 502, 503, 504}


async def create(client: AsyncClient, obj) -> None:
    """Create `obj`, retrying throttling, server errors and dropped connections; AlreadyExists counts as done."""
    for attempt in range(6):
        try:
            await client.create(obj)
            return
        except ApiError as error:
            if error.status.code == 409:
                return  # an earlier attempt got through, or (namespaces of a kept lab) it was there already
            if error.status.code not in RETRIED_STATUS or attempt == 5:
                raise
        except httpx2.TransportError:
            if attempt == 5:
                raise
        await asyncio.sleep(0.2 * 2**attempt)


async def create_all(client: AsyncClient, objects: Iterable) -> dict[Key, float]:
    """Create every object, at most IN_FLIGHT requests at once; returns when each create was first sent."""
    sent: dict[Key, float] = {}
    pending = iter(objects)

    async def worker() -> None:
        for obj in pending:  # one iterator shared by all workers: each object is taken once
            sent[(obj.metadata.namespace, obj.metadata.name)] = time.monotonic()
            await create(client, obj)

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return sent


# -- watching -------------------------------------------------------------------------------------


def retry_watch(error: Exception, count: int) -> OnErrorResult:
    """Reconnect a broken watch (from its last version; lightkube re-lists after 410 Gone), give up after 10."""
    return OnErrorResult(OnErrorAction.RAISE) if count > 10 else OnErrorResult(OnErrorAction.RETRY, sleep=1.0)


@dataclass
class Sighting:
    """First time each wanted ConfigMap of one namespace is seen, by a list and then a watch from its version."""

    client: AsyncClient
    namespace: str
    labels: dict[str, str]
    wanted: set[Key]
    seen: dict[Key, float] = field(default_factory=dict)
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    version: str | None = None

    def _saw(self, key: Key) -> None:
        if key in self.wanted and key not in self.seen:
            self.seen[key] = time.monotonic()
            if len(self.seen) == len(self.wanted):
                self.complete.set()

    async def prime(self) -> None:
        """List first, so that the watch starts at a known version and no creation can be missed."""
        listing = self.client.list(ConfigMap, namespace=self.namespace, labels=self.labels, chunk_size=500)
        async for obj in listing:
            self._saw((obj.metadata.namespace, obj.metadata.name))
        self.version = listing.resourceVersion

    async def run(self) -> None:
        """Runs until cancelled; only an unrecoverable watch error ends it early (raised)."""
        events = self.client.watch(
            ConfigMap,
            namespace=self.namespace,
            labels=self.labels,
            resource_version=self.version,
            on_error=retry_watch,
        )
        async for event, obj in events:
            if event != "DELETED":
                self._saw((obj.metadata.namespace, obj.metadata.name))


async def guard(processes: list[federation.ControllerProcess]) -> None:
    """Raise as soon as one of Catamaran's processes has exited: waiting on would only run into the timeout."""
    while True:
        for process in processes:
            if not process.running:
                code = process.process.returncode if process.process else None
                raise RuntimeError(
                    f"{process.name} exited ({code}); last lines of {process.log_path}:\n{process.tail()}"
                )
        await asyncio.sleep(1)


async def wait_until(
    done: Callable[[], bool],
    helpers: list[asyncio.Task],
    limit_s: float,
    progress: Callable[[], str],
    poll: float = 0.05,
) -> bool:
    """Wait for `done()`, at most `limit_s` s; a helper task that fails is raised. Prints progress now and then."""
    deadline = time.monotonic() + limit_s
    next_report = time.monotonic() + PROGRESS_SECONDS
    while not done():
        for task in helpers:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()
        now = time.monotonic()
        if now >= deadline:
            return False
        if now >= next_report:
            print(f"  ... {progress()}", flush=True)
            next_report = now + PROGRESS_SECONDS
        await asyncio.sleep(poll)
    return True


async def stop(tasks: Iterable[asyncio.Task]) -> None:
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# -- one measured phase ---------------------------------------------------------------------------


@dataclass
class Result:
    phase: str
    count: int
    seen: int
    total_s: float  # first create sent -> last object seen where it is measured (or the timeout)
    created_s: float  # first create sent -> every create answered
    latencies: list[float]
    complete: bool
    rss_mib: float = float("nan")
    notes: list[str] = field(default_factory=list)

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]

    @property
    def p50_s(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("nan")


async def measure(
    phase: str,
    lab: Lab,
    cluster: str,
    namespace: str,
    names: list[str],
    run: str,
    limit_s: float,
    processes: list[federation.ControllerProcess],
    reflected_to: str | None = None,
) -> Result:
    """Create `names` as ConfigMaps in cluster/namespace and time them until seen where they are measured.

    Without `reflected_to`: seen by a watch on the same namespace; latency = create sent -> seen.
    With `reflected_to` (the twin namespace on the provider): seen there by a watch on the reflection
    label; latency = the local object first seen by a watch on the consumer -> its copy first seen.
    """
    writer = client_for(lab, cluster)
    local = Sighting(client_for(lab, cluster), namespace, {RUN_LABEL: run}, {(namespace, n) for n in names})
    sightings = [local]
    target = local
    if reflected_to is not None:
        target = Sighting(client_for(lab, PROVIDER), reflected_to, REFLECTED, {(reflected_to, n) for n in names})
        sightings.append(target)
    helpers: list[asyncio.Task] = []
    try:
        for sighting in sightings:
            await sighting.prime()
        helpers = [asyncio.create_task(s.run()) for s in sightings]
        helpers.append(asyncio.create_task(guard(processes)))
        started = time.monotonic()
        creating = asyncio.create_task(create_all(writer, (config_map(namespace, n, run) for n in names)))
        helpers.append(creating)
        await wait_until(
            creating.done,
            helpers,
            limit_s,
            lambda: f"{phase}: still creating, {len(local.seen)}/{len(names)} seen in {namespace}",
        )
        if not creating.done():
            await stop([creating])
            raise RuntimeError(f"{phase}: creating {len(names)} ConfigMaps took more than {limit_s:.0f}s")
        sent = creating.result()
        helpers.remove(creating)
        created_s = time.monotonic() - started
        complete = await wait_until(
            target.complete.is_set,
            helpers,
            max(0.0, limit_s - created_s),
            lambda: f"{phase}: {len(target.seen)}/{len(names)} seen after {time.monotonic() - started:.0f}s",
        )
        end = max(target.seen.values()) if complete else time.monotonic()
        if reflected_to is None:
            latencies = [target.seen[k] - sent[k] for k in target.seen if k in sent]
        else:
            # The local watch has seen every object long before its copy in any sane run; should it not
            # have, the create time stands in for it.
            latencies = [
                target.seen[(reflected_to, n)] - local.seen.get((namespace, n), sent[(namespace, n)])
                for n in names
                if (reflected_to, n) in target.seen
            ]
        return Result(phase, len(names), len(target.seen), end - started, created_s, latencies, complete)
    finally:
        await stop(helpers)
        for client in (writer, *(s.client for s in sightings)):
            await client.close()


# -- offloading -----------------------------------------------------------------------------------


def twin_ready(obj: dict) -> bool:
    status = obj.get("status") or {}
    if status.get("offloadingPhase") == "Ready":
        return True
    return any(e.get("clusterID") == PROVIDER and e.get("phase") == "Ready" for e in status.get("clusters") or [])


async def offload(
    lab: Lab,
    namespaces: list[str],
    limit_s: float,
    processes: list[federation.ControllerProcess],
    strict: bool = True,
) -> tuple[float, list[str]]:
    """Create the namespaces and their NamespaceOffloadings and wait until every twin on the provider is Ready.

    Returns the seconds that took (or the limit) and the namespaces still without a Ready twin then;
    `strict` raises instead of returning any.
    """
    client = client_for(lab, CONSUMER)
    wanted = set(namespaces)
    ready: set[str] = set()

    async def poll() -> None:
        while True:
            async for obj in client.list(NamespaceOffloading, namespace="*", chunk_size=500):
                data = obj.to_dict()
                if data["metadata"]["namespace"] in wanted and twin_ready(data):
                    ready.add(data["metadata"]["namespace"])
            await asyncio.sleep(1)

    helpers: list[asyncio.Task] = []
    try:
        started = time.monotonic()
        await create_all(client, (Namespace(metadata=ObjectMeta(name=n)) for n in namespaces))
        await create_all(client, (offloading(n) for n in namespaces))
        helpers = [asyncio.create_task(poll()), asyncio.create_task(guard(processes))]
        await wait_until(
            lambda: ready >= wanted,
            helpers,
            limit_s,
            lambda: f"offloading: {len(ready & wanted)}/{len(wanted)} twins Ready",
            poll=0.2,
        )
        missing = sorted(wanted - ready)
        if missing and strict:
            raise RuntimeError(
                f"{len(missing)} offloaded namespace(s) had no Ready twin after {limit_s:.0f}s, e.g. {missing[:3]}"
            )
        return time.monotonic() - started, missing
    finally:
        await stop(helpers)
        await client.close()


# -- the busy provider ----------------------------------------------------------------------------


@dataclass
class Churn:
    rate: float
    done: int = 0
    failed: int = 0


async def churn(lab: Lab, stats: Churn) -> None:
    """Merge-patch a ConfigMap in bench-churn on the provider `rate` times a second until cancelled.

    Each change is sent on its own schedule (not after the previous answer), so a slow API server
    does not lower the rate it is offered.
    """
    client = client_for(lab, PROVIDER)
    in_flight: set[asyncio.Task] = set()

    async def change(index: int) -> None:
        try:
            await client.patch(
                ConfigMap,
                "churn",
                {"data": {"counter": str(index)}},
                namespace=CHURN_NAMESPACE,
                patch_type=PatchType.MERGE,
            )
            stats.done += 1
        except (ApiError, httpx2.HTTPError):
            stats.failed += 1

    try:
        await create(client, ConfigMap(metadata=ObjectMeta(name="churn", namespace=CHURN_NAMESPACE), data={}))
        started = time.monotonic()
        index = 0
        while True:
            index += 1
            await asyncio.sleep(max(0.0, started + index / stats.rate - time.monotonic()))
            task = asyncio.create_task(change(index))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
    finally:
        await stop(in_flight)
        await client.close()


async def busy_measure(lab: Lab, names: list[str], run: str, limit_s: float, processes) -> Result:
    stats = Churn(CHURN_PER_SECOND)
    churning = asyncio.create_task(churn(lab, stats))
    try:
        await asyncio.sleep(3)  # let the churn reach its rate before measuring
        if churning.done():
            churning.result()  # raises why it could not start
        before, started = stats.done, time.monotonic()
        result = await measure(
            "busy", lab, CONSUMER, BUSY_NAMESPACE, names, run, limit_s, processes,
            reflected_to=default_twin_namespace(BUSY_NAMESPACE, CONSUMER),
        )  # fmt: skip
        rate = (stats.done - before) / (time.monotonic() - started)
        result.notes.append(
            f"provider churn during the phase: {rate:.1f} changes/s achieved of {CHURN_PER_SECOND} offered"
            + (f", {stats.failed} failed" if stats.failed else "")
        )
        return result
    finally:
        await stop([churning])


# -- memory ---------------------------------------------------------------------------------------


async def node_ready(client: AsyncClient, node: str) -> str:
    try:
        obj = await client.get(Node, node)
    except ApiError as error:
        return f"error {error.status.code}"
    except httpx2.HTTPError as error:
        return f"unreachable ({type(error).__name__})"
    conditions = (obj.status.conditions if obj.status else None) or []
    return next((c.status for c in conditions if c.type == "Ready"), "missing")


@dataclass
class MemoryResult:
    namespaces: int
    per_namespace: int
    offload_s: float = float("nan")
    created_s: float = float("nan")
    copies_s: float = float("nan")
    copies: int = 0
    complete: bool = False
    rss_before: float = float("nan")
    rss: float = float("nan")
    peak: float = float("nan")
    samples: list[tuple[float, str]] = field(default_factory=list)
    not_ready: list[str] = field(default_factory=list)  # offloaded namespaces whose twin never turned Ready


async def memory_phase(lab: Lab, vk_pid: int, result: MemoryResult, run: str, limit_s: float, processes) -> None:
    """Fills `result` as it goes, so that a phase cut short still reports what it saw."""
    namespaces, per_namespace = result.namespaces, result.per_namespace
    result.rss_before, _ = memory_mib(vk_pid)
    local_names = [f"{MEMORY_PREFIX}{i:03d}" for i in range(namespaces)]
    object_names = [f"cm-{run}-{j:03d}" for j in range(per_namespace)]
    expected = {(default_twin_namespace(ns, CONSUMER), name) for ns in local_names for name in object_names}
    consumer, provider = client_for(lab, CONSUMER), client_for(lab, PROVIDER)
    started = time.monotonic()

    async def sample() -> None:
        node = virtual_node_name(PROVIDER)
        while True:
            result.samples.append((time.monotonic() - started, await node_ready(consumer, node)))
            await asyncio.sleep(NODE_SAMPLE_SECONDS)

    async def count() -> None:
        while True:
            found = 0
            async for obj in provider.list(ConfigMap, namespace="*", labels=REFLECTED, chunk_size=1000):
                found += (obj.metadata.namespace, obj.metadata.name) in expected
            result.copies = found
            if found == len(expected):
                return
            await asyncio.sleep(COUNT_POLL_SECONDS)

    helpers: list[asyncio.Task] = [asyncio.create_task(sample())]
    try:
        print(f"memory: offloading {namespaces} namespaces", flush=True)
        # Not strict: twins that never turn Ready are part of what this phase is to show, not a reason to stop.
        result.offload_s, result.not_ready = await offload(lab, local_names, limit_s, processes, strict=False)
        if result.not_ready:
            print(
                f"memory: {len(result.not_ready)}/{namespaces} twins still not Ready after {result.offload_s:.0f}s "
                f"(e.g. {result.not_ready[:3]}); going on"
            )
        else:
            print(f"memory: {namespaces} twins Ready in {result.offload_s:.1f}s")
        print(f"memory: creating {len(expected)} ConfigMaps", flush=True)
        created_at = time.monotonic()
        objects = (config_map(ns, name, run) for ns in local_names for name in object_names)
        await create_all(consumer, objects)
        result.created_s = time.monotonic() - created_at
        counting = asyncio.create_task(count())
        helpers += [counting, asyncio.create_task(guard(processes))]
        result.complete = await wait_until(
            counting.done,
            helpers,
            limit_s,
            lambda: f"memory: {result.copies}/{len(expected)} copies listed on the provider",
            poll=0.5,
        )
        if result.complete:
            counting.result()
        result.copies_s = time.monotonic() - created_at
        result.samples.append((time.monotonic() - started, await node_ready(consumer, virtual_node_name(PROVIDER))))
    finally:
        result.rss, result.peak = memory_mib(vk_pid)
        await stop(helpers)
        await consumer.close()
        await provider.close()


# -- setup and report -----------------------------------------------------------------------------


def reflection_workers(lab: Lab) -> str:
    """The ForeignCluster's reflection settings if it sets any, else the defaults."""
    try:
        from catamaran.vk.reflection.policy import DEFAULT_WORKERS as defaults
    except Exception:  # not written yet, or mid-edit: the design's figures stand in
        defaults = DESIGN_DEFAULT_WORKERS
    result = lab.kubectl(CONSUMER, "-n", "catamaran-system", "get", "foreignclusters", PROVIDER, "-o", "json")
    configured = (json.loads(result.stdout).get("spec") or {}).get("reflection")
    shown = ", ".join(f"{kind} {count}" for kind, count in defaults.items())
    if configured:
        return f"ForeignCluster spec.reflection = {json.dumps(configured)} (defaults: {shown})"
    return f"defaults (ForeignCluster spec.reflection unset): {shown}"


def wait_node_ready(lab: Lab, vk: federation.ControllerProcess) -> None:
    node = virtual_node_name(PROVIDER)
    deadline = time.monotonic() + 120
    while federation.node_ready(lab, CONSUMER, node) != "True":
        if not vk.running or time.monotonic() > deadline:
            raise SystemExit(f"virtual node {node} never became Ready; see {vk.log_path}")
        time.sleep(1)


def fmt(value: float, width: int, digits: int = 2) -> str:
    return f"{value:>{width}.{digits}f}"


def report(rows: list[Result], baseline: Result | None, memory: MemoryResult | None) -> None:
    print()
    print(
        f"{'phase':<10} {'N':>6} {'seen':>6} {'total s':>8} {'created s':>10} {'obj/s':>7} "
        f"{'p50 s':>7} {'p99 s':>7} {'/baseline':>10} {'VK RSS MiB':>11}"
    )
    for row in rows:
        comparable = baseline is not None and baseline.complete and row.complete and row is not baseline
        ratio = row.total_s / baseline.total_s if comparable else None
        print(
            f"{row.phase:<10} {row.count:>6} {row.seen:>6} {fmt(row.total_s, 8, 1)} {fmt(row.created_s, 10, 1)} "
            f"{fmt(row.seen / row.total_s if row.total_s else float('nan'), 7, 0)} "
            f"{fmt(row.p50_s, 7, 3)} {fmt(row.percentile(0.99), 7, 3)} "
            f"{fmt(ratio, 10) if ratio is not None else '':>10} {fmt(row.rss_mib, 11, 0)}"
            + ("" if row.complete else "   INCOMPLETE (timed out)")
        )
        for note in row.notes:
            print(f"{'':<11}{note}")
    print(
        "  total: first create sent -> last object seen where measured; created: until every create was answered.\n"
        "  p50/p99: baseline create sent -> seen by the watch; idle/busy local object first seen (watch on the\n"
        "  consumer) -> its copy first seen in the twin namespace (watch on the provider). /baseline: total ratio."
    )
    idle = next((r for r in rows if r.phase == "idle"), None)
    busy = next((r for r in rows if r.phase == "busy"), None)
    if idle and baseline:
        if idle.complete and baseline.complete:
            print(f"  ratio reflected total / baseline total (idle provider): {idle.total_s / baseline.total_s:.2f}")
        else:
            print("  ratio reflected total / baseline total: n/a, a phase did not complete")
    if busy and baseline and busy.complete and baseline.complete:
        print(f"  ratio reflected total / baseline total (busy provider): {busy.total_s / baseline.total_s:.2f}")
    if idle and busy and idle.complete and busy.complete:
        print(f"  ratio busy / idle reflection total: {busy.total_s / idle.total_s:.2f}")
    if memory is not None:
        expected = memory.namespaces * memory.per_namespace
        bad = [(t, s) for t, s in memory.samples if s != "True"]
        print()
        print(
            f"memory: {memory.namespaces} namespaces x {memory.per_namespace} ConfigMaps = {expected}; "
            f"{memory.copies}/{expected} copies listed on the provider"
            + ("" if memory.complete else " (INCOMPLETE: timed out)")
        )
        if memory.not_ready:
            print(f"  {len(memory.not_ready)} twin(s) never Ready, e.g. {memory.not_ready[:5]}")
        print(
            f"  twins {'gave up waiting' if memory.not_ready else 'all Ready'} after {memory.offload_s:.1f}s; "
            f"creates answered {memory.created_s:.1f}s and copies {'all listed' if memory.complete else 'gave up'} "
            f"{memory.copies_s:.1f}s after the first create (listed every {COUNT_POLL_SECONDS}s)"
        )
        print(
            f"  virtual kubelet RSS: {memory.rss:.0f} MiB now, {memory.peak:.0f} MiB peak (VmHWM, whole run); "
            f"{memory.rss_before:.0f} MiB before the phase"
        )
        if bad:
            shown = ", ".join(f"{status} at {t:.0f}s" for t, status in bad[:5])
            print(f"  virtual node Ready throughout: NO ({len(bad)}/{len(memory.samples)} samples not Ready: {shown})")
        else:
            print(f"  virtual node Ready throughout: yes ({len(memory.samples)} samples, every {NODE_SAMPLE_SECONDS}s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="ConfigMaps per timed phase (default: 1000)")
    parser.add_argument("--namespaces", type=int, default=200, help="offloaded namespaces, memory phase (200)")
    parser.add_argument(
        "--objects-per-namespace", type=int, default=50, help="ConfigMaps per namespace, memory phase (50)"
    )
    parser.add_argument("--skip-memory", action="store_true", help="leave out the memory phase")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    parser.add_argument("--timeout", type=float, default=600, help="seconds each phase may wait (default: 600)")
    args = parser.parse_args()

    run = time.strftime("%d%H%M%S")  # fresh object names, so a kept lab can run the bench again
    names = [f"cm-{run}-{i:05d}" for i in range(args.n)]
    os.environ.setdefault("CATAMARAN_LAB_DIR", str(REPO / ".lab-bench"))
    lab = Lab(root=Path(os.environ["CATAMARAN_LAB_DIR"]))
    processes: list[federation.ControllerProcess] = []
    rows: list[Result] = []
    baseline: Result | None = None
    memory: MemoryResult | None = None
    try:
        # Control planes and kwok only: ConfigMaps need no nodes, and real nodes would only cost time.
        wanted = lab.up(lab_config.load(LAB_FILE, clusters=2, real_nodes=False))
        print("bench lab: control planes + kwok fake nodes, real nodes off", flush=True)
        for cluster in (CONSUMER, PROVIDER):
            federation.install_crds(lab, cluster)
        federation.peer(lab, CONSUMER, PROVIDER, networking={"podCIDRRemap": "10.200.0.0/16"})
        vk = federation.virtual_kubelet(lab, CONSUMER, PROVIDER)
        # The provider's manager makes the twin namespaces; the consumer's sets offloadingPhase and the
        # namespace label (no webhook: this bench creates no pods).
        processes = [federation.manager(lab, PROVIDER), federation.manager(lab, CONSUMER), vk]
        for process in processes:
            process.start()
        wait_node_ready(lab, vk)
        for cluster, namespace in ((PROVIDER, BASELINE_NAMESPACE), (PROVIDER, CHURN_NAMESPACE)):
            lab.kubectl(cluster, "create", "namespace", namespace, check=False)

        print(f"N = {args.n} ConfigMaps per timed phase (3 small keys each), run id {run}")
        if not args.skip_memory:
            print(f"memory phase: {args.namespaces} namespaces x {args.objects_per_namespace} ConfigMaps")
        print(
            f"writes: lightkube AsyncClient creates, at most {IN_FLIGHT} in flight, the same for baseline and "
            "reflection; times are seen by watches in this process"
        )
        print(f"lab controllers: {wanted.control_plane.describe()} (bench/lab.yaml controlPlane)")
        print(f"reflection workers: {reflection_workers(lab)}")
        print(f"virtual kubelet: python -m catamaran {' '.join(vk.args)} (pid {vk.process.pid}, log {vk.log_path})")
        print(f"busy provider: {CHURN_PER_SECOND} changes/s to a ConfigMap in {PROVIDER}/{CHURN_NAMESPACE}")
        print(f"each phase waits at most {args.timeout:.0f}s", flush=True)

        seconds, _ = asyncio.run(offload(lab, [REFLECT_NAMESPACE], args.timeout, processes))
        print(f"offloaded {REFLECT_NAMESPACE}: twin Ready in {seconds:.1f}s", flush=True)

        print(f"baseline: {args.n} ConfigMaps straight into {PROVIDER}/{BASELINE_NAMESPACE}", flush=True)
        baseline = asyncio.run(
            measure("baseline", lab, PROVIDER, BASELINE_NAMESPACE, names, run, args.timeout, processes)
        )
        baseline.rss_mib = memory_mib(vk.process.pid)[0]
        rows.append(baseline)
        print(f"  {baseline.total_s:.1f}s", flush=True)

        twin = default_twin_namespace(REFLECT_NAMESPACE, CONSUMER)
        print(f"idle: {args.n} ConfigMaps into {CONSUMER}/{REFLECT_NAMESPACE}, copies in {PROVIDER}/{twin}", flush=True)
        idle = asyncio.run(
            measure("idle", lab, CONSUMER, REFLECT_NAMESPACE, names, run, args.timeout, processes, reflected_to=twin)
        )
        idle.rss_mib = memory_mib(vk.process.pid)[0]
        rows.append(idle)
        print(f"  {idle.seen}/{idle.count} copies in {idle.total_s:.1f}s", flush=True)

        if idle.seen == 0:
            print("no copy appeared on the provider: the busy and memory phases are skipped", flush=True)
        else:
            seconds, _ = asyncio.run(offload(lab, [BUSY_NAMESPACE], args.timeout, processes))
            print(f"offloaded {BUSY_NAMESPACE}: twin Ready in {seconds:.1f}s", flush=True)
            print(f"busy: {args.n} ConfigMaps into {CONSUMER}/{BUSY_NAMESPACE} under provider churn", flush=True)
            busy = asyncio.run(busy_measure(lab, names, run, args.timeout, processes))
            busy.rss_mib = memory_mib(vk.process.pid)[0]
            rows.append(busy)
            print(f"  {busy.seen}/{busy.count} copies in {busy.total_s:.1f}s", flush=True)
            if not args.skip_memory:
                memory = MemoryResult(args.namespaces, args.objects_per_namespace)
                asyncio.run(memory_phase(lab, vk.process.pid, memory, run, args.timeout, processes))
    finally:
        if rows:  # also after a failure: what was measured before it
            report(rows, baseline, memory)
        finish(lab, processes, args.keep_lab)


if __name__ == "__main__":
    main()
