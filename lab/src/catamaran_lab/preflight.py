"""Checks that turn a missing prerequisite into one clear message before anything starts."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

from .errors import LabError


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def check_go(minimum: str) -> str:
    """Return the Go version on PATH, or explain what is missing."""
    go = shutil.which("go")
    if go is None:
        raise LabError(
            f"Go is not on PATH; the lab builds Kubernetes from Go modules and needs Go >= {minimum}. "
            "Install Go and make sure 'go version' works."
        )
    result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    found = result.stdout.strip().removeprefix("go")
    if result.returncode != 0 or not found:
        raise LabError(f"'{go} env GOVERSION' failed: {result.stderr.strip()}")
    if _version_tuple(found) < _version_tuple(minimum):
        raise LabError(
            f"Go {found} found at {go}, but the lab's pinned Kubernetes needs Go >= {minimum} "
            "(the 'go' line of lab/gomod/go.mod). Install a newer Go; GOTOOLCHAIN=local is used, "
            "so no toolchain is downloaded for you."
        )
    return found


def check_disk(path: Path, needed: int, purpose: str) -> None:
    free = shutil.disk_usage(path).free
    if free < needed:
        raise LabError(
            f"not enough disk for {purpose}: {free / 1024**3:.1f} GiB free on {path}, "
            f"{needed / 1024**3:.0f} GiB needed. Free some space, or point CATAMARAN_LAB_CACHE, "
            "GOCACHE and GOMODCACHE at a larger disk."
        )


def port_holder(port: int) -> str:
    """Best effort: which process listens on a TCP port, read from /proc without extra tools."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    return f"pid {pid} ({command[:120]})"
        except OSError:
            continue
    return "an unknown process"


def check_ports_free(ports: dict[int, str], host: str = "127.0.0.1") -> None:
    """Fail with every busy port named, its intended use and its current holder."""
    busy = []
    for port, purpose in sorted(ports.items()):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError:
                busy.append(f"  {host}:{port} ({purpose}) is held by {port_holder(port)}")
    if busy:
        raise LabError(
            "ports the lab needs are in use:\n"
            + "\n".join(busy)
            + "\nStop that process (a leftover lab is removed by 'make lab-down'), "
            "or move the lab with CATAMARAN_LAB_BASE_PORT=<port>."
        )


def held_addresses(ip_output: str) -> dict[str, str]:
    """IPv4 address -> the interface holding it, from `ip -o -4 addr show`."""
    held = {}
    for line in ip_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            held[fields[3].split("/")[0]] = fields[1].split("@")[0]
    return held


def check_addresses_free(addresses: dict[str, str]) -> None:
    """Fail when the host already holds an address the lab is about to give a real node's link. A lab stopped
    without `down` (its state directory gone, its run killed) leaves its links behind, and one of another lab
    directory in the same port block holds the same /30: the new node's replies would leave by the dead link and its
    kubelet would never register."""
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False)
    held = held_addresses(listed.stdout)
    taken = [
        f"  {address} ({purpose}) is already on {held[address]}"
        for address, purpose in sorted(addresses.items())
        if address in held
    ]
    if taken:
        raise LabError(
            "addresses the lab needs are held by another lab's leftovers:\n"
            + "\n".join(taken)
            + "\nRemove them with 'catamaran-lab down' and CATAMARAN_LAB_DIR set to that lab's directory (even one that"
            " is gone), or 'ip link delete <interface>'; or move this lab with CATAMARAN_LAB_BASE_PORT=<port>."
        )


# CAP_NET_ADMIN (12) for namespaces, links and iptables; CAP_SYS_ADMIN (21) for mounts and nsenter.
REQUIRED_CAPABILITIES = {12: "CAP_NET_ADMIN", 21: "CAP_SYS_ADMIN"}
REQUIRED_CGROUP_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
REAL_NODES_OFF = (
    "or turn the real nodes off with CATAMARAN_LAB_REAL_NODES=0 (the tests that need them then fail, naming why)"
)


def check_real_node_host() -> None:
    """Everything a real node needs from this machine, each missing piece named with its fix."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the real nodes run containerd, runc and the kubelet as root: run the lab as root")
    effective = _effective_capabilities()
    for bit, name in REQUIRED_CAPABILITIES.items():
        if effective is not None and not effective >> bit & 1:
            problems.append(f"{name} is missing from this process's capabilities (a more privileged shell is needed)")
    filesystems = Path("/proc/filesystems").read_text()
    if "\toverlay\n" not in filesystems + "\n" and not _load_module("overlay"):
        problems.append("the kernel has no overlay filesystem (containerd's snapshotter): modprobe overlay")
    if not Path("/proc/sys/net/bridge").exists() and not _load_module("br_netfilter"):
        problems.append("the kernel has no bridge netfilter (CNI bridge, kube-proxy): modprobe bridge br_netfilter")
    from .host import cgroup_hierarchies, cgroup_v1_controllers

    if not cgroup_hierarchies():
        problems.append("no cgroup filesystem is mounted: mount cgroup2 on /sys/fs/cgroup")
    else:
        v1 = cgroup_v1_controllers()
        unified = Path("/sys/fs/cgroup/cgroup.controllers")
        available = v1 | (set(unified.read_text().split()) if unified.exists() else set())
        missing = [c for c in REQUIRED_CGROUP_CONTROLLERS if c not in available and not (c == "cpuacct" and not v1)]
        if missing:
            problems.append(f"cgroup controllers {', '.join(missing)} are not mounted")
    for tool in ("ip", "nsenter", "iptables", "umount"):
        if shutil.which(tool) is None:
            problems.append(f"'{tool}' is not on PATH (make lab-build installs the packages that provide it)")
    if problems:
        raise LabError(
            "this machine cannot run the lab's real nodes:\n  - "
            + "\n  - ".join(problems)
            + f"\nFix these, {REAL_NODES_OFF}."
        )


# Each lab holds about 70 inotify instances (6 per kubelet, API server and controller manager, more per real node's
# containerd); the kernel's default of 128 per user is spent by the second lab side by side (make test runs several),
# whose kubelets then die with "inotify_init: too many open files". kind asks for 512 and 524288 likewise.
INOTIFY_LIMITS = {"max_user_instances": 1024, "max_user_watches": 524288}


def raise_inotify_limits(log, settings: Path = Path("/proc/sys/fs/inotify")) -> None:
    """Raise the kernel's inotify limits to INOTIFY_LIMITS where they are lower (as root; never lowered)."""
    for name, wanted in INOTIFY_LIMITS.items():
        path = settings / name
        try:
            current = int(path.read_text())
            if current < wanted:
                path.write_text(str(wanted))
                log(f"lab: fs.inotify.{name} raised from {current} to {wanted} (several labs' kubelets need it)")
        except (OSError, ValueError) as error:
            raise LabError(
                f"fs.inotify.{name} is below {wanted} and could not be raised ({error}): the lab's kubelets and API "
                f"servers would run out of inotify instances; run `sysctl -w fs.inotify.{name}={wanted}` as root"
            ) from None


def _effective_capabilities() -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return None


def _load_module(name: str) -> bool:
    if shutil.which("modprobe") is None:
        return False
    return subprocess.run(["modprobe", name], capture_output=True, check=False).returncode == 0
