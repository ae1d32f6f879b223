"""Benchmark: the kubelet API of a virtual node against the same calls made on the provider directly.

Runs on its own lab (bench/lab.yaml, state in .lab-bench/, ports 28000+) with real nodes, so stop the test
lab first (`make lab-down`): real nodes of both labs would share host network ranges. bench-consumer is
peered to bench-provider, whose pods run on its real node. One pod, `target` (busybox: httpd serving a
--mib file, and a log of 200 lines), is offloaded; every measurement is made twice, in the same run, with
the same client code:

  through   the consumer's API server, for pod bench-kubelet/target (API server -> virtual kubelet over TLS
            and SPDY -> the provider's API server -> its kubelet)
  direct    the provider's API server, for the twin pod bench-kubelet-bench-consumer/target

  log       time to the first byte of GET pods/target/log?tailLines=1 (a new TLS connection each time)
  exec      a WebSocket exec of `echo ok` (v5.channel.k8s.io, what kubectl uses): from the upgrade request
            to the exit status received
  forward   `kubectl port-forward` to the pod's port 8080, then --mib MiB fetched over one connection,
            and the time to fetch it --rounds times over 8 concurrent connections

It prints figures and through/direct ratios; it asserts nothing.

    .venv/bin/python bench/kubelet_api.py                 # 40 calls each, 64 MiB
    .venv/bin/python bench/kubelet_api.py --calls 100 --mib 256 --keep-lab
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import http.client
import json
import re
import ssl
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import aiohttp  # noqa: E402
from harness import bench_lab_state, finish, percentile  # noqa: E402
from lightkube.config.client_adapter import user_auth, verify_cluster  # noqa: E402
from lightkube.config.kubeconfig import KubeConfig  # noqa: E402

from catamaran.constants import default_twin_namespace, virtual_node_name  # noqa: E402
from catamaran_lab import config as lab_config  # noqa: E402
from catamaran_lab.lab import Lab  # noqa: E402
from tests.integration import federation  # noqa: E402
from tests.integration.manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, real_pod  # noqa: E402

CONSUMER, PROVIDER = "bench-consumer", "bench-provider"
NAMESPACE = "bench-kubelet"
TWIN = default_twin_namespace(NAMESPACE, CONSUMER)
LAB_FILE = REPO / "bench" / "lab.yaml"
NODE = virtual_node_name(PROVIDER)


@dataclass
class Endpoint:
    """One API server and the namespace where `target` is seen there."""

    label: str
    cluster: str
    namespace: str
    server: str
    ssl: ssl.SSLContext
    headers: dict[str, str]


def endpoint(lab: Lab, label: str, cluster: str, namespace: str) -> Endpoint:
    config = KubeConfig.from_file(lab.kubeconfig(cluster)).get()
    context = verify_cluster(config.cluster, config.user, config.abs_file, trust_env=False)
    headers: dict[str, str] = {}
    auth = user_auth(config.user)
    if auth is not None:
        import httpx2

        request = next(auth.sync_auth_flow(httpx2.Request("GET", config.cluster.server)))
        headers["Authorization"] = request.headers["Authorization"]
    return Endpoint(label, cluster, namespace, config.cluster.server.rstrip("/"), context, headers)


def first_log_byte(target: Endpoint) -> float:
    host, port = re.match(r"https://([^:/]+):(\d+)", target.server).groups()
    started = time.perf_counter()
    connection = http.client.HTTPSConnection(host, int(port), context=target.ssl, timeout=30)
    connection.request(
        "GET", f"/api/v1/namespaces/{target.namespace}/pods/target/log?tailLines=1", headers=target.headers
    )
    response = connection.getresponse()
    response.read(1)
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise SystemExit(f"{target.label}: log request answered {response.status}: {response.read()[:200]!r}")
    response.read()
    connection.close()
    return elapsed


async def exec_round_trip(target: Endpoint, session: aiohttp.ClientSession) -> float:
    url = (
        f"{target.server}/api/v1/namespaces/{target.namespace}/pods/target/exec"
        "?command=echo&command=ok&stdout=true&stderr=true&container=main"
    )
    started = time.perf_counter()
    async with session.ws_connect(url, protocols=["v5.channel.k8s.io"], headers=target.headers, ssl=target.ssl) as ws:
        output, status = b"", b""
        async for message in ws:
            if message.type != aiohttp.WSMsgType.BINARY:
                continue
            if message.data[:1] == b"\x01":
                output += message.data[1:]
            elif message.data[:1] == b"\x03":
                status += message.data[1:]
                break
    elapsed = time.perf_counter() - started
    if output.strip() != b"ok" or b"Success" not in status:
        raise SystemExit(f"{target.label}: exec gave {output!r}, status {status!r}")
    return elapsed


async def exec_round_trips(target: Endpoint, calls: int) -> list[float]:
    async with aiohttp.ClientSession() as session:
        return [await exec_round_trip(target, session) for _ in range(calls)]


def forward_throughput(lab: Lab, target: Endpoint, mib: int, rounds: int) -> tuple[float, float]:
    """MiB/s of one download, and of `rounds` downloads over 8 connections at once."""
    command = [
        str(lab.cache.path("kubectl")), "--kubeconfig", str(lab.kubeconfig(target.cluster)),
        "-n", target.namespace, "port-forward", "pod/target", ":8080",
    ]  # fmt: skip
    forward = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = forward.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not match:
            raise SystemExit(f"{target.label}: port-forward said {line!r}")
        port = int(match.group(1))

        def download(_: int = 0) -> int:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            connection.request("GET", "/big")
            response = connection.getresponse()
            size = 0
            while chunk := response.read(1 << 20):
                size += len(chunk)
            connection.close()
            if size != mib << 20:
                raise SystemExit(f"{target.label}: fetched {size} bytes, expected {mib << 20}")
            return size

        download()  # warm-up: connection set-up and the provider's caches
        started = time.perf_counter()
        download()
        single = mib / (time.perf_counter() - started)
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            total = sum(pool.map(download, range(rounds)))
        parallel = (total >> 20) / (time.perf_counter() - started)
        return single, parallel
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), percentile(values, 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40, help="log and exec calls per path (default: 40)")
    parser.add_argument("--mib", type=int, default=64, help="size of the file fetched through port-forward (64)")
    parser.add_argument("--rounds", type=int, default=16, help="concurrent downloads per path (default: 16)")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    args = parser.parse_args()

    lab = bench_lab_state()
    processes: list[federation.ControllerProcess] = []
    try:
        lab.up(lab_config.load(LAB_FILE, clusters=2))
        for cluster in (CONSUMER, PROVIDER):
            federation.install_crds(lab, cluster)
        federation.peer(lab, CONSUMER, PROVIDER)
        federation.place(lab, CONSUMER, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
        vk = federation.virtual_kubelet(lab, CONSUMER, PROVIDER)
        processes = [federation.manager(lab, CONSUMER), federation.manager(lab, PROVIDER), vk]
        for process in processes:
            process.start()
        deadline = time.monotonic() + 120
        while federation.node_ready(lab, CONSUMER, NODE) != "True":
            if time.monotonic() > deadline:
                raise SystemExit(f"{NODE} never became Ready; see {vk.log_path}")
            time.sleep(1)
        lab.kubectl(CONSUMER, "create", "namespace", NAMESPACE, check=False)
        federation.offload_namespace(lab, CONSUMER, NAMESPACE)  # only offloaded namespaces' pods leave
        while lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "sa", "default", check=False).returncode:
            time.sleep(0.5)
        script = (
            'for i in $(seq 200); do echo "log line $i"; done; mkdir -p /tmp/www; '
            f"dd if=/dev/zero of=/tmp/www/big bs=1048576 count={args.mib} 2>/dev/null; "
            "exec httpd -f -p 8080 -h /tmp/www"
        )
        pod = real_pod("target", ["sh", "-c", script])
        pod["metadata"]["namespace"] = NAMESPACE
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
        pod["spec"]["tolerations"] = [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists"}]
        pod["spec"]["containers"][0]["resources"] = {"limits": {"memory": f"{args.mib + 64}Mi"}}
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/target", "--timeout=180s",
                    timeout=200)  # fmt: skip
        while "log line 200" not in lab.kubectl(CONSUMER, "-n", NAMESPACE, "logs", "target", check=False).stdout:
            time.sleep(0.5)

        through = endpoint(lab, "through", CONSUMER, NAMESPACE)
        direct = endpoint(lab, "direct", PROVIDER, TWIN)
        print(
            f"lab: {LAB_FILE.name}, real nodes on; the lab sets no QPS, burst or in-flight limit (component defaults)"
        )
        print(f"virtual kubelet: python -m catamaran {' '.join(vk.args)}")
        print(f"calls per path: {args.calls} logs, {args.calls} execs; port-forward file {args.mib} MiB, "
              f"{args.rounds} downloads over 8 connections")  # fmt: skip
        results: dict[str, dict[str, list[float] | tuple[float, float]]] = {}
        for target in (direct, through):
            first_log_byte(target)  # warm-up
            results.setdefault("log first byte (ms)", {})[target.label] = [
                first_log_byte(target) * 1000 for _ in range(args.calls)
            ]
            asyncio.run(exec_round_trips(target, 2))  # warm-up
            results.setdefault("exec round trip (ms)", {})[target.label] = [
                t * 1000 for t in asyncio.run(exec_round_trips(target, args.calls))
            ]
            single, parallel = forward_throughput(lab, target, args.mib, args.rounds)
            results.setdefault("port-forward MiB/s", {})[target.label] = (single, parallel)

        print()
        print(f"{'measure':<24}{'direct':>22}{'through':>22}{'ratio':>9}")
        for measure in ("log first byte (ms)", "exec round trip (ms)"):
            d50, d95 = summary(results[measure]["direct"])
            t50, t95 = summary(results[measure]["through"])
            print(f"{measure:<24}{f'p50 {d50:7.1f} p95 {d95:7.1f}':>22}{f'p50 {t50:7.1f} p95 {t95:7.1f}':>22}"
                  f"{t50 / d50:>8.2f}x")  # fmt: skip
        (ds, dp), (ts, tp) = results["port-forward MiB/s"]["direct"], results["port-forward MiB/s"]["through"]
        print(f"{'port-forward 1 conn':<24}{ds:>17.1f} MiB/s{ts:>17.1f} MiB/s{ts / ds:>8.2f}x")
        print(f"{'port-forward 8 conns':<24}{dp:>17.1f} MiB/s{tp:>17.1f} MiB/s{tp / dp:>8.2f}x")
        print("ratio: through / direct (time: higher is slower; throughput: lower is slower)")
    finally:
        finish(lab, processes, args.keep_lab)


if __name__ == "__main__":
    main()
