"""Benchmark: the network fabric against the same requests routed directly between the two clusters' nodes.

Runs on its own lab (bench/lab.yaml, state in .lab-bench/, ports 28000+) with real nodes, so stop the test
lab first (`make lab-down`): real nodes of both labs would share host network ranges. bench-consumer peers
with bench-provider in mode Fabric; each runs its gateway on its real node (userspace WireGuard here). A pod,
`target` (busybox httpd serving a small page and a --mib file), is offloaded to the provider's real node; a
pod on the consumer's real node, `client`, is where every request starts (the probe runs in its network
namespace). Every measurement is made twice in the same run, with the same client code:

  direct     a veth pair joins the two nodes' network namespaces, routing each side's pod /24 to the other
             (more specific than the fabric's routes): the same request with no tunnel, no encryption
  wireguard  the same routes through a tunnel of the same wireguard-go, made by hand with `wg` over the
             underlay, with nothing of Catamaran on its way (no rule, no remap): the engine's own cost here
  fabric     through the consumer's gateway, the peering's WireGuard tunnel and the provider's gateway

  latency     --requests HTTP GETs of the page, each on a new connection: p50 / p99
  throughput  the --mib file over one TCP connection: MiB/s, and the gateways' CPU per GiB through the fabric
  reach       a new offloaded pod: from its consumer-side pod turning Ready (seen by a watch) to the first
              answer from its IP (--new-pods pods): p50 / p99
  memory      each gateway's and each wireguard-go's resident memory after the run (per peering)

It prints figures and the ratios fabric/direct (the issue's goals) and fabric/wireguard (what Catamaran adds
to the engine); it asserts nothing.

    .venv/bin/python bench/fabric.py                  # 300 requests, 256 MiB, 10 new pods
    .venv/bin/python bench/fabric.py --requests 1000 --keep-lab
    .venv/bin/python bench/fabric.py --wireguard-go /usr/bin/wireguard-go   # Debian's, for comparison
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from harness import bench_lab_state, cpu_seconds, finish, memory_mib, percentile  # noqa: E402

from catamaran.constants import virtual_node_name  # noqa: E402
from catamaran_lab import config as lab_config  # noqa: E402
from catamaran_lab.lab import Lab  # noqa: E402
from tests.integration import federation  # noqa: E402
from tests.integration.manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, real_pod  # noqa: E402

CONSUMER, PROVIDER = "bench-consumer", "bench-provider"
NAMESPACE = "bench-fabric"
LOCAL = "bench-fabric-client"
LAB_FILE = REPO / "bench" / "lab.yaml"
NODE = virtual_node_name(PROVIDER)
TO_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists"}],
}
DIRECT_LINKS = ("cmbenchd1", "cmbenchd2")
DIRECT_ADDRESSES = ("192.168.251.1", "192.168.251.2")
BARE_TUNNELS = ("cmbenchw1", "cmbenchw2")  # unique on the host: wireguard-go's sockets share one directory
BARE_PORT = 51900
PATHS = ("direct", "wireguard", "fabric")


def unmasqueraded(action: str, interface: str) -> list[str]:
    return ["iptables", "-t", "nat", action, "POSTROUTING", "-o", interface, "-j", "ACCEPT"]


# Runs in the client pod's network namespace (python from the host, the pod's network): prints JSON.
PROBE = r"""
import http.client, json, sys, time
mode, host = sys.argv[1], sys.argv[2]
def get(path, timeout=5):
    connection = http.client.HTTPConnection(host, 8080, timeout=timeout)
    connection.request("GET", path)
    response = connection.getresponse()
    size = 0
    while chunk := response.read(1 << 20):
        size += len(chunk)
    connection.close()
    return response.status, size
if mode == "latency":
    get("/index.html")
    times = []
    for _ in range(int(sys.argv[3])):
        started = time.perf_counter()
        get("/index.html")
        times.append(time.perf_counter() - started)
    print(json.dumps(times))
elif mode == "throughput":
    started = time.perf_counter()
    status, size = get("/big", timeout=120)
    print(json.dumps({"seconds": time.perf_counter() - started, "bytes": size}))
else:
    deadline = time.monotonic() + 60
    started = time.perf_counter()
    while time.monotonic() < deadline:
        try:
            if get("/index.html", timeout=0.5)[0] == 200:
                print(json.dumps(time.perf_counter() - started))
                break
        except OSError:
            time.sleep(0.02)
"""


def container_pid(container_id: str) -> int:
    """The container's main process, found by its cgroup (the lab has no crictl)."""
    hex_id = container_id.split("://", 1)[1]
    for entry in sorted(filter(str.isdigit, os.listdir("/proc")), key=int):
        with contextlib.suppress(OSError):
            if hex_id in Path(f"/proc/{entry}/cgroup").read_text():
                return int(entry)
    raise SystemExit(f"no process of container {container_id}")


def probe(pid: int, *args: str) -> object:
    command = ["nsenter", f"--net=/proc/{pid}/ns/net", "--", sys.executable, "-c", PROBE, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(result.stdout) if result.stdout.strip() else None  # "reach": None when never reached


def pod_json(lab: Lab, cluster: str, namespace: str, name: str) -> dict:
    return json.loads(lab.kubectl(cluster, "-n", namespace, "get", "pod", name, "-o", "json").stdout)


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def wait_ready(lab: Lab, cluster: str, namespace: str, name: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            pod = pod_json(lab, cluster, namespace, name)
            if ready(pod):
                return pod
        time.sleep(0.05)
    raise SystemExit(f"{cluster}: pod {namespace}/{name} never became Ready")


def direct_path(lab: Lab, wanted: lab_config.LabConfig, up: bool) -> None:
    """A veth pair between the two real nodes' namespaces, each side's pod /24 routed to the other over it."""
    consumer, provider = (lab.real_node(wanted.cluster(name)).layout.netns for name in (CONSUMER, PROVIDER))
    if not up:
        subprocess.run(["ip", "-n", consumer, "link", "delete", DIRECT_LINKS[0]], capture_output=True, check=False)
        return
    ranges = [wanted.cluster(name).real_node.pod_cidr for name in (CONSUMER, PROVIDER)]
    steps = [
        ["ip", "link", "add", DIRECT_LINKS[0], "netns", consumer, "type", "veth", "peer", DIRECT_LINKS[1],
         "netns", provider],
        ["ip", "-n", consumer, "addr", "add", f"{DIRECT_ADDRESSES[0]}/30", "dev", DIRECT_LINKS[0]],
        ["ip", "-n", provider, "addr", "add", f"{DIRECT_ADDRESSES[1]}/30", "dev", DIRECT_LINKS[1]],
        ["ip", "-n", consumer, "link", "set", DIRECT_LINKS[0], "up"],
        ["ip", "-n", provider, "link", "set", DIRECT_LINKS[1], "up"],
        ["ip", "-n", consumer, "route", "add", ranges[1], "via", DIRECT_ADDRESSES[1]],
        ["ip", "-n", provider, "route", "add", ranges[0], "via", DIRECT_ADDRESSES[0]],
    ]  # fmt: skip
    for step in steps:
        subprocess.run(step, capture_output=True, text=True, check=True)


@contextlib.contextmanager
def bare_wireguard(lab: Lab, wanted: lab_config.LabConfig, wireguard_go: str):
    """A wireguard-go tunnel between the two real nodes' namespaces over the underlay, set up with `wg` alone, each
    side's pod /24 routed into it (more specific than the fabric's routes)."""
    sides = [wanted.cluster(name) for name in (CONSUMER, PROVIDER)]
    keys = [subprocess.run(["wg", "genkey"], capture_output=True, text=True, check=True).stdout for _ in sides]
    public = [subprocess.run(["wg", "pubkey"], input=k, capture_output=True, text=True).stdout.strip() for k in keys]
    engines = []
    try:
        for index, (side, name) in enumerate(zip(sides, BARE_TUNNELS, strict=True)):
            netns, other = lab.real_node(side).layout.netns, sides[1 - index].real_node
            engine = ["ip", "netns", "exec", netns, wireguard_go, "-f", name]
            engines.append(subprocess.Popen(engine, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 15
            while subprocess.run(["ip", "-n", netns, "link", "show", name], capture_output=True).returncode:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{wireguard_go} made no interface {name} in {netns}")
                time.sleep(0.05)
            peer = [
                "peer",
                public[1 - index],
                "allowed-ips",
                other.pod_cidr,
                "endpoint",
                f"{other.underlay_ip}:{BARE_PORT}",
            ]
            wg_set = ["wg", "set", name, "private-key", "/dev/stdin", "listen-port", str(BARE_PORT), *peer]
            steps = (["link", "set", name, "mtu", "1420", "up"], ["route", "add", other.pod_cidr, "dev", name])
            subprocess.run(["ip", "netns", "exec", netns, *wg_set], input=keys[index], text=True, check=True)
            for step in steps:
                subprocess.run(["ip", "-n", netns, *step], capture_output=True, text=True, check=True)
            # Pod addresses kept through the tunnel, as the gateway keeps them (the CNI masquerades what leaves a
            # pod for another range, and the tunnel has no address to masquerade to).
            subprocess.run(["ip", "netns", "exec", netns, *unmasqueraded("-I", name)], check=True)
        yield
    finally:
        for side, name in zip(sides, BARE_TUNNELS, strict=True):
            netns = lab.real_node(side).layout.netns
            subprocess.run(["ip", "netns", "exec", netns, *unmasqueraded("-D", name)], capture_output=True)
        for engine in engines:  # its interface and socket go with it
            engine.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                engine.wait(timeout=10)


def wireguard_pids() -> dict[str, int]:
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode()).name == "wireguard-go":
                found[argv[-2].decode() if argv[-1] == b"" else argv[-1].decode()] = int(entry)
    return found


def measure(client_pid: int, target_ip: str, requests: int) -> dict:
    """Latency and one stream's throughput from the client to the target, on whichever path routes them now; the
    CPU of every wireguard-go on the host meanwhile (none on the direct path)."""
    if probe(client_pid, "reach", target_ip) is None:  # within 60 s: a new path's first handshake
        raise SystemExit(f"the target {target_ip} does not answer the client on this path")
    latency = [t * 1000 for t in probe(client_pid, "latency", target_ip, str(requests))]
    pids = wireguard_pids()
    cpu_before = sum(cpu_seconds(pid) for pid in pids.values())
    transfer = probe(client_pid, "throughput", target_ip)
    cpu = sum(cpu_seconds(pid) for pid in pids.values()) - cpu_before
    return {
        "p50": percentile(latency, 0.5),
        "p99": percentile(latency, 0.99),
        "mibs": transfer["bytes"] / 1024**2 / transfer["seconds"],
        "cpu_per_gib": cpu / (transfer["bytes"] / 1024**3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="HTTP requests per path (default: 300)")
    parser.add_argument("--mib", type=int, default=256, help="size of the file fetched per path (default: 256)")
    parser.add_argument("--new-pods", type=int, default=10, help="new offloaded pods timed to reachable (10)")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    parser.add_argument(
        "--wireguard-go", help="the userspace WireGuard the gateways run (default: the lab's, lab/gomod-wireguard)"
    )
    args = parser.parse_args()

    lab = bench_lab_state()
    processes: list[federation.ControllerProcess] = []
    wanted = lab_config.load(LAB_FILE, clusters=2, overlapping_pod_cidrs=False)
    try:
        lab.up(wanted)
        for cluster in (CONSUMER, PROVIDER):
            federation.install_crds(lab, cluster)
        federation.peer(lab, CONSUMER, PROVIDER)
        federation.place(lab, CONSUMER, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
        federation.connect_fabric(lab, CONSUMER, PROVIDER)
        gateways = [federation.gateway(lab, name, args.wireguard_go) for name in (CONSUMER, PROVIDER)]
        wireguard_go = args.wireguard_go or federation.gateway_facts(lab, CONSUMER)["wireguard_go"]
        vk = federation.virtual_kubelet(lab, CONSUMER, PROVIDER)
        processes = [*gateways, federation.manager(lab, PROVIDER), vk]
        for process in processes:
            process.start()
        while federation.node_ready(lab, CONSUMER, NODE) != "True":
            time.sleep(1)
        for namespace in (NAMESPACE, LOCAL):
            lab.kubectl(CONSUMER, "create", "namespace", namespace, check=False)
        federation.offload_namespace(lab, CONSUMER, NAMESPACE)
        while any(
            lab.kubectl(CONSUMER, "-n", n, "get", "sa", "default", check=False).returncode for n in (NAMESPACE, LOCAL)
        ):
            time.sleep(0.5)
        serve = (
            "mkdir -p /tmp/www && echo ok > /tmp/www/index.html && "
            f"dd if=/dev/zero of=/tmp/www/big bs=1048576 count={args.mib} 2>/dev/null; "
            "exec httpd -f -p 8080 -h /tmp/www"
        )
        target = real_pod("target", ["sh", "-c", serve], **TO_VIRTUAL_NODE)
        target["spec"]["containers"][0]["resources"] = {"limits": {"memory": f"{args.mib + 64}Mi"}}
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(target))
        lab.kubectl(CONSUMER, "-n", LOCAL, "apply", "-f", "-", input=json.dumps(real_pod("client", ["sleep", "7200"])))
        client = wait_ready(lab, CONSUMER, LOCAL, "client")
        target_ip = wait_ready(lab, CONSUMER, NAMESPACE, "target")["status"]["podIP"]
        client_pid = container_pid(client["status"]["containerStatuses"][0]["containerID"])
        while probe(client_pid, "reach", target_ip) is None:
            time.sleep(1)  # the tunnel is up and the target answers

        print(f"machine: {os.cpu_count()} CPUs; lab: {LAB_FILE.name}, 2 clusters, real nodes on, distinct pod ranges")
        print(f"gateways: {' | '.join('python -m catamaran ' + ' '.join(g.args) for g in gateways)}")
        version = subprocess.run([wireguard_go, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        print(f"WireGuard: userspace, {wireguard_go} ({version}), MTU 1420, keepalive 5 s")
        print("the direct path: a veth pair between the two real nodes' network namespaces; the wireguard path: a")
        print(
            f"  tunnel of the same wireguard-go between them over the underlay (port {BARE_PORT}), set up with wg alone"
        )
        print(
            f"requests: {args.requests} per path, a new TCP connection each; file {args.mib} MiB;"
            f" new pods: {args.new_pods}"
        )
        results: dict[str, dict] = {}
        for path in PATHS:
            direct_path(lab, wanted, up=path == "direct")
            with bare_wireguard(lab, wanted, wireguard_go) if path == "wireguard" else contextlib.nullcontext():
                results[path] = measure(client_pid, target_ip, args.requests)
        direct_path(lab, wanted, up=False)

        reach = []
        for index in range(args.new_pods):
            name = f"new-{index}"
            serve_page = "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"
            pod = real_pod(name, ["sh", "-c", serve_page])
            pod["spec"].update(TO_VIRTUAL_NODE)
            lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(pod))
            ip = wait_ready(lab, CONSUMER, NAMESPACE, name)["status"]["podIP"]
            reach.append(probe(client_pid, "reach", ip))

        memory = {process.name: memory_mib(process.process.pid)[0] for process in gateways}
        memory.update({f"wireguard-go {name}": memory_mib(pid)[0] for name, pid in wireguard_pids().items()})

        d, w, f = (results[path] for path in PATHS)
        print()
        print(f"{'measure':<30}{'direct':>10}{'wireguard':>11}{'fabric':>10}{'fabric/direct':>15}{'fabric/wg':>11}")
        for label, key, digits in (
            ("latency p50 (ms)", "p50", 2),
            ("latency p99 (ms)", "p99", 2),
            ("one TCP stream (MiB/s)", "mibs", 1),
        ):
            figures = "".join(f"{r[key]:>{width}.{digits}f}" for r, width in ((d, 10), (w, 11), (f, 10)))
            print(f"{label:<30}{figures}{f[key] / d[key]:>14.2f}x{f[key] / w[key]:>10.2f}x")
        print(f"{'wireguard-go CPU per GiB (s)':<30}{'-':>10}{w['cpu_per_gib']:>11.2f}{f['cpu_per_gib']:>10.2f}")
        valid = [r for r in reach if r is not None]
        if valid:
            print(
                f"new endpoint reachable after Ready: p50 {percentile(valid, 0.5) * 1000:.0f} ms, "
                f"p99 {percentile(valid, 0.99) * 1000:.0f} ms ({len(valid)}/{len(reach)} reached within 60 s)"
            )
        print("memory (MiB RSS): " + ", ".join(f"{name} {mib:.1f}" for name, mib in sorted(memory.items())))
        print("ratios: fabric / direct and fabric / wireguard (latency: higher is slower; throughput: lower is slower)")
    finally:
        with contextlib.suppress(Exception):
            direct_path(lab, wanted, up=False)
        finish(lab, processes, args.keep_lab)


if __name__ == "__main__":
    main()
