"""Benchmark: Deployment creation to all pods Ready, offloaded through a virtual node vs local kwok nodes.

Runs on its own lab (bench/lab.yaml, state in .lab-bench/, ports 28000+) so it never disturbs the
test lab. For each N it measures the baseline (the consumer's own kwok nodes) and the offloaded
Deployment in the same run, and prints both times, their ratio, per-pod startup p50/p99 (seen by
a watch in this process) and the virtual kubelet's peak RSS. It prints figures; it asserts nothing.

    .venv/bin/python bench/offloading.py            # N = 100 and 1000
    .venv/bin/python bench/offloading.py --n 5000   # also report the virtual kubelet's RSS at 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lightkube import AsyncClient, KubeConfig  # noqa: E402
from lightkube.resources.core_v1 import Pod  # noqa: E402

from catamaran.constants import virtual_node_name  # noqa: E402
from catamaran_lab import config as lab_config  # noqa: E402
from catamaran_lab.lab import Lab  # noqa: E402
from tests.integration import federation  # noqa: E402
from tests.integration.manifests import container, deployment  # noqa: E402

CONSUMER, PROVIDER = "bench-consumer", "bench-provider"
NAMESPACE = "bench"


def bench_deployment(name: str, replicas: int, offloaded: bool) -> dict:
    spec: dict = {"containers": [container(cpu="10m", memory="16Mi")]}
    if offloaded:
        spec["nodeSelector"] = {"catamaran.io/type": "virtual-node"}
        spec["tolerations"] = [
            {"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}
        ]
    else:
        spec["nodeSelector"] = {"catamaran.io/lab-node": "true"}
    return deployment(name, replicas, spec, NAMESPACE)


def _ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])) if pod.status else False


async def measure(lab: Lab, name: str, replicas: int, offloaded: bool) -> dict:
    """Create the Deployment and watch its pods until all are Ready; times are seen by this watch."""
    client = AsyncClient(config=KubeConfig.from_file(lab.kubeconfig(CONSUMER)))
    seen: dict[str, float] = {}
    ready: dict[str, float] = {}
    listing = client.list(Pod, namespace=NAMESPACE, labels={"app": name})
    _ = [p async for p in listing]
    started = time.monotonic()
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(bench_deployment(name, replicas, offloaded)))
    async for event, pod in client.watch(
        Pod, namespace=NAMESPACE, labels={"app": name}, resource_version=listing.resourceVersion
    ):
        now = time.monotonic()
        pod_name = pod.metadata.name
        if event == "DELETED":
            continue
        seen.setdefault(pod_name, now)
        if _ready(pod) and pod_name not in ready:
            ready[pod_name] = now
            if len(ready) == replicas:
                break
    total = time.monotonic() - started
    await client.close()
    startups = sorted(ready[p] - seen[p] for p in ready)
    return {
        "total_s": total,
        "p50_s": statistics.median(startups),
        "p99_s": startups[min(len(startups) - 1, int(len(startups) * 0.99))],
    }


def clean(lab: Lab, name: str, offloaded: bool) -> None:
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "deployment", name, "--wait=true", timeout=900, check=False)
    if not offloaded:
        # kwok removes terminating pods a few per second; the baseline's cleanup is not what we measure.
        lab.kubectl(
            CONSUMER,
            "-n",
            NAMESPACE,
            "delete",
            "pods",
            "-l",
            f"app={name}",
            "--grace-period=0",
            "--force",
            timeout=900,
            check=False,
        )
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        pods = json.loads(lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "pods", "-o", "json").stdout)["items"]
        remote = lab.kubectl(PROVIDER, "get", "shadowpods", "-A", "-o", "name", check=False).stdout.split()
        if not pods and not remote:
            return
        time.sleep(2)
    raise SystemExit(f"cleanup of {name} did not finish")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, action="append", help="replica counts (default: 100 and 1000)")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    parser.add_argument("--skip-baseline", action="store_true", help="only the offloaded runs (memory figures)")
    args = parser.parse_args()
    sizes = args.n or [100, 1000]

    os.environ.setdefault("CATAMARAN_LAB_DIR", str(REPO / ".lab-bench"))
    lab = Lab(root=Path(os.environ["CATAMARAN_LAB_DIR"]))
    # Control planes and kwok only: the figures are about scale, and both runs use kwok nodes alike.
    lab.up(lab_config.load(REPO / "bench" / "lab.yaml", real_nodes=False))
    print("bench lab: control planes + kwok fake nodes, real nodes off", flush=True)
    processes = []
    try:
        for cluster in (CONSUMER, PROVIDER):
            federation.install_crds(lab, cluster)
        federation.peer(lab, CONSUMER, PROVIDER, networking={"podCIDRRemap": "10.200.0.0/16"})
        processes = [federation.manager(lab, PROVIDER), federation.virtual_kubelet(lab, CONSUMER, PROVIDER)]
        for process in processes:
            process.start()
        vk = processes[1]
        node = virtual_node_name(PROVIDER)
        deadline = time.monotonic() + 120
        while (
            lab.kubectl(
                CONSUMER, "wait", "--for=condition=Ready", f"node/{node}", "--timeout=5s", check=False
            ).returncode
            != 0
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"virtual node {node} never became Ready; see {vk.log_path}")
            time.sleep(1)
        lab.kubectl(CONSUMER, "create", "namespace", NAMESPACE, check=False)
        federation.offload_namespace(lab, CONSUMER, NAMESPACE)  # only offloaded namespaces' pods leave
        time.sleep(2)

        rows = []
        for index, size in enumerate(sizes):
            last = index == len(sizes) - 1 and not args.keep_lab  # the lab's teardown removes everything
            baseline = None
            if not args.skip_baseline:
                baseline = asyncio.run(measure(lab, f"local-{size}", size, offloaded=False))
                clean(lab, f"local-{size}", offloaded=False)
            offloaded = asyncio.run(measure(lab, f"remote-{size}", size, offloaded=True))
            rss = peak_rss_mib(vk.process.pid)
            if not last:
                clean(lab, f"remote-{size}", offloaded=True)
            rows.append((size, baseline, offloaded, rss))
            print(f"N={size}: offloaded {offloaded['total_s']:.1f}s, VK peak RSS {rss:.0f} MiB", flush=True)

        print()
        print(
            f"{'N':>6} {'baseline s':>11} {'offloaded s':>12} {'ratio':>6} {'base p50/p99 s':>16} "
            f"{'off p50/p99 s':>15} {'VK peak RSS MiB':>16}"
        )
        for size, baseline, offloaded, rss in rows:
            base = baseline or {"total_s": float("nan"), "p50_s": float("nan"), "p99_s": float("nan")}
            print(
                f"{size:>6} {base['total_s']:>11.1f} {offloaded['total_s']:>12.1f} "
                f"{offloaded['total_s'] / base['total_s']:>6.2f} "
                f"{base['p50_s']:>7.2f}/{base['p99_s']:<8.2f} "
                f"{offloaded['p50_s']:>6.2f}/{offloaded['p99_s']:<8.2f}"
                f"{rss:>16.0f}"
            )
    finally:
        for process in processes:
            process.stop()
        if not args.keep_lab:
            lab.down()


if __name__ == "__main__":
    main()
