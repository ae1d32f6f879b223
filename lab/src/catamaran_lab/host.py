"""Host objects a real node owns: its network namespace and link, cgroups, mounts, sockets and caches.

Everything is found again by name (the lab id and cluster in `catamaran-<lab id>-<cluster>`) or by
path (under the lab's state directory), so `remove_leftovers` cleans up after a crash as well as after
a clean run, and `leftovers` can prove that nothing is left.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .errors import LabError

NETNS_DIR = Path("/run/netns")
CNI_RESULTS = Path("/var/lib/cni/results")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
# containerd 1.6 puts shim sockets here whatever its state directory: sha256(address/namespace/id).
SHIM_SOCKET_DIR = Path("/run/containerd/s")
CRI_NAMESPACE = "k8s.io"
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs: a zombie has ended and waits only for its parent to read its exit status."""
    try:
        # The state follows the command name, which is in parentheses and may hold spaces.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise LabError(f"'{' '.join(command)}' failed: {(result.stderr or result.stdout).strip()}")
    return result


# -- network ------------------------------------------------------------------------------


def create_node_network(
    netns: str, host_link: str, node_link: str, host_ip: str, node_ip: str, prefix: int, pod_route: str | None
) -> str | None:
    """A namespace joined to the host by a veth pair; the node routes everything else through the host.

    Returns why the host cannot reach the node's pods directly, or None when it can.
    """
    run("ip", "netns", "add", netns)
    run("ip", "link", "add", host_link, "type", "veth", "peer", "name", node_link)
    run("ip", "link", "set", node_link, "netns", netns)
    run("ip", "addr", "add", f"{host_ip}/{prefix}", "dev", host_link)
    run("ip", "link", "set", host_link, "up")
    inside = ("ip", "netns", "exec", netns)
    run(*inside, "ip", "link", "set", node_link, "name", "eth0")
    run(*inside, "ip", "addr", "add", f"{node_ip}/{prefix}", "dev", "eth0")
    run(*inside, "ip", "link", "set", "eth0", "up")
    run(*inside, "ip", "link", "set", "lo", "up")
    run(*inside, "ip", "route", "add", "default", "via", host_ip)
    # Per-namespace sysctls: the host's own settings stay untouched.
    run(*inside, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
    run(*inside, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1")
    if not pod_route:
        return "the lab's pod ranges overlap"
    routed = run("ip", "route", "add", pod_route, "via", node_ip, "dev", host_link, check=False)
    if routed.returncode != 0:  # another lab on this machine uses the same range
        return f"the host already routes {pod_route} elsewhere ({routed.stderr.strip()})"
    return None


UNDERLAY_INTERFACE = "underlay0"


def create_bridge(name: str) -> None:
    """A host bridge with no address of its own: it switches frames between namespaces, it routes nothing."""
    if not Path(f"/sys/class/net/{name}").exists():
        run("ip", "link", "add", name, "type", "bridge")
    run("ip", "link", "set", name, "up")


def join_underlay(netns: str, bridge: str, host_link: str, node_link: str, address: str, prefix: int) -> None:
    """A second link of the node's namespace, on the shared bridge, as `underlay0`."""
    run("ip", "link", "add", host_link, "type", "veth", "peer", "name", node_link)
    run("ip", "link", "set", node_link, "netns", netns)
    run("ip", "link", "set", host_link, "master", bridge)
    run("ip", "link", "set", host_link, "up")
    inside = ("ip", "netns", "exec", netns)
    run(*inside, "ip", "link", "set", node_link, "name", UNDERLAY_INTERFACE)
    run(*inside, "ip", "addr", "add", f"{address}/{prefix}", "dev", UNDERLAY_INTERFACE)
    run(*inside, "ip", "link", "set", UNDERLAY_INTERFACE, "up")


# Userspace WireGuard (wireguard-go) keeps a control socket per interface here, whatever the network namespace,
# and outlives the namespace its interface lived in.
WIREGUARD_SOCKET_DIR = Path("/var/run/wireguard")


def wireguard_leftovers(interface_prefix: str) -> tuple[list[int], list[Path]]:
    """wireguard-go processes serving interfaces of this prefix, and their control sockets."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and Path(argv[0].decode(errors="replace")).name == "wireguard-go"
            and any(arg.decode(errors="replace").startswith(interface_prefix) for arg in argv[1:])
        ):
            pids.append(int(entry))
    sockets = sorted(WIREGUARD_SOCKET_DIR.glob(f"{interface_prefix}*.sock")) if WIREGUARD_SOCKET_DIR.exists() else []
    return pids, sockets


def remove_wireguard(interface_prefix: str) -> None:
    pids, sockets = wireguard_leftovers(interface_prefix)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for path in sockets:
        path.unlink(missing_ok=True)


def interface_addresses() -> list[str]:
    """The host's own addresses (kwokctl put them all in the API server's certificate; so does the lab)."""
    result = run("ip", "-j", "address", "show", check=False)
    try:
        interfaces = json.loads(result.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return [
        info["local"]
        for interface in interfaces
        for info in interface.get("addr_info", [])
        if info.get("local") and info.get("scope") != "link"
    ]


def netns_names(prefix: str) -> list[str]:
    return sorted(p.name for p in NETNS_DIR.glob(f"{prefix}*")) if NETNS_DIR.exists() else []


def link_names(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/sys/class/net").glob(f"{prefix}*"))


def delete_network(netns_prefix: str, link_prefix: str) -> None:
    """Deleting a namespace takes its bridge, veth ends and iptables rules with it."""
    for name in netns_names(netns_prefix):
        run("ip", "netns", "delete", name, check=False)
    for name in link_names(link_prefix):
        run("ip", "link", "delete", name, check=False)


# -- cgroups ------------------------------------------------------------------------------


def cgroup_hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers and the unified one)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(left.split()[4]))
    return found


def cgroup_v1_controllers() -> set[str]:
    controllers = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        parts = line.partition(" - ")[2].split()
        if parts and parts[0] == "cgroup":
            controllers |= {opt for opt in parts[2].split(",") if opt not in ("rw", "ro") and "=" not in opt}
    return controllers


def create_cgroup_root(name: str) -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy before it starts."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / name.lstrip("/")
        path.mkdir(exist_ok=True)
        # A new cpuset cgroup has no CPUs or memory nodes until given its parent's.
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())


def cgroups_named(prefix: str) -> list[Path]:
    return sorted(path for hierarchy in cgroup_hierarchies() for path in hierarchy.glob(f"{prefix}*") if path.is_dir())


def cgroup_pids(root: Path) -> set[int]:
    pids = set()
    for procs in root.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids |= {int(line) for line in procs.read_text().split()}
    return pids


def remove_cgroups(prefix: str, timeout: float = 20) -> int:
    """Kill every process left in the lab's cgroups (containers outlive their shims), then remove them."""
    roots = cgroups_named(prefix)
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = set().union(*(cgroup_pids(root) for root in roots)) if roots else set()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.2)
    for root in roots:
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()
    return len(killed)


# -- mounts, sockets, caches ----------------------------------------------------------------


def mounts_under(root: Path) -> list[Path]:
    """Mount points below `root` (kubelet volumes, overlay rootfs, pod network namespaces), deepest first."""
    marker = f"{root}/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(marker):
            points.append(Path(point))
    return sorted(set(points), key=lambda p: -len(p.parts))


def unmount_under(root: Path) -> None:
    for _ in range(3):  # a bind mount may hide another one below it
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            run("umount", "--lazy", str(point), check=False)


def task_ids(state_dir: Path) -> list[str]:
    """Ids of the sandboxes and containers a containerd ran, read from its state directory."""
    tasks = state_dir / "io.containerd.runtime.v2.task" / CRI_NAMESPACE
    return sorted(p.name for p in tasks.iterdir()) if tasks.is_dir() else []


def task_host_files(containerd_address: Path, ids: list[str]) -> list[Path]:
    """Files outside the state directory that a killed containerd leaves per task: shim sockets, loopback CNI cache."""
    found = []
    for task_id in ids:
        digest = hashlib.sha256(f"{containerd_address}/{CRI_NAMESPACE}/{task_id}".encode()).hexdigest()
        found += [SHIM_SOCKET_DIR / digest, CNI_RESULTS / f"cni-loopback-{task_id}-lo"]
    return [path for path in found if path.exists()]


def cni_cache_entries(prefix: str) -> list[Path]:
    return sorted(CNI_RESULTS.glob(f"{prefix}*")) if CNI_RESULTS.exists() else []


def remove_device_plugin_files() -> None:
    """Every kubelet registers at this fixed path (it ignores --root-dir); remove it once no kubelet is left."""
    if any(_comm(pid) == "kubelet" for pid in filter(str.isdigit, os.listdir("/proc"))):
        return
    for name in ("kubelet.sock", "kubelet_internal_checkpoint"):
        (DEVICE_PLUGIN_DIR / name).unlink(missing_ok=True)
    for directory in (DEVICE_PLUGIN_DIR, DEVICE_PLUGIN_DIR.parent):
        with contextlib.suppress(OSError):
            directory.rmdir()


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def container_log_links(root: Path) -> list[Path]:
    """The kubelet's /var/log/containers links that point into this lab."""
    found = []
    for link in CONTAINER_LOG_LINKS.glob("*.log") if CONTAINER_LOG_LINKS.exists() else []:
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(f"{root}/"):
                found.append(link)
    return found


def host_iptables_mentions(words: tuple[str, ...]) -> list[str]:
    """Rules in the host's own tables that name the lab (there should be none: all rules live in node namespaces)."""
    lines = []
    for tool in ("iptables-save", "ip6tables-save"):
        result = run(tool, check=False)
        lines += [line for line in result.stdout.splitlines() if any(word in line for word in words)]
    return lines
