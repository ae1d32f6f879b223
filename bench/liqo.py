"""Benchmark: Catamaran side by side with Liqo, the reference system, doing the same work on the same lab in one run.

Runs on the bench lab (bench/lab.yaml, state in .lab-bench/, ports 28000+, control planes and kwok only): one
consumer and one provider. Catamaran goes first (the offloading bench's Federation: a manager on the provider, a
virtual kubelet for the consumer), then the lab is brought down and up again and Liqo goes (bench/liqo_peer.py:
both controller managers with networking off, the crd-replicator, its virtual kubelet), so each starts on
clean clusters. For each system, in order:

  local        for each --n: the Deployment on the consumer's own kwok nodes first, the control planes' own pace
               (the table prints offloaded/local for each system beside Catamaran/Liqo), and the floor it sets:
               its control-plane CPU twice (each pod lives on both sides) over the machine's CPUs.
  offload      for each --n: a Deployment of N pods onto the one virtual node; total time until a watch here
               has seen them all Ready, per-pod start-up (first seen -> Ready) p50/p99; CPU seconds and peak RSS
               of each agent; API requests on each cluster (the kube-apiservers' apiserver_request_total).
  recreate     --recreate remote pods deleted on the provider one after another -> Running again (p50/p99).
  reflection   --configmaps ConfigMaps created in the offloaded namespace (50 in flight); created -> the remote
               copy first seen by a watch on the provider (p50/p99).
  agent kill   a Deployment of --kill-pods pods; the virtual kubelet is SIGKILLed once half are Ready and started
               again; time to all Ready, and remote pods lost or duplicated.

Both workloads carry their own virtual node's node selector and toleration (Liqo's webhook is not run, so it
cannot add them; Catamaran's workload gets the same treatment). Client rate limits: Catamaran has no client-side
limiter; Liqo's processes get --client-qps/--client-max-burst (default the lab controllers' 5000/10000). Prints
every setting, the machine's speed around each system's runs (tests/timing.py's reference loop: the host drifts),
a side-by-side table with the ratio Catamaran/Liqo, writes bench/results/liqo-*.csv and
bench/results/liqo-*.png. Asserts nothing.

Both clusters share the machine's CPUs unless --cpu-per-side puts each on a CPU of its own, as clusters on machines
of their own: the consumer's control plane and the agents working for it (a virtual kubelet, anything named after
the consumer) on CPU 0, the provider's and its agents on CPU 1; the bench's own watch runs on either. Its local run
then has the consumer's one CPU, and the floor is each side redoing the pods' work on its own CPU, side by side.
Its files end in -cpu-per-side.

Liqo comes from a checkout of a pinned tag, not from this repository (`--liqo-src`, default
~/.cache/catamaran-bench/liqo-v1.2.0/src); its binaries are built once into ../bin beside it:

    git --git-dir=<mirror of liqotech/liqo> archive v1.2.0 | tar -x -C ~/.cache/catamaran-bench/liqo-v1.2.0/src
    .venv/bin/python bench/liqo.py                          # N = 1000
    .venv/bin/python bench/liqo.py --n 1000 --n 10000
    .venv/bin/python bench/liqo.py --system liqo --keep-lab # one system only
    .venv/bin/python bench/liqo.py --cpu-per-side           # each cluster on a CPU of its own
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
import liqo_peer
import offloading
from prometheus_client.parser import text_string_to_metric_families

from catamaran.constants import DEFAULT_OBJECT_QUOTA, default_twin_namespace, virtual_node_name
from catamaran_lab.lab import Lab
from tests.integration import federation
from tests.integration.manifests import container, deployment
from tests.timing import reference_cpu_seconds

CONSUMER, PROVIDER = offloading.CONSUMER, offloading.PROVIDERS[0]
NAMESPACE = offloading.NAMESPACE
SYSTEMS = ["catamaran", "liqo"]
CONFIG_MAP_PREFIX = "bench-cm-"
IN_FLIGHT = 50
DEFAULT_N = [1000]
OBJECT_QUOTA = {**DEFAULT_OBJECT_QUOTA, "configmaps": "5000"}


class CatamaranPeering(offloading.Federation):
    """The offloading bench's Federation with the few things the side-by-side run asks of either system."""

    def start(self) -> None:
        super().start()
        # The default terms cap a twin namespace at 1000 ConfigMaps, kube-root-ca.crt included: one of the
        # reflection run's 1000 could never be copied. A provider admin raises it for this work (printed).
        federation.grant_terms(self.lab, CONSUMER, PROVIDER, objectQuota=OBJECT_QUOTA)

    def offload_namespace(self, namespace: str) -> str:
        self.offload(CONSUMER, namespace)
        return default_twin_namespace(namespace, CONSUMER)

    def node_selector(self) -> dict:
        return {"catamaran.io/type": "virtual-node"}

    def toleration(self) -> dict:
        return dict(offloading.VIRTUAL_NODE_TOLERATION)

    @property
    def node_name(self) -> str:
        return virtual_node_name(PROVIDER)

    def restart_agent(self) -> None:
        agent = self.processes[f"vk {CONSUMER}/{PROVIDER}"]
        agent.process.kill()
        agent.process.wait()
        agent.start()

    def describe(self) -> list[str]:
        return [
            f"{name}: python -m catamaran {' '.join(p.args)} (log {p.log_path})" for name, p in self.processes.items()
        ]


class LiqoPeering(liqo_peer.LiqoPeering):
    def offload_namespace(self, namespace: str) -> str:
        return self.offload(namespace)


def workload(peer, name: str, replicas: int) -> dict:
    """The offloading bench's pod, placed on the system's virtual node by its own selector and toleration."""
    spec = {
        "containers": [container(cpu="10m", memory="16Mi")],
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": peer.node_selector(),
        "tolerations": [peer.toleration()],
    }
    return deployment(name, replicas, spec, NAMESPACE)


# -- API requests from the kube-apiservers' own metrics ---------------------------------------------------


async def api_requests(lab: Lab, cluster: str) -> dict[str, float]:
    """apiserver_request_total by verb and resource (with subresource): what this API server has served so far."""
    client = harness.client_for(lab, cluster)
    try:
        response = await client._client._client.get("/metrics")
        response.raise_for_status()
        text = response.text
    finally:
        await client.close()
    served: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                labels = sample.labels
                resource = "/".join(filter(None, (labels.get("resource"), labels.get("subresource"))))
                key = f"{labels.get('verb')} {resource or '-'}"
                served[key] = served.get(key, 0.0) + sample.value
    return served


def api_counts(lab: Lab) -> dict[str, dict[str, float]]:
    async def both() -> list[dict[str, float]]:
        return await asyncio.gather(*(api_requests(lab, c) for c in (CONSUMER, PROVIDER)))

    return dict(zip((CONSUMER, PROVIDER), asyncio.run(both()), strict=True))


def api_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    delta = {key: value - before.get(key, 0.0) for key, value in after.items()}
    return dict(sorted(((k, v) for k, v in delta.items() if v > 0), key=lambda item: -item[1]))


# -- the measurements ----------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What one system did, by figure name; start-up series and per-agent figures for the charts."""

    values: dict[str, float] = field(default_factory=dict)
    startups: dict[int, list[float]] = field(default_factory=dict)
    agents: dict[int, dict[str, tuple[float, float]]] = field(default_factory=dict)  # N -> agent -> (CPU s, peak MiB)
    local_cpu: dict[int, dict[str, float]] = field(default_factory=dict)  # N -> component -> CPU s of the local run


def side(name: str) -> str:
    """Which cluster an agent works for: a virtual kubelet and anything named after the consumer, else the provider."""
    return "consumer" if name.startswith("vk ") or name.endswith(CONSUMER) else "provider"


def settle(peer, window_s: float = 3.0, idle_cpu_s: float = 0.1, limit_s: float = 300) -> float:
    """Wait until the agents are idle (less than `idle_cpu_s` CPU together in `window_s`): work an agent does after
    the pods are Ready (Liqo writes token Secrets beside the pods, not before them) is still the offload's."""
    started = time.monotonic()
    used = sum(peer.cpu().values())
    while time.monotonic() - started < limit_s:
        time.sleep(window_s)
        now = sum(peer.cpu().values())
        if now - used < idle_cpu_s:
            break
        used = now
    return time.monotonic() - started


# The CPUs this bench and the lab may use: every run of it is CPU-bound (bench/results/README.md).
CPUS = len(os.sched_getaffinity(0))
# --cpu-per-side: cluster -> the CPUs its control plane and its agents run on (empty: all share every CPU).
SIDE_CPUS: dict[str, set[int]] = {}
LOCAL_TOTAL = "N={size} local total s"
FLOOR = "N={size} floor s"


def control_planes(cpu_s: dict[str, float]) -> dict[str, float]:
    """The lab clusters' own components (API servers, etcd, controllers, schedulers, kwok), not the agents."""
    return {name: used for name, used in cpu_s.items() if name.split(" ")[0] in (CONSUMER, PROVIDER)}


def floor_cpu_s(local_cpu: dict[str, float]) -> dict[str, float]:
    """The control planes' CPU no offloading avoids, per cluster, from the local run: every pod lives twice, once in
    the consumer's control plane (its kwok nodes aside: the virtual node stands in for them) and once in the
    provider's, kwok's kubelet work included. The ShadowPods' own writes and the agents come on top."""
    consumer = {name: used for name, used in control_planes(local_cpu).items() if name.startswith(f"{CONSUMER} ")}
    kubelets = sum(used for name, used in consumer.items() if "kwok" in name)
    return {CONSUMER: sum(consumer.values()) - kubelets, PROVIDER: sum(consumer.values())}


def floor_s(floor_cpu: dict[str, float]) -> float:
    """The shortest time that CPU allows: on the shared CPUs, all of it over all of them; with a CPU per side, the
    busier side's share over its own CPUs (the two sides work at once)."""
    if SIDE_CPUS:
        return max(used / len(SIDE_CPUS[cluster]) for cluster, used in floor_cpu.items())
    return sum(floor_cpu.values()) / CPUS


def describe_floor(floor_cpu: dict[str, float]) -> str:
    if SIDE_CPUS:
        per_side = ", ".join(f"{c} {used:.1f} CPU s on CPU {sorted(SIDE_CPUS[c])}" for c, used in floor_cpu.items())
        return f"each side redoes the local run's control-plane work (the consumer's kwok aside): {per_side}"
    return (
        f"the local run's control-plane CPU twice (every pod lives on both sides, the consumer's kwok aside), "
        f"{sum(floor_cpu.values()):.1f} CPU s on {CPUS} CPUs"
    )


def pin_sides(lab: Lab, peer) -> None:
    """--cpu-per-side: each cluster's control plane and the agents working for it on its own CPUs. Again after an
    agent restarts (a new process)."""
    if not SIDE_CPUS:
        return
    for cluster, cpus in SIDE_CPUS.items():
        harness.pin_control_plane(lab, cluster, cpus)
    for name, pid in peer.pids().items():
        harness.pin(pid, SIDE_CPUS[CONSUMER if side(name) == "consumer" else PROVIDER])


def files(stem: str) -> str:
    """A result file's stem, marked when the clusters had a CPU each (those figures do not replace shared ones)."""
    return f"{stem}{harness.CPU_PER_SIDE_SUFFIX}" if SIDE_CPUS else stem


def local_baseline(peer, size: int, figures: Figures, timeout_s: float) -> None:
    """The same Deployment on the consumer's own kwok nodes, before the system offloads it: the control planes' own
    pace on this lab, which no offloading can beat (the provider's control plane does that work again)."""
    label = f"local-{size}"
    body = offloading.bench_deployment(label, size, offloaded=False)
    run = asyncio.run(offloading.timed_deployments(peer, [(CONSUMER, body)], label, timeout_s, False))
    figures.values[LOCAL_TOTAL.format(size=size)] = run.total_s
    figures.values[f"N={size} local control planes CPU s"] = sum(control_planes(run.machine_cpu_s).values())
    figures.local_cpu[size] = run.machine_cpu_s
    print(f"\n== local (the consumer's own nodes), N = {size}: {run.total_s:.1f} s, start-up p99 {run.p99:.2f} s")


def offload(lab: Lab, peer, system: str, size: int, figures: Figures, timeout_s: float) -> None:
    label = f"{system}-{size}"
    before, cpu_before = api_counts(lab), peer.cpu()
    run = asyncio.run(
        offloading.timed_deployments(peer, [(CONSUMER, workload(peer, label, size))], label, timeout_s, True)
    )
    settled_s = settle(peer)
    after, cpu_after = api_counts(lab), peer.cpu()
    values = figures.values
    values[f"N={size} total s"] = run.total_s
    if (local := values.get(LOCAL_TOTAL.format(size=size))) is not None:
        values[f"N={size} offloaded/local total"] = run.total_s / local
    values[f"N={size} start-up p50 s"] = run.p50
    values[f"N={size} start-up p99 s"] = run.p99
    values[f"N={size} agent CPU ms/pod to all Ready"] = sum(run.cpu_s.values()) / size * 1000
    settled = {name: cpu_after[name] - cpu_before[name] for name in cpu_after}
    cpu = {s: sum(used for name, used in settled.items() if side(name) == s) for s in ("consumer", "provider")}
    values[f"N={size} agent CPU ms/pod, consumer"] = cpu["consumer"] / size * 1000
    values[f"N={size} agent CPU ms/pod, provider"] = cpu["provider"] / size * 1000
    values[f"N={size} agent CPU ms/pod, both"] = sum(cpu.values()) / size * 1000
    peak = sum(run.peak_mib.values())
    values[f"N={size} agent peak RSS MiB, all"] = peak
    values[f"N={size} agent peak RSS KiB/pod"] = peak * 1024 / size
    served = {cluster: api_delta(before[cluster], after[cluster]) for cluster in (CONSUMER, PROVIDER)}
    for cluster, role in ((CONSUMER, "consumer"), (PROVIDER, "provider")):
        values[f"N={size} API requests/pod, {role}"] = sum(served[cluster].values()) / size
    values[f"N={size} control planes CPU s"] = sum(control_planes(run.machine_cpu_s).values())
    local_cpu = figures.local_cpu.get(size)
    floor_cpu = floor_cpu_s(local_cpu) if local_cpu is not None else None
    if floor_cpu is not None:
        values[FLOOR.format(size=size)] = floor_s(floor_cpu)
    figures.startups[size] = run.startups
    figures.agents[size] = {name: (settled[name], run.peak_mib[name]) for name in run.cpu_s}
    print(f"\n== {system}, N = {size}: {run.total_s:.1f} s, start-up p50 {run.p50:.2f} s, p99 {run.p99:.2f} s")
    print(f"  agents busy {settled_s:.0f} s more after all Ready; CPU and requests below count until they settled")
    if floor_cpu is not None:
        floor = values[FLOOR.format(size=size)]
        print(f"  floor: {describe_floor(floor_cpu)} = {floor:.1f} s; this run {run.total_s / floor:.2f} times that")
    for name in run.cpu_s:
        print(
            f"  {name}: CPU {settled[name]:.1f} s ({settled[name] / size * 1000:.1f} ms/pod; "
            f"{run.cpu_s[name]:.1f} s to all Ready), peak RSS {run.peak_mib[name]:.0f} MiB"
        )
    api_rows = []
    for cluster in (CONSUMER, PROVIDER):
        top = ", ".join(f"{key} {count / size:.2f}" for key, count in list(served[cluster].items())[:8])
        print(f"  {cluster} kube-apiserver: {sum(served[cluster].values()):.0f} requests; per pod: {top}")
        for request, count in served[cluster].items():
            api_rows.append({"cluster": cluster, "request": request, "count": count, "per_pod": count / size})
    harness.write_csv(files(f"liqo-api-{system}-N-{size}") + ".csv", api_rows)
    if run.hops:
        harness.print_hops(f"{system}, N = {size}", run.hops)
    runs = {"local": local_cpu} if local_cpu else {}
    harness.print_cpu(f"{system}, N = {size}", {**runs, system: run.machine_cpu_s})
    if run.hops:
        harness.write_csv(files(f"liqo-hops-{system}-N-{size}") + ".csv", run.hops)


def recreate(lab: Lab, peer, remote_namespace: str, count: int, figures: Figures) -> None:
    rows: list[dict] = []
    offloading.recreate(lab, peer, count, rows, twin=remote_namespace)
    figures.values["recreate p50 s"] = rows[-1]["recreate_p50_s"]
    figures.values["recreate p99 s"] = rows[-1]["recreate_p99_s"]


async def _watch_config_maps(client, namespace: str, seen: dict[str, float], wanted: int, version: str) -> None:
    http = client._client._client
    while len(seen) < wanted:
        params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true"}
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        async with http.stream("GET", path, params=params, timeout=None) as response:
            async for line in response.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                version = event["object"]["metadata"].get("resourceVersion") or version
                name = event["object"]["metadata"].get("name", "")
                if event["type"] in ("ADDED", "MODIFIED") and name.startswith(CONFIG_MAP_PREFIX):
                    seen.setdefault(name, time.monotonic())
                    if len(seen) >= wanted:
                        return


async def _reflect(lab: Lab, remote_namespace: str, count: int, timeout_s: float) -> tuple[list[float], float]:
    local, remote = harness.client_for(lab, CONSUMER), harness.client_for(lab, PROVIDER)
    listing = await remote._client._client.get(
        f"/api/v1/namespaces/{remote_namespace}/configmaps", params={"limit": "1"}
    )
    seen: dict[str, float] = {}
    created: dict[str, float] = {}
    watch = asyncio.ensure_future(
        _watch_config_maps(remote, remote_namespace, seen, count, listing.json()["metadata"]["resourceVersion"])
    )
    names = [f"{CONFIG_MAP_PREFIX}{index:05d}" for index in range(count)]
    queue = list(reversed(names))
    started = time.monotonic()

    async def writer() -> None:
        http = local._client._client
        while queue:
            name = queue.pop()
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": name}}
            response = await http.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps", json=body)
            response.raise_for_status()
            created[name] = time.monotonic()

    await asyncio.gather(*(writer() for _ in range(IN_FLIGHT)))
    try:
        await asyncio.wait_for(watch, timeout_s)
    except TimeoutError:
        print(f"  reflection: only {len(seen)}/{count} copies seen within {timeout_s:.0f} s")
    total = time.monotonic() - started
    await local.close()
    await remote.close()
    # A copy can be seen before the creating request has returned here; that counts as no delay.
    return [max(0.0, seen[name] - created[name]) for name in seen if name in created], total


def reflection(lab: Lab, peer, remote_namespace: str, count: int, figures: Figures) -> None:
    before = peer.scrape()
    latencies, total = asyncio.run(_reflect(lab, remote_namespace, count, 300))
    after = peer.scrape()
    hops = [row for name in after for row in harness.hop_rows(name, before[name], after[name])]
    if hops:
        harness.print_hops("reflection", hops)
    p50, p99 = harness.percentile(latencies, 0.5), harness.percentile(latencies, 0.99)
    copied = f"{len(latencies)}/{count} ConfigMaps copied in {total:.1f} s"
    print(f"\n== reflection: {copied}; p50 {p50:.2f} s, p99 {p99:.2f} s")
    figures.values["reflection total s"] = total
    figures.values["reflection p50 s"] = p50
    figures.values["reflection p99 s"] = p99
    lab.kubectl(
        CONSUMER,
        "-n",
        NAMESPACE,
        "delete",
        "configmaps",
        "--field-selector",
        "metadata.name!=kube-root-ca.crt",
        "--wait=false",
        check=False,
        timeout=300,
    )


async def _kill_run(lab: Lab, peer, system: str, size: int, timeout_s: float) -> tuple[float, float]:
    """A Deployment of `size` pods; the agent restarted once half are Ready. (time to all Ready, kill -> all Ready)."""
    label = f"{system}-kill"
    body = workload(peer, label, size)
    body["metadata"].setdefault("labels", {})["bench-run"] = label
    body["spec"]["template"]["metadata"]["labels"]["bench-run"] = label
    client = harness.client_for(lab, CONSUMER)
    selector = f"bench-run={label}"
    version = await harness.list_version(client, None, selector)
    times = harness.PodTimes()
    started = time.monotonic()
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(body))
    half = asyncio.Event()

    def done(seen: harness.PodTimes) -> bool:
        if len(seen.ready) >= size // 2:
            half.set()
        return len(seen.ready) >= size

    watch = asyncio.ensure_future(
        asyncio.wait_for(harness.watch_pods(client, None, selector, times, done, version), timeout_s)
    )
    halfway = asyncio.ensure_future(half.wait())
    await asyncio.wait([watch, halfway], return_when=asyncio.FIRST_COMPLETED)
    halfway.cancel()
    killed = time.monotonic()
    print(f"  {system}: virtual kubelet killed with {len(times.ready)}/{size} pods Ready; started again", flush=True)
    await asyncio.to_thread(peer.restart_agent)
    pin_sides(lab, peer)
    try:
        await watch
    except TimeoutError:
        print(f"  {system}: only {len(times.ready)}/{size} Ready within {timeout_s:.0f} s")
    await client.close()
    done = time.monotonic() if len(times.ready) >= size else math.nan
    return done - started, done - killed


def agent_kill(lab: Lab, peer, remote_namespace: str, system: str, size: int, figures: Figures) -> None:
    total, after_kill = asyncio.run(_kill_run(lab, peer, system, size, 900))
    time.sleep(5)  # late duplicates would show up by now
    pods = json.loads(lab.kubectl(PROVIDER, "-n", remote_namespace, "get", "pods", "-o", "json", timeout=120).stdout)
    live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    ready = sum(1 for p in live if harness._ready(p))
    lost, duplicated = max(0, size - ready), max(0, len(live) - size)
    print(
        f"\n== agent killed mid-offload, {size} pods: all Ready {total:.1f} s after creation, {after_kill:.1f} s after "
        f"the kill; remote pods {len(live)} ({ready} Ready): {lost} lost, {duplicated} duplicated"
    )
    figures.values["agent kill: all Ready s"] = total
    figures.values["agent kill: kill -> all Ready s"] = after_kill
    figures.values["agent kill: remote pods lost"] = lost
    figures.values["agent kill: remote pods duplicated"] = duplicated


# -- one system, start to end --------------------------------------------------------------------------------


def machine_speed(figures: Figures, size: int, before: float, after: float) -> None:
    """The host's speed around one size's local and offloaded runs: it drifts (the same run once cost 1.5 times the
    CPU within the hour), so two systems' halves of one run compare only beside it."""
    figures.values[f"N={size} reference loop CPU s"] = (before + after) / 2
    print(f"  machine speed: the reference loop (tests/timing.py) took {before:.2f} CPU s before, {after:.2f} after")


def measure(lab: Lab, system: str, args, bin_dir: Path, figures: Figures) -> None:
    """Every phase for one system into `figures`; a phase that fails is printed and the next one still runs."""
    if system == "catamaran":
        peer = CatamaranPeering(lab, [CONSUMER], [PROVIDER])
    else:
        peer = LiqoPeering(lab, CONSUMER, PROVIDER, args.liqo_src, bin_dir, args.qps, args.burst)

    def phase(what: str, work, *arguments) -> None:
        try:
            work(*arguments)
        except (Exception, SystemExit) as error:  # a bench prints what went wrong and goes on
            print(f"\n!! {system}: {what} failed: {error!r}", flush=True)

    try:
        started = time.monotonic()
        peer.start()
        pin_sides(lab, peer)
        print(f"\n{system}: peered, virtual node {peer.node_name} Ready in {time.monotonic() - started:.0f} s")
        for line in peer.describe():
            print(f"  {line}")
        remote_namespace = peer.offload_namespace(NAMESPACE)
        print(f"  {NAMESPACE} offloaded to {PROVIDER} as {remote_namespace}", flush=True)
        for size in args.n:
            speed_before = reference_cpu_seconds()
            phase(f"local N = {size}", local_baseline, peer, size, figures, args.timeout)
            phase("clean", offloading.clean, lab, [CONSUMER], NAMESPACE, peer.providers)
            phase(f"offload N = {size}", offload, lab, peer, system, size, figures, args.timeout)
            machine_speed(figures, size, speed_before, reference_cpu_seconds())
            if size == max(args.n) and args.recreate:
                phase("recreate", recreate, lab, peer, remote_namespace, args.recreate, figures)
            phase("clean", offloading.clean, lab, [CONSUMER], NAMESPACE, peer.providers)
        if args.configmaps:
            phase("reflection", reflection, lab, peer, remote_namespace, args.configmaps, figures)
        if args.kill_pods:
            phase("agent kill", agent_kill, lab, peer, remote_namespace, system, args.kill_pods, figures)
            phase("clean", offloading.clean, lab, [CONSUMER], NAMESPACE, peer.providers)
    finally:
        peer.stop()


# -- report ---------------------------------------------------------------------------------------------------


def print_table(results: dict[str, Figures]) -> list[dict]:
    names = list(dict.fromkeys(name for figures in results.values() for name in figures.values))
    catamaran, liqo = results.get("catamaran", Figures()), results.get("liqo", Figures())
    print("\n== side by side (same lab, same work, one run)")
    print(f"  {'figure':<42} {'Catamaran':>11} {'Liqo':>11} {'ratio':>7}")
    rows = []
    for name in names:
        ours, theirs = catamaran.values.get(name, math.nan), liqo.values.get(name, math.nan)
        ratio = ours / theirs if theirs else math.nan
        shown = "-" if math.isnan(ratio) else f"{ratio:.2f}"
        print(f"  {name:<42} {ours:>11.2f} {theirs:>11.2f} {shown:>7}")
        rows.append({"figure": name, "catamaran": ours, "liqo": theirs, "ratio_catamaran_over_liqo": ratio})
    return rows


def agent_bars(results: dict[str, Figures], size: int, index: int, unit: str, scale: float):
    """Per-pod bars for each agent of each system (index 0: CPU seconds, 1: peak RSS MiB)."""

    def draw(axes) -> None:
        labels, values, colours = [], [], []
        for colour, (system, figures) in zip(("tab:blue", "tab:orange"), results.items(), strict=False):
            for agent, pair in figures.agents.get(size, {}).items():
                labels.append(f"{system}\n{agent}".replace(CONSUMER, "consumer").replace(PROVIDER, "provider"))
                values.append(pair[index] * scale / size)
                colours.append(colour)
        axes.bar(range(len(values)), values, color=colours)
        axes.set_xticks(range(len(values)), labels, fontsize=7, rotation=15, ha="right")
        axes.set_ylabel(unit)
        axes.set_title(f"Agents per offloaded pod, N = {size}")

    return draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, action="append", help="pods offloaded at once (repeatable; default 1000)")
    parser.add_argument("--system", choices=SYSTEMS, action="append", help="only this system (default both)")
    parser.add_argument("--liqo-src", type=Path, default=liqo_peer.default_source(), help="a checkout of Liqo's tag")
    parser.add_argument("--qps", type=int, default=5000, help="Liqo's --client-qps (Catamaran has no client limiter)")
    parser.add_argument("--burst", type=int, default=10000, help="Liqo's --client-max-burst")
    parser.add_argument("--recreate", type=int, default=100, help="remote pods deleted one by one (0: skip)")
    parser.add_argument("--configmaps", type=int, default=1000, help="ConfigMaps reflected (0: skip)")
    parser.add_argument("--kill-pods", type=int, default=1000, help="pods of the agent-kill run (0: skip)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds an offload run may take")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    harness.cpu_per_side_argument(parser)
    harness.allow_noisy_argument(parser)
    args = parser.parse_args()
    harness.QUIET.allow_noisy = args.allow_noisy
    args.n = args.n or DEFAULT_N
    SIDE_CPUS.update(offloading.cpu_plan(args, [CONSUMER], [PROVIDER]))
    systems = args.system or SYSTEMS
    bin_dir = liqo_peer.ensure_binaries(args.liqo_src) if "liqo" in systems else Path()
    results: dict[str, Figures] = {}
    try:
        for index, system in enumerate(systems):
            if index:
                print("\nbench lab brought down and up again, so the next system starts on clean clusters", flush=True)
                harness.QUIET.carry_ending()
                harness.bench_lab_state().down()
            lab, wanted = harness.bench_lab(clusters=2)
            if not index:
                harness.print_settings(
                    wanted,
                    {
                        "workers": ", ".join(f"{k} {v}" for k, v in offloading.WORKERS.items()),
                        "client rate limit": "none (no client-side limiter)",
                        "twin object quota": f"default but configmaps {OBJECT_QUOTA['configmaps']} (default 1000)",
                    },
                )
                print(f"liqo source: {args.liqo_src} ({liqo_peer.LIQO_TAG}); binaries {bin_dir}")
                print(
                    f"liqo client rate limit: --client-qps {args.qps} --client-max-burst {args.burst} (every process)"
                )
                print("liqo: networking module off, no webhook; virtual kubelet " + " ".join(liqo_peer.CHART_VK_ARGS))
                print(f"workloads: own virtual node's node selector and toleration in both; sizes {args.n}")
                if SIDE_CPUS:
                    sides = ", ".join(f"{c} and its agents on CPU {sorted(cpus)}" for c, cpus in SIDE_CPUS.items())
                    print(f"CPU per side: {sides}; the bench's own watch on either", flush=True)
                else:
                    print("CPUs: every process may run on every CPU (both clusters share the machine)", flush=True)
            results[system] = Figures()
            measure(lab, system, args, bin_dir, results[system])
    finally:
        if results:
            rows = print_table(results)
            sizes = "-".join(map(str, args.n))
            print(f"\nfigures: {harness.write_csv(files(f'liqo-N-{sizes}') + '.csv', rows)}")
            for size in args.n:
                series = {f"{s} N={size}": f.startups.get(size, []) for s, f in results.items()}
                chart = harness.startup_cdf(series, f"Pod start-up, Catamaran and Liqo, N = {size}")
                print(f"chart: {harness.plot(files(f'liqo-startup-N-{size}') + '.png', chart)}")
                cpu = agent_bars(results, size, 0, "CPU ms per offloaded pod", 1000)
                print(f"chart: {harness.plot(files(f'liqo-cpu-N-{size}') + '.png', cpu)}")
                memory = agent_bars(results, size, 1, "peak RSS KiB per offloaded pod", 1024)
                print(f"chart: {harness.plot(files(f'liqo-memory-N-{size}') + '.png', memory)}")
        if not args.keep_lab:
            harness.bench_lab_state().down()


if __name__ == "__main__":
    main()
