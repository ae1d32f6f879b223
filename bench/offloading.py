"""Benchmark: pod start-up offloaded through virtual nodes against the consumer's own (kwok) nodes.

Runs on its own lab (bench/lab.yaml, state in .lab-bench/, ports 28000+, control planes and kwok only),
so it never disturbs the test lab. Scenarios (one or more per run):

  single    one consumer, one provider. For each N: a Deployment of N pods on the consumer's own nodes
            (the baseline) and then offloaded, each timed from creation to all pods Ready as a watch in
            this process sees them; per-pod start-up (first seen -> Ready) p50/p99; where the time went
            (the controllers' histograms: queue wait, reconcile, API latency per verb, event loop lag);
            the virtual kubelet's and the manager's RSS and CPU. Then `--recreate` remote pods deleted on
            the provider one after another (deleted -> the new pod Running), and `--namespaces` offloaded
            namespaces with one pod each while the virtual node's Ready condition is sampled.
  fleet     one consumer, `--providers` providers: `--fleet-pods` pods in one Deployment that the
            scheduler spreads over the virtual nodes; the same figures, and memory against pods Ready.
  tenants   `--consumers` consumers peered with one provider, each offloading `--tenant-pods` pods at
            once: the provider manager's RSS and CPU per offloaded pod.
  pools     one consumer, one provider: the virtual kubelet with the peering's one node, then (restarted, so
            its peak memory is its own) with `--pools` node pools, one per provider node: its CPU and RSS idle
            for `--idle` seconds and offloading `--pool-pods` pods, and what each extra pool adds, against one
            virtual kubelet's own figures.
  infeasible  one consumer, one provider: `--infeasible` pods, one after another, each requesting more CPU than
            any provider node has (but less than the virtual node offers): from its creation to the consumer's pod
            showing why it cannot run (condition catamaran.io/RemotePodCreated, reason Infeasible).

Every run prints the settings it ran with, writes the raw figures to bench/results/*.csv and charts to
bench/results/*.png. It asserts nothing.

    .venv/bin/python bench/offloading.py                          # single: N = 100, 1000
    .venv/bin/python bench/offloading.py --scenario fleet         # 5 providers, 10 000 pods
    .venv/bin/python bench/offloading.py --scenario all
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from catamaran.constants import default_twin_namespace, virtual_node_name
from catamaran.provider.shadowpods import WORKERS as SHADOWPOD_WORKERS
from catamaran.vk.pods import WORKERS as VK_POD_WORKERS
from catamaran.vk.reflection.policy import DEFAULT_WORKERS as REFLECTION_WORKERS
from catamaran_lab.lab import Lab
from tests.integration import federation
from tests.integration.manifests import container, deployment

NAMESPACE = "bench"
CONSUMER = "bench-consumer"
PROVIDERS = ["bench-provider", "bench-provider-2", "bench-provider-3", "bench-provider-4", "bench-provider-5"]
TENANT_CONSUMERS = ["bench-consumer", "bench-consumer-2", "bench-consumer-3"]
TENANTS_LAB = harness.REPO / "bench" / "tenants-lab.yaml"
VIRTUAL_NODE_TOLERATION = {"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}
# The processes' defaults, as the bench starts them.
WORKERS = {
    "virtual kubelet pods": VK_POD_WORKERS,
    "virtual kubelet tokens": REFLECTION_WORKERS["serviceAccountTokens"],
    "provider manager": SHADOWPOD_WORKERS,
}
SAMPLE_S = 2.0
DEFAULT_N = [100, 1000]
POOLS_IDLE_S = 60.0


def bench_deployment(name: str, replicas: int, offloaded: bool, namespace: str = NAMESPACE) -> dict:
    spec: dict = {"containers": [container(cpu="10m", memory="16Mi")], "terminationGracePeriodSeconds": 0}
    if offloaded:
        spec["nodeSelector"] = {"catamaran.io/type": "virtual-node"}
        spec["tolerations"] = [VIRTUAL_NODE_TOLERATION]
    else:
        spec["nodeSelector"] = {"catamaran.io/lab-node": "true"}
    return deployment(name, replicas, spec, namespace)


@dataclass
class Federation:
    """The processes of one bench federation and where their metrics are served."""

    lab: Lab
    consumers: list[str]
    providers: list[str]
    processes: dict[str, federation.ControllerProcess] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    # cluster -> the CPUs its control plane and Catamaran's processes for it run on (empty: unpinned)
    cpus: dict[str, set[int]] = field(default_factory=dict)

    def pin(self) -> None:
        """Each cluster on CPUs of its own, as separate clusters have machines of their own."""
        for cluster, cpus in self.cpus.items():
            harness.pin_control_plane(self.lab, cluster, cpus)
        for name, process in self.processes.items():
            cluster = name.split(" ")[1].split("/")[0]  # a virtual kubelet belongs to its consumer
            if cluster in self.cpus:
                harness.pin(process.process.pid, self.cpus[cluster])

    def start(self) -> None:
        for cluster in [*self.consumers, *self.providers]:
            federation.install_crds(self.lab, cluster)
        for provider in self.providers:
            port = federation.free_port()
            self._add(f"manager {provider}", federation.manager(self.lab, provider, metrics_port=port), port)
        for consumer in self.consumers:
            for index, provider in enumerate(self.providers):
                federation.peer(self.lab, consumer, provider, networking={"podCIDRRemap": f"10.{200 + index}.0.0/16"})
                port = federation.free_port()
                vk = federation.virtual_kubelet(self.lab, consumer, provider, metrics_port=port)
                self._add(f"vk {consumer}/{provider}", vk, port)
        for process in self.processes.values():
            process.start()
        self.pin()
        deadline = time.monotonic() + 180
        for consumer in self.consumers:
            for provider in self.providers:
                node = virtual_node_name(provider)
                while federation.node_ready(self.lab, consumer, node) != "True":
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{consumer}: virtual node {node} never became Ready")
                    time.sleep(1)

    def _add(self, name: str, process: federation.ControllerProcess, metrics_port: int) -> None:
        self.processes[name] = process
        self.metrics[name] = f"http://127.0.0.1:{metrics_port}/metrics"

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()

    def pids(self) -> dict[str, int]:
        return {name: p.process.pid for name, p in self.processes.items()}

    def scrape(self) -> dict[str, harness.Samples]:
        return {name: harness.scrape(url) for name, url in self.metrics.items()}

    def cpu(self) -> dict[str, float]:
        return {name: harness.cpu_seconds(pid) for name, pid in self.pids().items()}

    def offload(self, consumer: str, namespace: str) -> None:
        self.lab.kubectl(consumer, "create", "namespace", namespace, check=False)
        federation.offload_namespace(self.lab, consumer, namespace)
        deadline = time.monotonic() + 120
        while not all(federation.twin_ready(self.lab, consumer, p, namespace) for p in self.providers):
            if time.monotonic() > deadline:
                raise SystemExit(f"{consumer}/{namespace} was not offloaded to every provider")
            time.sleep(1)


# -- one timed Deployment ------------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    pods: int
    total_s: float
    startups: list[float]
    memory: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # process -> (pods Ready, RSS MiB)
    peak_mib: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    hops: list[dict] = field(default_factory=list)
    machine_cpu_s: dict[str, float] = field(default_factory=dict)  # every component of the machine

    @property
    def p50(self) -> float:
        return harness.percentile(self.startups, 0.5)

    @property
    def p99(self) -> float:
        return harness.percentile(self.startups, 0.99)


async def timed_deployments(
    fed: Federation, creations: list[tuple[str, dict]], label: str, timeout_s: float, offloaded: bool
) -> Run:
    """Create every Deployment at once (one per consumer) and watch their pods until all are Ready.

    Every run records the CPU of every component on the machine; offloaded runs also the controllers'
    per-hop histograms, memory and CPU."""
    lab = fed.lab
    clusters = [*fed.consumers, *fed.providers]
    all_processes = fed.pids()
    fed = fed if offloaded else None
    selector = f"bench-run={label}"
    clients = {cluster: harness.client_for(lab, cluster) for cluster, _ in creations}
    wanted = {cluster: body["spec"]["replicas"] for cluster, body in creations}
    times = {cluster: harness.PodTimes() for cluster in clients}
    versions = {c: await harness.list_version(client, None, selector) for c, client in clients.items()}
    before = fed.scrape() if fed else {}
    cpu_before = fed.cpu() if fed else {}
    machine_before = harness.machine_cpu(lab, clusters, all_processes)
    memory: dict[str, list[tuple[int, float]]] = {}
    started = time.monotonic()
    for cluster, body in creations:
        body["metadata"].setdefault("labels", {})["bench-run"] = label
        body["spec"]["template"]["metadata"]["labels"]["bench-run"] = label
        lab.kubectl(cluster, "apply", "-f", "-", input=json.dumps(body))
    watches = asyncio.gather(
        *(
            harness.watch_pods(
                clients[c], None, selector, times[c], lambda t, c=c: len(t.ready) >= wanted[c], versions[c]
            )
            for c in clients
        )
    )
    task = asyncio.ensure_future(asyncio.wait_for(watches, timeout_s))

    def sample() -> None:
        if fed is None:
            return
        ready = sum(len(t.ready) for t in times.values())
        for name, pid in fed.pids().items():
            memory.setdefault(name, []).append((ready, harness.memory_mib(pid)[0]))

    await harness.sample_while(task, SAMPLE_S, sample)
    total = time.monotonic() - started
    complete = task.exception() is None
    for client in clients.values():
        await client.close()
    startups = [s for t in times.values() for s in t.startups()]
    run = Run(label, sum(wanted.values()), total if complete else math.nan, startups, memory)
    machine_after = harness.machine_cpu(lab, clusters, all_processes)
    run.machine_cpu_s = {
        name: machine_after[name] - used for name, used in machine_before.items() if name in machine_after
    }
    if not complete:
        print(f"  {label}: only {len(startups)}/{run.pods} pods Ready within {timeout_s:.0f}s", flush=True)
    if fed is not None:
        after = fed.scrape()
        cpu_after = fed.cpu()
        for name, pid in fed.pids().items():
            run.peak_mib[name] = harness.memory_mib(pid)[1]
            run.cpu_s[name] = cpu_after[name] - cpu_before[name]
            run.hops += harness.hop_rows(name, before[name], after[name])
    return run


def clean(lab: Lab, clusters: list[str], namespace: str, providers: list[str]) -> None:
    """Delete the bench's Deployments and wait until no pod or ShadowPod of theirs is left anywhere."""
    for cluster in clusters:
        lab.kubectl(cluster, "-n", namespace, "delete", "deployments", "--all", "--wait=false", check=False)
        # kwok removes terminating pods a few per second; the cleanup is not what is measured.
        lab.kubectl(
            cluster,
            "-n",
            namespace,
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
            "--wait=false",  # the loop below waits; kubectl's own wait hung on a thousand pods
            timeout=900,
            check=False,
        )
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        # A provider API server busy deleting ten thousand pods can take more than kubectl's default minute.
        left = sum(
            len(lab.kubectl(c, "-n", namespace, "get", "pods", "-o", "name", check=False, timeout=300).stdout.split())
            for c in clusters
        ) + sum(
            len(lab.kubectl(p, "get", "shadowpods", "-A", "-o", "name", check=False, timeout=300).stdout.split())
            for p in providers
        )
        if not left:
            return
        time.sleep(2)
    raise SystemExit("the bench's pods were not all gone after 900 s")


def cpu_plan(args, consumers: list[str], providers: list[str]) -> dict[str, set[int]]:
    """--cpu-per-side: consumers on the first CPU, providers on the second (the bench process floats)."""
    if not args.cpu_per_side:
        return {}
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("--cpu-per-side needs two CPUs")
    return {**{c: {0} for c in consumers}, **{p: {1} for p in providers}}


def cpu_note(args) -> str:
    return ", CPU per side" if args.cpu_per_side else ""


def print_run_settings(fed: Federation) -> None:
    if fed.cpus:
        sides = ", ".join(f"{cluster} on CPU {sorted(cpus)}" for cluster, cpus in fed.cpus.items())
        print(f"  CPU per side: {sides}; each cluster's Catamaran processes with it")
    else:
        print("  CPUs: every process may run on every CPU (both sides share the machine)")
    for name, process in fed.processes.items():
        print(f"  {name}: python -m catamaran {' '.join(process.args[2:])} (log {process.log_path})")


# -- scenarios -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def one_provider(args):
    """The bench lab's first consumer and provider peered, the bench namespace offloaded; stopped after."""
    lab, wanted = harness.bench_lab(clusters=2)
    harness.print_settings(wanted, {"workers": ", ".join(f"{k} {v}" for k, v in WORKERS.items())})
    fed = Federation(lab, [CONSUMER], PROVIDERS[:1], cpus=cpu_plan(args, [CONSUMER], PROVIDERS[:1]))
    try:
        fed.start()
        print_run_settings(fed)
        fed.offload(CONSUMER, NAMESPACE)
        yield fed
    finally:
        fed.stop()


def single(args, rows: list[dict], charts: dict) -> None:
    with one_provider(args) as fed:
        lab = fed.lab
        series = {}
        for size in args.n:
            local = asyncio.run(
                timed_deployments(
                    fed, [(CONSUMER, bench_deployment(f"local-{size}", size, False))], f"local-{size}", 1800, False
                )
            )
            clean(lab, [CONSUMER], NAMESPACE, fed.providers)
            remote = asyncio.run(
                timed_deployments(
                    fed, [(CONSUMER, bench_deployment(f"remote-{size}", size, True))], f"remote-{size}", 1800, True
                )
            )
            report(f"single provider, N = {size}{cpu_note(args)}", local, remote, rows)
            series[f"local N={size}"] = local.startups
            series[f"offloaded N={size}"] = remote.startups
            if size == max(args.n) and args.recreate:
                recreate(lab, fed, args.recreate, rows)
            clean(lab, [CONSUMER], NAMESPACE, fed.providers)
        charts["offloading-startup.png"] = harness.startup_cdf(series, "Pod start-up, one provider")
        if args.namespaces:
            namespaces(lab, fed, args.namespaces, rows)


def report(title: str, local: Run | None, remote: Run, rows: list[dict]) -> None:
    print(f"\n== {title}")
    ratio = remote.total_s / local.total_s if local else math.nan
    if local:
        print(f"  local:     {local.total_s:7.1f} s total, start-up p50 {local.p50:.2f} s, p99 {local.p99:.2f} s")
    print(f"  offloaded: {remote.total_s:7.1f} s total, start-up p50 {remote.p50:.2f} s, p99 {remote.p99:.2f} s")
    print(f"  ratio offloaded/local: {ratio:.2f}")
    for name in remote.peak_mib:
        per_pod = remote.cpu_s[name] / remote.pods * 1000
        print(
            f"  {name}: peak RSS {remote.peak_mib[name]:.0f} MiB, CPU {remote.cpu_s[name]:.1f} s "
            f"({per_pod:.1f} ms per pod)"
        )
    harness.print_hops(title, remote.hops)
    harness.print_cpu(title, {**({"local": local.machine_cpu_s} if local else {}), "offloaded": remote.machine_cpu_s})
    rows.append(
        {
            "scenario": title,
            "pods": remote.pods,
            "local_total_s": local.total_s if local else math.nan,
            "offloaded_total_s": remote.total_s,
            "ratio": ratio,
            "local_p50_s": local.p50 if local else math.nan,
            "local_p99_s": local.p99 if local else math.nan,
            "offloaded_p50_s": remote.p50,
            "offloaded_p99_s": remote.p99,
            **{f"peak_rss_mib {name}": value for name, value in remote.peak_mib.items()},
            **{f"cpu_s {name}": value for name, value in remote.cpu_s.items()},
        }
    )
    slug = "-".join(title.replace(",", "").replace("=", "").split())
    memory_rows = [
        {"process": name, "pods_ready": ready, "rss_mib": rss}
        for name, points in remote.memory.items()
        for ready, rss in points
    ]
    if memory_rows:
        harness.write_csv(f"memory-{slug}.csv", memory_rows)
    harness.write_csv(f"hops-{slug}.csv", remote.hops)
    local_cpu = local.machine_cpu_s if local else {}
    cpu_rows = [
        {"component": name, "local_cpu_s": local_cpu.get(name, math.nan), "offloaded_cpu_s": used}
        for name, used in remote.machine_cpu_s.items()
    ]
    harness.write_csv(f"cpu-{slug}.csv", cpu_rows)


def recreate(lab: Lab, fed: Federation, count: int, rows: list[dict], twin: str | None = None) -> None:
    """Delete remote pods on the provider one after another; each one's manager must bring it back Running.

    `twin` is the remote namespace (default: Catamaran's twin of the bench namespace; bench/liqo.py gives Liqo's)."""
    provider = fed.providers[0]
    twin = twin or default_twin_namespace(NAMESPACE, CONSUMER)
    names = lab.kubectl(provider, "-n", twin, "get", "pods", "-o", "name").stdout.split()[:count]

    async def run() -> list[float]:
        client = harness.client_for(lab, provider)
        http = client._client._client
        latencies = []
        for name in (n.split("/", 1)[1] for n in names):
            path = f"/api/v1/namespaces/{twin}/pods"
            listing = await http.get(path, params={"fieldSelector": f"metadata.name={name}"})
            old = listing.json()["items"][0]["metadata"]["uid"]
            times = harness.PodTimes()
            deleted = time.monotonic()
            await http.request("DELETE", f"{path}/{name}", json={"gracePeriodSeconds": 0})
            await asyncio.wait_for(
                watch_replacement(client, twin, name, old, times, listing.json()["metadata"]["resourceVersion"]), 120
            )
            latencies.append(times.ready[name] - deleted)
        await client.close()
        return latencies

    latencies = asyncio.run(run())
    p50, p99 = harness.percentile(latencies, 0.5), harness.percentile(latencies, 0.99)
    print(f"\n== recreate: {len(latencies)} remote pods deleted -> Running again: p50 {p50:.2f} s, p99 {p99:.2f} s")
    rows.append({"scenario": "recreate", "pods": len(latencies), "recreate_p50_s": p50, "recreate_p99_s": p99})


async def watch_replacement(client, namespace: str, name: str, old_uid: str, times, version: str) -> None:
    http = client._client._client
    params = {"watch": "true", "fieldSelector": f"metadata.name={name}", "resourceVersion": version}
    async with http.stream("GET", f"/api/v1/namespaces/{namespace}/pods", params=params, timeout=None) as response:
        async for line in response.aiter_lines():
            pod = json.loads(line)["object"] if line else None
            if pod and pod["metadata"].get("uid") not in (None, old_uid) and harness._ready(pod):
                times.ready[name] = time.monotonic()
                return


def namespaces(lab: Lab, fed: Federation, count: int, rows: list[dict]) -> None:
    """`count` offloaded namespaces, one pod each, with the virtual node's Ready condition sampled throughout."""
    node = virtual_node_name(fed.providers[0])
    names = [f"bench-ns-{i:03d}" for i in range(count)]
    started = time.monotonic()
    not_ready: list[str] = []
    manifests = []
    for name in names:
        manifests.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        manifests.append(
            {
                "apiVersion": "offloading.catamaran.io/v1alpha1",
                "kind": "NamespaceOffloading",
                "metadata": {"name": "offloading", "namespace": name},
                "spec": {},
            }
        )
        manifests.append(bench_deployment("one", 1, True, name))
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=federation.as_list(manifests[0::3]))
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=federation.as_list(manifests[1::3] + manifests[2::3]))
    deadline = time.monotonic() + 600
    running = 0
    while time.monotonic() < deadline:
        if federation.node_ready(lab, CONSUMER, node) != "True":
            not_ready.append(f"{time.monotonic() - started:.0f}s")
        pods = json.loads(lab.kubectl(CONSUMER, "get", "pods", "-A", "-l", "app=one", "-o", "json").stdout)["items"]
        running = sum(1 for p in pods if harness._ready(p) and p["spec"].get("nodeName") == node)
        if running == count:
            break
        time.sleep(SAMPLE_S)
    total = time.monotonic() - started
    vk = fed.pids()[f"vk {CONSUMER}/{fed.providers[0]}"]
    rss = harness.memory_mib(vk)[0]
    print(
        f"\n== {count} offloaded namespaces, one pod each: {running}/{count} offloaded pods Ready in {total:.0f} s; "
        f"virtual node NotReady samples: {not_ready or 'none'}; VK RSS {rss:.0f} MiB"
    )
    rows.append(
        {
            "scenario": f"{count} offloaded namespaces",
            "pods": running,
            "offloaded_total_s": total,
            "node_not_ready_samples": len(not_ready),
            f"rss_mib vk {CONSUMER}/{fed.providers[0]}": rss,
        }
    )
    lab.kubectl(CONSUMER, "delete", "namespaces", *names, "--wait=false", check=False)


def fleet(args, rows: list[dict], charts: dict) -> None:
    lab, wanted = harness.bench_lab(clusters=1 + args.providers)
    harness.print_settings(wanted, {"workers": ", ".join(f"{k} {v}" for k, v in WORKERS.items())})
    providers = PROVIDERS[: args.providers]
    fed = Federation(lab, [CONSUMER], providers, cpus=cpu_plan(args, [CONSUMER], providers))
    try:
        fed.start()
        print_run_settings(fed)
        fed.offload(CONSUMER, NAMESPACE)
        size = args.fleet_pods
        local = None
        if not args.skip_baseline:
            local = asyncio.run(
                timed_deployments(fed, [(CONSUMER, bench_deployment("local", size, False))], "local", 3600, False)
            )
            clean(lab, [CONSUMER], NAMESPACE, fed.providers)
        remote = asyncio.run(
            timed_deployments(fed, [(CONSUMER, bench_deployment("remote", size, True))], "remote", 3600, True)
        )
        title = f"{args.providers} providers, N = {size}{cpu_note(args)}"
        report(title, local, remote, rows)
        series = {"offloaded": remote.startups, **({"local": local.startups} if local else {})}
        charts["fleet-startup.png"] = harness.startup_cdf(series, f"Pod start-up, {title}")
        charts["fleet-memory.png"] = harness.memory_curve(remote.memory, f"Memory against pods Ready, {title}")
    finally:
        fed.stop()


def tenants(args, rows: list[dict], charts: dict) -> None:
    lab, wanted = harness.bench_lab(clusters=1 + args.consumers, lab_file=TENANTS_LAB)
    harness.print_settings(wanted, {"workers": ", ".join(f"{k} {v}" for k, v in WORKERS.items())})
    consumers = TENANT_CONSUMERS[: args.consumers]
    fed = Federation(lab, consumers, PROVIDERS[:1], cpus=cpu_plan(args, consumers, PROVIDERS[:1]))
    try:
        fed.start()
        print_run_settings(fed)
        for consumer in consumers:
            fed.offload(consumer, NAMESPACE)
        per_consumer = args.tenant_pods
        creations = [(c, bench_deployment("tenant", per_consumer, True)) for c in consumers]
        remote = asyncio.run(timed_deployments(fed, creations, "tenants", 3600, True))
        title = f"{args.consumers} consumers on one provider, N = {per_consumer * args.consumers}{cpu_note(args)}"
        report(title, None, remote, rows)
        manager = f"manager {PROVIDERS[0]}"
        samples = remote.memory[manager]
        growth = (samples[-1][1] - samples[0][1]) * 1024 / max(1, samples[-1][0] - samples[0][0])
        print(
            f"  provider manager per offloaded pod: {growth:.1f} KiB of RSS growth, "
            f"{remote.cpu_s[manager] / remote.pods * 1000:.1f} ms CPU"
        )
        charts["tenants-memory.png"] = harness.memory_curve(remote.memory, f"Memory against pods Ready, {title}")
    finally:
        fed.stop()


def pools(args, rows: list[dict], charts: dict) -> None:
    with one_provider(args) as fed:
        pools_run(args, fed, rows)


def pools_run(args, fed: Federation, rows: list[dict]) -> None:
    lab, provider = fed.lab, PROVIDERS[0]
    vk = f"vk {CONSUMER}/{provider}"
    nodes = lab.kubectl(provider, "get", "nodes", "-l", "catamaran.io/lab-node=true", "-o", "name").stdout.split()
    names = sorted(n.removeprefix("node/") for n in nodes)[: args.pools]
    if len(names) < args.pools:
        raise SystemExit(f"--pools {args.pools}: the bench provider has {len(names)} nodes (one pool each)")
    lent = [{"name": f"pool-{i}", "nodeSelector": {"kubernetes.io/hostname": n}} for i, n in enumerate(names)]
    pool_nodes = [virtual_node_name(provider, pool["name"]) for pool in lent]
    placed = ", ".join(f"{pool['name']} on provider node {name}" for pool, name in zip(lent, names, strict=True))
    print(f"  pools: {placed}")
    figures: dict[int, dict] = {}
    for count in (1, args.pools):
        served = pool_nodes if count > 1 else [virtual_node_name(provider)]
        if count > 1:
            # Lent by the provider and taken by the consumer, as the peering module writes both sides.
            taken = json.dumps({"spec": {"pools": [{"name": pool["name"]} for pool in lent]}})
            foreign = ("-n", "catamaran-system", "patch", "foreigncluster", provider, "--type=merge", "-p", taken)
            lab.kubectl(CONSUMER, *foreign)
            federation.grant_terms(lab, CONSUMER, provider, field_manager="pools", pools=lent)
            wait_until(lambda: nodes_ready(lab, pool_nodes) and not nodes_ready(lab, [virtual_node_name(provider)]))
        # A process just started, then idle, in both configurations: its peak memory is this one's alone.
        fed.processes[vk].stop()
        fed.processes[vk].start()
        fed.pin()
        wait_until(lambda served=served: nodes_ready(lab, served))
        pid = fed.processes[vk].process.pid
        time.sleep(10)  # past start-up (lists, first writes)
        cpu_before = harness.cpu_seconds(pid)
        time.sleep(args.idle)
        idle_cpu = (harness.cpu_seconds(pid) - cpu_before) / args.idle
        idle_rss = harness.memory_mib(pid)[0]
        body = bench_deployment(f"pools-{count}", args.pool_pods, True)
        run = asyncio.run(timed_deployments(fed, [(CONSUMER, body)], f"pools-{count}", 1800, True))
        report(f"{count} virtual node{'s' if count > 1 else ''}, N = {args.pool_pods}{cpu_note(args)}", None, run, rows)
        figures[count] = {
            "idle CPU ms/s": idle_cpu * 1000,
            "idle RSS MiB": idle_rss,
            f"CPU s for {args.pool_pods} pods": run.cpu_s[vk],
            "peak RSS MiB": run.peak_mib[vk],
        }
        clean(lab, [CONSUMER], NAMESPACE, fed.providers)
    one, many = figures[1], figures[args.pools]
    extra = args.pools - 1
    print(f"\n== what an extra pool adds to the virtual kubelet ({args.pools} pools against one node)")
    print(f"  {'figure':<24} {'one node':>10} {f'{args.pools} pools':>10} {'per pool':>10} {'of one VK':>10}")
    for figure in one:
        added = (many[figure] - one[figure]) / extra
        share = added / one[figure] if one[figure] else math.nan
        print(f"  {figure:<24} {one[figure]:10.2f} {many[figure]:10.2f} {added:10.2f} {share:10.1%}")
        rows.append(
            {"scenario": "pools", "figure": figure, "one node": one[figure], "pools": many[figure]}
            | {"pool count": args.pools, "per extra pool": added, "of one virtual kubelet": share}
        )


INFEASIBLE_CPU = "1500"  # bench/lab.yaml nodes have 1000 CPUs each: the virtual node offers 90 % of their sum


def infeasible(args, rows: list[dict], charts: dict) -> None:
    with one_provider(args) as fed:
        print(f"  {args.infeasible} pods one after another, each requesting {INFEASIBLE_CPU} CPUs (a node has 1000)")
        seconds = asyncio.run(infeasible_answers(fed.lab, args.infeasible))
        p50, p99 = harness.percentile(seconds, 0.5), harness.percentile(seconds, 0.99)
        worst = max(seconds)
        print(f"\n== an infeasible pod's reason on the consumer: p50 {p50:.2f} s, p99 {p99:.2f} s, max {worst:.2f} s")
        rows += [{"scenario": "infeasible", "pod": i, "seconds": s} for i, s in enumerate(seconds)]


async def infeasible_answers(lab: Lab, count: int) -> list[float]:
    """Seconds from each pod's creation until its consumer's pod says Infeasible (a watch of it, from this process)."""
    from lightkube.resources.core_v1 import Pod

    client = harness.client_for(lab, CONSUMER)
    seconds = []
    try:
        for index in range(count):
            name = f"infeasible-{index}"
            body = bench_deployment(name, 1, True)["spec"]["template"]
            body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = INFEASIBLE_CPU
            pod = Pod.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body["spec"]})
            started = time.monotonic()
            await client.create(pod, namespace=NAMESPACE)
            watch = client.watch(Pod, namespace=NAMESPACE, fields={"metadata.name": name})
            async for _, seen in watch:
                conditions = (seen.status.conditions if seen.status else None) or []
                if any(c.type == "catamaran.io/RemotePodCreated" and c.reason == "Infeasible" for c in conditions):
                    seconds.append(time.monotonic() - started)
                    break
            await client.delete(Pod, name, namespace=NAMESPACE, grace_period=0)
    finally:
        await client.close()
    return seconds


def nodes_ready(lab: Lab, names: list[str]) -> bool:
    return all(federation.node_ready(lab, CONSUMER, name) == "True" for name in names)


def wait_until(predicate, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"the virtual nodes were not as wanted within {timeout_s:.0f} s")
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scenario", choices=["single", "fleet", "tenants", "pools", "infeasible", "all"], action="append"
    )
    parser.add_argument("--n", type=int, action="append", help="single: replica counts (default 100 and 1000)")
    parser.add_argument("--recreate", type=int, default=100, help="single: remote pods deleted one by one (0: skip)")
    parser.add_argument("--namespaces", type=int, default=200, help="single: offloaded namespaces (0: skip)")
    parser.add_argument("--providers", type=int, default=5, help="fleet: providers")
    parser.add_argument("--fleet-pods", type=int, default=10000, help="fleet: pods of the offloaded Deployment")
    parser.add_argument("--skip-baseline", action="store_true", help="fleet: no local baseline")
    parser.add_argument("--consumers", type=int, default=3, help="tenants: consumers peered with one provider")
    parser.add_argument("--tenant-pods", type=int, default=3334, help="tenants: pods each consumer offloads")
    parser.add_argument("--pools", type=int, default=3, help="pools: node pools (one per provider node)")
    parser.add_argument("--pool-pods", type=int, default=1000, help="pools: pods offloaded with each configuration")
    parser.add_argument("--idle", type=float, default=POOLS_IDLE_S, help="pools: seconds measured idle")
    parser.add_argument("--infeasible", type=int, default=20, help="infeasible: pods created one after another")
    harness.cpu_per_side_argument(parser)
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    harness.allow_noisy_argument(parser)
    args = parser.parse_args()
    harness.QUIET.allow_noisy = args.allow_noisy
    args.n = args.n or DEFAULT_N
    scenarios = args.scenario or ["single"]
    if "all" in scenarios:
        scenarios = ["single", "fleet", "tenants"]
    try:
        for scenario in scenarios:
            rows: list[dict] = []
            charts: dict = {}
            try:
                scenarios_by_name = {"single": single, "fleet": fleet, "tenants": tenants, "pools": pools}
                scenarios_by_name["infeasible"] = infeasible
                scenarios_by_name[scenario](args, rows, charts)
            finally:
                # What a scenario cut short measured is still written. Sizes beyond the default's get names of
                # their own: a `--n 10000` run does not overwrite the N = 1000 figures.
                beyond = scenario == "single" and not set(args.n) <= set(DEFAULT_N)
                sizes = f"-N-{'-'.join(map(str, args.n))}" if beyond else ""
                suffix = sizes + (harness.CPU_PER_SIDE_SUFFIX if args.cpu_per_side else "")
                if rows:
                    print(f"\nfigures: {harness.write_csv(f'offloading-{scenario}{suffix}.csv', rows)}")
                for name, draw in charts.items():
                    print(f"chart: {harness.plot(name.replace('.png', f'{suffix}.png'), draw)}")
    finally:
        if not args.keep_lab:
            harness.bench_lab_state().down()


if __name__ == "__main__":
    main()
