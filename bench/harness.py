"""What the offloading benches share: their lab, the settings they ran with, the controllers' per-hop metrics,
process figures (CPU, memory), a light pod watch, and the CSV and charts they write.

Nothing here asserts: it measures and prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import math
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from lightkube import AsyncClient, KubeConfig
from prometheus_client.parser import text_string_to_metric_families

from catamaran_lab import config as lab_config
from catamaran_lab.lab import Lab

REPO = Path(__file__).resolve().parent.parent
LAB_FILE = REPO / "bench" / "lab.yaml"
RESULTS = REPO / "bench" / "results"
# Figures of a run the machine was not quiet for go here instead, unless the bench is run with --allow-noisy.
NOISY_RESULTS = REPO / ".bench-noisy"
# Quiet: what neither the bench nor its lab spent stays under this share of the machine's CPUs, before and during.
QUIET_SHARE = 0.10
QUIET_BEFORE_S = 5.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def bench_lab_state() -> Lab:
    os.environ.setdefault("CATAMARAN_LAB_DIR", str(REPO / ".lab-bench"))
    return Lab(root=Path(os.environ["CATAMARAN_LAB_DIR"]))


def finish(lab: Lab, processes: list, keep_lab: bool) -> None:
    """Stop the bench's processes (last started first), then take the bench lab down unless asked to keep it."""
    for process in reversed(processes):
        process.stop()
    if keep_lab:
        print(f"bench lab kept: {lab.root}; logs in {lab.root / 'logs'}")
    else:
        lab.down()


def bench_lab(clusters: int, lab_file: Path = LAB_FILE) -> tuple[Lab, lab_config.LabConfig]:
    """The bench lab (.lab-bench/, ports 28000+) with the first `clusters` clusters of `lab_file`, kwok only."""
    lab = bench_lab_state()
    wanted = lab_config.load(lab_file, clusters=clusters, real_nodes=False)
    lab.up(wanted)
    QUIET.begin(lab.root)
    return lab, wanted


# -- a quiet machine ------------------------------------------------------------------------------------


def others_share(busy_s: float, ours_s: float, seconds: float, cpus: int) -> float:
    """The share of the machine's CPUs that neither the bench nor its lab spent over `seconds`. Pure."""
    if seconds <= 0:
        return 0.0
    return max(0.0, busy_s - ours_s) / (seconds * cpus)


def quiet_verdict(before: float, during: float, threshold: float = QUIET_SHARE) -> str | None:
    """Why the run does not count as quiet (None: it does), from the others' shares before and during it. Pure."""
    loud = [f"{when} {share:.0%}" for when, share in (("before", before), ("during", during)) if share > threshold]
    if not loud:
        return None
    return f"other processes used {' and '.join(loud)} of the machine's CPUs (quiet: at most {threshold:.0%})"


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def _process_seconds(pid: int) -> float:
    """utime + stime + the reaped children's cutime + cstime of one process."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields_[11:15]) / os.sysconf("SC_CLK_TCK")


def _ours(lab_root: Path | None) -> set[int]:
    """This process, its descendants, and every process of the lab (command line or directory in its root)."""
    parents: dict[int, int] = {}
    under_lab = set()
    marker = f"{lab_root}/" if lab_root else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            pid = int(entry)
            parents[pid] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if marker:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                cwd = os.readlink(f"/proc/{entry}/cwd")
                if marker in cmdline or cwd.startswith(marker) or cwd == str(lab_root):
                    under_lab.add(pid)
    ours = {os.getpid()} | under_lab
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in ours} - ours
        grew = bool(children)
        ours |= children
    return ours


class QuietWatch:
    """Was the machine quiet? The CPU other processes spent in the seconds before the bench's work and during it.
    Processes of ours that end meanwhile leave their CPU uncounted as ours (unless reaped by this process), so a
    verdict errs towards noisy."""

    def __init__(self):
        self.allow_noisy = False
        self.lab_root: Path | None = None
        self.before: float | None = None
        self._start: tuple[float, float, float] | None = None  # (monotonic, machine busy, ours)
        self._verdict_printed = False
        self._noisy_printed = False
        self._carried = 0.0  # CPU of our processes that have ended (carry_ending)

    def _ours_seconds(self, *, ending_only: bool = False) -> float:
        total = 0.0
        for pid in _ours(self.lab_root):
            if ending_only and pid == os.getpid():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += _process_seconds(pid)
        return total + (0.0 if ending_only else self._carried)

    def carry_ending(self) -> None:
        """Before the lab's processes end mid-run (a lab brought down and up again): what they spent stays ours.
        Their exit would otherwise turn it into other processes' CPU and the run into a noisy one."""
        if self._start is not None:
            self._carried += self._ours_seconds(ending_only=True)

    def _sample(self) -> tuple[float, float, float]:
        return time.monotonic(), machine_busy_seconds(), self._ours_seconds()

    def begin(self, lab_root: Path) -> None:
        """Once the lab is up: the share before, over QUIET_BEFORE_S, then the run's start (the first call only)."""
        if self._start is not None:
            return
        self.lab_root = lab_root
        first = self._sample()
        time.sleep(QUIET_BEFORE_S)
        self._start = self._sample()
        self.before = self._share(first, self._start)
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"machine before the run: load average {load}; other processes {self.before:.0%} of the CPUs", flush=True)

    def _share(self, start: tuple[float, float, float], end: tuple[float, float, float]) -> float:
        cpus = os.cpu_count() or 1
        return others_share(end[1] - start[1], end[2] - start[2], end[0] - start[0], cpus)

    def results_dir(self) -> Path:
        """bench/results for a quiet run (or one allowed noisy); NOISY_RESULTS otherwise, saying why, once."""
        if self._start is None or self.before is None:
            problem = "the machine's load was not measured"
        else:
            during = self._share(self._start, self._sample())
            problem = quiet_verdict(self.before, during)
            if not self._verdict_printed:
                load = " ".join(f"{v:.2f}" for v in os.getloadavg())
                print(f"machine during the run: load average {load}; other processes {during:.0%} of the CPUs")
        if problem is None or self.allow_noisy:
            if problem and not self._verdict_printed:
                print(f"noisy run written to {RESULTS} as asked (--allow-noisy): {problem}")
            self._verdict_printed = True
            return RESULTS
        if not self._noisy_printed:
            # Said once, also when an earlier write still counted as quiet: files of one run may then be split.
            print(f"not a quiet run: {problem}; figures written to {NOISY_RESULTS}, not {RESULTS} (--allow-noisy)")
        self._verdict_printed = self._noisy_printed = True
        return NOISY_RESULTS


QUIET = QuietWatch()


def allow_noisy_argument(parser) -> None:
    parser.add_argument(
        "--allow-noisy",
        action="store_true",
        help=f"write figures to bench/results even when the machine was not quiet (default: {NOISY_RESULTS.name}/)",
    )


# --cpu-per-side: consumers (and the agents working for them) on CPU 0, providers (and theirs) on CPU 1.
CPU_PER_SIDE_SUFFIX = "-cpu-per-side"


def cpu_per_side_argument(parser) -> None:
    parser.add_argument(
        "--cpu-per-side",
        action="store_true",
        help="pin consumers and the agents working for them to CPU 0, providers and theirs to CPU 1, as clusters on "
        f"machines of their own (result files end in {CPU_PER_SIDE_SUFFIX})",
    )


def print_settings(wanted: lab_config.LabConfig, catamaran: dict[str, str]) -> None:
    """Everything a figure depends on: the machine, the lab's control planes and Catamaran's own settings."""
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    print(f"machine: {os.cpu_count()} CPUs, {memory_gib:.0f} GiB", flush=True)
    print(f"lab: {len(wanted.clusters)} clusters, control planes and kwok fake nodes only (real nodes off)")
    print(f"lab controllers: {wanted.control_plane.describe()} (bench/lab.yaml controlPlane)")
    nodes = wanted.clusters[0].nodes
    print(f"lab nodes: {len(nodes)} kwok nodes per cluster, {nodes[0].allocatable.get('pods')} pods each")
    print("kube-apiserver: upstream defaults (max-requests-inflight 400, mutating 200, priority and fairness on)")
    for key, value in catamaran.items():
        print(f"catamaran {key}: {value}")
    print(flush=True)


# -- processes --------------------------------------------------------------------------------------


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of a process on `cpus` only (threads it starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cpus)


def pin_control_plane(lab: Lab, cluster: str, cpus: set[int]) -> None:
    """A lab cluster's components on `cpus` only, as a cluster on a machine of its own."""
    for pid in control_plane_pids(lab, cluster).values():
        pin(pid, cpus)


def control_plane_pids(lab: Lab, cluster: str) -> dict[str, int]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and metrics-server of a lab cluster."""
    found = {}
    for path in sorted((lab.kwok_workdir / "clusters" / cluster / "pids").glob("*.pid")):
        with contextlib.suppress(OSError, ValueError):
            found[path.stem] = int(path.read_text().strip())
    return found


def machine_cpu(lab: Lab, clusters: list[str], processes: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of every lab component, Catamaran process and this bench process, by name."""
    found = {f"bench (watch, {os.getpid()})": cpu_seconds(os.getpid())}
    components = {f"{c} {name}": pid for c in clusters for name, pid in control_plane_pids(lab, c).items()}
    for name, pid in {**components, **processes}.items():
        with contextlib.suppress(OSError):
            found[name] = cpu_seconds(pid)
    return found


def print_cpu(title: str, runs: dict[str, dict[str, float]]) -> None:
    """CPU seconds each component spent during each run (columns), busiest first."""
    names = sorted({n for used in runs.values() for n in used}, key=lambda n: -max(r.get(n, 0) for r in runs.values()))
    print(f"\nCPU seconds by component: {title}")
    print("  " + f"{'component':<44}" + "".join(f"{label:>12}" for label in runs))
    for name in names:
        print("  " + f"{name[:44]:<44}" + "".join(f"{runs[label].get(name, 0.0):>12.1f}" for label in runs))
    print("  " + f"{'all':<44}" + "".join(f"{sum(used.values()):>12.1f}" for used in runs.values()))


def cpu_seconds(pid: int) -> float:
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB; NaN once it is gone."""
    values = {"VmRSS": math.nan, "VmHWM": math.nan}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = line.split(":")[0]
            if key in values:
                values[key] = int(line.split()[1]) / 1024
    return values["VmRSS"], values["VmHWM"]


# -- per-hop metrics ----------------------------------------------------------------------------------


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@dataclass
class HopFigures:
    labels: dict[str, str]
    count: float
    total_s: float
    p50_s: float
    p99_s: float

    @property
    def mean_s(self) -> float:
        return self.total_s / self.count if self.count else math.nan


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile(): linear interpolation inside the bucket that holds the q-th observation."""
    if not buckets or buckets[-1][1] == 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1)
        lower_bound, lower_count = bound, count
    return lower_bound


def histogram(before: Samples, after: Samples, metric: str) -> list[HopFigures]:
    """Each label set's observations between two scrapes, busiest first."""
    groups: dict[tuple, dict] = {}
    for (name, labels), value in after.items():
        if not name.startswith(metric + "_"):
            continue
        delta = value - before.get((name, labels), 0.0)
        plain = tuple((k, v) for k, v in labels if k != "le")
        group = groups.setdefault(plain, {"buckets": [], "count": 0.0, "sum": 0.0})
        if name == metric + "_bucket":
            group["buckets"].append((float(dict(labels)["le"]), delta))
        elif name == metric + "_count":
            group["count"] = delta
        elif name == metric + "_sum":
            group["sum"] = delta
    figures = []
    for labels, group in groups.items():
        if group["count"] <= 0:
            continue
        buckets = sorted(group["buckets"])
        figures.append(
            HopFigures(dict(labels), group["count"], group["sum"], _quantile(0.5, buckets), _quantile(0.99, buckets))
        )
    return sorted(figures, key=lambda f: -f.total_s)


HOP_METRICS = (
    ("catamaran_queue_wait_seconds", "queue wait"),
    ("catamaran_reconcile_duration_seconds", "reconcile"),
    ("catamaran_api_request_duration_seconds", "API"),
    ("catamaran_event_loop_lag_seconds", "event loop lag"),
)


def hop_rows(process: str, before: Samples, after: Samples, top: int = 8) -> list[dict]:
    rows = []
    for metric, hop in HOP_METRICS:
        for figures in histogram(before, after, metric)[:top]:
            rows.append(
                {
                    "process": process,
                    "hop": hop,
                    "what": " ".join(figures.labels.values()) or "-",
                    "count": int(figures.count),
                    "mean_ms": figures.mean_s * 1000,
                    "p50_ms": figures.p50_s * 1000,
                    "p99_ms": figures.p99_s * 1000,
                    "total_s": figures.total_s,
                }
            )
    return rows


def print_hops(title: str, rows: list[dict]) -> None:
    print(f"\nwhere the time goes: {title}")
    header = f"{'process':<24} {'hop':<15} {'what':<34} {'count':>7} {'mean ms':>9} {'p50 ms':>8} {'p99 ms':>8}"
    print(f"  {header} {'sum s':>8}")
    for row in rows:
        print(
            f"  {row['process']:<24} {row['hop']:<15} {row['what'][:34]:<34} {row['count']:>7} "
            f"{row['mean_ms']:>9.1f} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} {row['total_s']:>8.1f}"
        )


# -- a light pod watch ---------------------------------------------------------------------------------


def client_for(lab: Lab, cluster: str) -> AsyncClient:
    return AsyncClient(
        config=KubeConfig.from_file(lab.kubeconfig(cluster)), timeout=httpx2.Timeout(30.0), trust_env=False
    )


def _ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class PodTimes:
    """When this process first saw each pod, and when it first saw it Ready (monotonic seconds)."""

    seen: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)

    def startups(self) -> list[float]:
        return sorted(self.ready[name] - self.seen[name] for name in self.ready)


async def watch_pods(
    client: AsyncClient,
    namespace: str | None,
    label_selector: str,
    times: PodTimes,
    done: Callable[[PodTimes], bool],
    resource_version: str,
) -> None:
    """Watch pods with json decoding only: lightkube's models would cost this process more CPU than the
    controllers it measures, on a machine they share."""
    http = client._client._client
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    version = resource_version
    while not done(times):
        params = {"watch": "true", "labelSelector": label_selector, "resourceVersion": version}
        params["allowWatchBookmarks"] = "true"
        async with http.stream("GET", path, params=params, timeout=None) as response:
            async for line in response.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                pod = event["object"]
                version = pod["metadata"].get("resourceVersion") or version
                if event["type"] in ("BOOKMARK", "DELETED", "ERROR"):
                    continue
                now = time.monotonic()
                name = pod["metadata"]["name"]
                times.seen.setdefault(name, now)
                times.uids[name] = pod["metadata"]["uid"]
                if name not in times.ready and _ready(pod):
                    times.ready[name] = now
                    if done(times):
                        return


async def list_version(client: AsyncClient, namespace: str | None, label_selector: str) -> str:
    http = client._client._client
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    response = await http.get(path, params={"labelSelector": label_selector, "limit": "1"})
    response.raise_for_status()
    return response.json()["metadata"]["resourceVersion"]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def sample_while(task: asyncio.Task, every_s: float, sample: Callable[[], None]) -> None:
    while not task.done():
        sample()
        await asyncio.wait([task], timeout=every_s)
    sample()


# -- CSV and charts -------------------------------------------------------------------------------------


def write_csv(name: str, rows: list[dict], timed: bool = True) -> Path:
    """bench/results/<name>; figures of time or CPU (`timed`) only from a quiet run (QuietWatch)."""
    directory = QUIET.results_dir() if timed else RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
    return path


def plot(name: str, draw: Callable, timed: bool = True) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    directory = QUIET.results_dir() if timed else RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    draw(axes)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    path = directory / name
    figure.savefig(path)
    pyplot.close(figure)
    return path


def startup_cdf(series: dict[str, list[float]], title: str) -> Callable:
    def draw(axes) -> None:
        for label, values in series.items():
            ordered = sorted(values)
            if not ordered:
                continue
            fractions = [(index + 1) / len(ordered) for index in range(len(ordered))]
            axes.plot(ordered, fractions, label=f"{label} (p99 {percentile(ordered, 0.99):.1f} s)")
        axes.axvline(5, color="red", linestyle="--", linewidth=1, label="SLO p99 5 s")
        axes.set_xlabel("pod start-up: first seen -> Ready (s)")
        axes.set_ylabel("fraction of pods")
        axes.set_title(title)
        axes.legend(loc="lower right")

    return draw


def memory_curve(series: dict[str, list[tuple[int, float]]], title: str) -> Callable:
    def draw(axes) -> None:
        for label, points in series.items():
            if points:
                axes.plot([p for p, _ in points], [m for _, m in points], label=label)
        axes.set_xlabel("offloaded pods Ready")
        axes.set_ylabel("RSS (MiB)")
        axes.set_title(title)
        axes.legend(loc="upper left")

    return draw
