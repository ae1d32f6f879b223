"""One real worker node per lab cluster: containerd, kubelet, kube-proxy and kube-router in a network namespace of
their own.

Start order: network namespace and link, certificates and configuration, the Node object (pod range,
labels, taint), containerd, image import, kubelet, kube-proxy, wait for the node to be Ready, then kube-router
(its network policy controller only: it enforces NetworkPolicies on the node's pods; it needs the Node's
InternalIP, which the kubelet has posted once Ready) and wait for its first sync; on the cluster's first real node,
then its default storage class and local-path-provisioner (localpath.py).
Each process runs through `nsenter --net` only, so it shares the host's mounts with the others (the
kubelet's volume mounts must be visible to containerd) but has the node's own network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import host, localpath, nodeconfig, pki
from .config import SERVICE_CLUSTER_IP_RANGE, UNDERLAY_PREFIX, ClusterSpec, RealNodeSpec
from .errors import LabError
from .images import IMAGE_PREFIX, Image, busybox_image_name
from .nodeconfig import NodeLayout, underlay_bridge

NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy", "kube-router")
# The cluster's dynamic storage (localpath.py), run beside its first real node only.
PROVISIONER = "local-path-provisioner"
ERROR_LINE = re.compile(r"^[EF]\d{4} ")  # klog's error and fatal lines
SOCKET_TIMEOUT_S = 30
READY_TIMEOUT_S = 120
POLICY_ENGINE_TIMEOUT_S = 60


@dataclass
class RealNodeStatus:
    name: str
    ready: bool
    detail: str
    components: dict[str, bool]  # component -> process alive
    rss_mib: float  # containerd, shims, kubelet, kube-proxy, kube-router and the node's containers


def kubectl_wait(kubectl, cluster: str, condition: str, *objects: str, seconds: int, check: bool = False):
    """`kubectl wait --for=condition=<condition>` for `seconds`, the process allowed 30 s more; `kubectl` is the
    lab's (cluster, *args, **kwargs) -> CompletedProcess."""
    return kubectl(
        cluster,
        "wait",
        f"--for=condition={condition}",
        *objects,
        f"--timeout={seconds}s",
        timeout=seconds + 30,
        check=check,
    )


class RealNode:
    def __init__(
        self,
        cluster: ClusterSpec,
        layout: NodeLayout,
        binaries: dict[str, Path],
        pki_dir: Path,
        kubectl,
        spec: RealNodeSpec | None = None,
        link_number: int | None = None,
        registry: nodeconfig.RegistryTrust | None = None,
    ):
        """The cluster's real node, or `spec` (a second one) with its links numbered `link_number`; its containerd
        trusts `registry` (the lab's, registry.py) when given."""
        if (spec or cluster.real_node) is None:
            raise LabError(f"{cluster.name} has no real node in its configuration")
        self.cluster = cluster
        self.spec: RealNodeSpec = spec or cluster.real_node
        self.link_number = cluster.number if link_number is None else link_number
        self.layout = layout
        self.binaries = binaries
        self.pki_dir = pki_dir
        self.kubectl = kubectl  # (cluster, *args, **kwargs) -> CompletedProcess
        self.registry = registry

    # -- start --------------------------------------------------------------------------

    def create_network(self, overlapping_pod_cidrs: bool, log) -> None:
        """Before the cluster starts: its kube-apiserver advertises the host end of this link."""
        layout, spec = self.layout, self.spec
        unrouted = host.create_node_network(
            layout.netns,
            layout.host_link(self.link_number),
            layout.node_link(self.link_number),
            spec.host_ip,
            spec.node_ip,
            spec.link_prefix,
            # Overlapping pod ranges cannot all be routed from one host; pods still reach the host.
            pod_route=None if overlapping_pod_cidrs else spec.pod_cidr,
        )
        if unrouted:
            log(f"lab: {self.cluster.name}: pods of {spec.name} are not reachable from this host: {unrouted}")
        if spec.underlay_ip:
            host.join_underlay(
                layout.netns,
                underlay_bridge(layout.lab_id),
                layout.underlay_host_link(self.link_number),
                layout.underlay_node_link(self.link_number),
                spec.underlay_ip,
                UNDERLAY_PREFIX,
            )

    def start(self, images: list[Image], log) -> None:
        for directory in ("pki", "logs", "pids", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "runc", "local-path"):
            self.layout.path(directory).mkdir(parents=True, exist_ok=True)
        self._write_files(images)
        self.kubectl(self.cluster.name, "apply", "-f", "-", input=json.dumps(self.spec.manifest()))
        host.create_cgroup_root(self.layout.cgroup_root)
        self.start_component("containerd")
        self._wait_for_socket()
        self.import_images(images)
        self.start_component("kubelet")
        self.start_component("kube-proxy")
        result = kubectl_wait(
            self.kubectl, self.cluster.name, "Ready", f"node/{self.spec.name}", seconds=READY_TIMEOUT_S
        )
        if result.returncode != 0:
            raise LabError(
                f"{self.cluster.name}: real node {self.spec.name} did not become Ready: {result.stderr.strip()}\n"
                f"{self.diagnosis()}\nsee {self.layout.path('logs')}"
            )
        self.start_component("kube-router")
        self._wait_for_policy_engine()
        if PROVISIONER in self.components:
            self.kubectl(
                self.cluster.name, "apply", "-f", "-", input=json.dumps(_as_list(localpath.manifests(self.spec.name)))
            )
            self.start_component(PROVISIONER)
        log(f"lab: {self.cluster.name}: real node {self.spec.name} Ready (pods {self.spec.pod_cidr})")

    @property
    def components(self) -> tuple[str, ...]:
        """The processes of this node: the cluster's first real node also runs its storage provisioner."""
        return NODE_COMPONENTS if self.spec.second else (*NODE_COMPONENTS, PROVISIONER)

    def import_images(self, images: list[Image]) -> None:
        """Into the node's containerd, unpacked for its snapshotter; the kubelet never collects them (nodeconfig)."""
        if self.pid("containerd") is None:
            raise LabError(f"{self.cluster.name}: containerd of the real node is not running; cannot import images")
        for image in images:
            self._ctr("images", "import", "--snapshotter", "overlayfs", str(image.archive))

    def _write_files(self, images: list[Image]) -> None:
        layout, spec = self.layout, self.spec
        ca_cert, ca_key = self.pki_dir / "ca.crt", self.pki_dir / "ca.key"
        node_cert, node_key = pki.issue(
            ca_cert,
            ca_key,
            layout.path("pki", "kubelet-client"),
            common_name=f"system:node:{spec.name}",
            organizations=("system:nodes",),
        )
        pki.issue(
            ca_cert,
            ca_key,
            layout.path("pki", "kubelet-serving"),
            common_name=f"system:node:{spec.name}",
            organizations=("system:nodes",),
            server_names=(spec.name,),
            server_ips=(spec.node_ip,),
        )
        proxy_cert, proxy_key = pki.issue(
            ca_cert, ca_key, layout.path("pki", "kube-proxy"), common_name="system:kube-proxy"
        )
        router_cert, router_key = pki.issue(
            ca_cert, ca_key, layout.path("pki", "kube-router"), common_name=pki.KUBE_ROUTER_USER
        )
        storage_cert, storage_key = pki.issue(
            ca_cert, ca_key, layout.path("pki", PROVISIONER), common_name=localpath.USER
        )
        server = self.cluster.node_facing_server
        files = {
            "containerd.toml": nodeconfig.containerd_config(layout, _pause(images), self.registry),
            "cni/net.d/10-lab.conflist": nodeconfig.cni_config(layout, spec),
            "kubelet.yaml": nodeconfig.kubelet_config(layout, spec, ca_cert),
            "kube-proxy.yaml": nodeconfig.kube_proxy_config(layout, spec, self.cluster),
            "kubelet.kubeconfig": nodeconfig.kubeconfig(server, ca_cert, node_cert, node_key, spec.name),
            "kube-proxy.kubeconfig": nodeconfig.kubeconfig(server, ca_cert, proxy_cert, proxy_key, "kube-proxy"),
            "kube-router.kubeconfig": nodeconfig.kubeconfig(server, ca_cert, router_cert, router_key, "kube-router"),
            f"{PROVISIONER}.kubeconfig": nodeconfig.kubeconfig(server, ca_cert, storage_cert, storage_key, PROVISIONER),
            f"{PROVISIONER}/config.json": localpath.config_json(spec.name, str(layout.path("local-path"))),
            f"{PROVISIONER}/helper-pod.json": localpath.helper_pod(busybox_image_name()),
        }
        if self.registry is not None:  # containerd's hosts.toml per address of the lab's registry
            for path, text in nodeconfig.registry_hosts(layout, self.registry).items():
                files[str(path.relative_to(layout.root))] = text
        for name, text in files.items():
            path = layout.path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o600)

    def command(self, component: str) -> list[str]:
        layout, spec = self.layout, self.spec
        if component == "containerd":
            return ["/usr/bin/containerd", "--config", str(layout.path("containerd.toml"))]
        if component == "kubelet":
            return [
                str(self.binaries["kubelet"]),
                f"--config={layout.path('kubelet.yaml')}",
                f"--kubeconfig={layout.path('kubelet.kubeconfig')}",
                f"--hostname-override={spec.name}",
                f"--node-ip={spec.node_ip}",
                f"--root-dir={layout.path('kubelet')}",
                f"--cert-dir={layout.path('pki')}",
                "--v=1",
            ]
        if component == "kube-proxy":
            return [str(self.binaries["kube-proxy"]), f"--config={layout.path('kube-proxy.yaml')}", "--v=1"]
        if component == "kube-router":
            # Its network policy controller alone: the CNI bridge routes and kube-proxy serves Services. It finds
            # its Node by NODE_NAME (environment), keeps its rules and ip sets in the node's network namespace
            # (deleting it removes them) and serves nothing: no health or metrics port.
            return [
                str(self.binaries["kube-router"]),
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                f"--kubeconfig={layout.path('kube-router.kubeconfig')}",
                f"--hostname-override={spec.name}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--health-port=0",
                "--metrics-port=0",
            ]
        if component == PROVISIONER:
            return localpath.command(
                str(self.binaries[PROVISIONER]),
                str(layout.path(PROVISIONER, "config.json")),
                str(layout.path(PROVISIONER, "helper-pod.json")),
                str(layout.path(f"{PROVISIONER}.kubeconfig")),
                busybox_image_name(),
            )
        raise LabError(f"a real node has no component {component!r}; it has {', '.join(self.components)}")

    def environment(self, component: str) -> dict[str, str]:
        """The component's environment: the lab's own, and kube-router's node name (it asks NODE_NAME first)."""
        extra = {"NODE_NAME": self.spec.name} if component == "kube-router" else {}
        return {**os.environ, **extra}

    def start_component(self, component: str) -> None:
        argv = ["nsenter", f"--net={self.layout.netns_path}", "--", *self.command(component)]
        with self.layout.path("logs", f"{component}.log").open("ab") as log_file:
            process = subprocess.Popen(
                argv,
                cwd=self.layout.root,
                env=self.environment(component),
                stdout=log_file,
                stderr=log_file,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._pid_file(component).write_text(str(process.pid))

    def stop_component(self, component: str, sig: int = signal.SIGTERM) -> None:
        pid = self.pid(component)
        if pid is None:
            raise LabError(f"{self.cluster.name}: {component} of the real node is not running")
        os.kill(pid, sig)
        deadline = time.monotonic() + 20
        while host.process_alive(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def pid(self, component: str) -> int | None:
        try:
            pid = int(self._pid_file(component).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if host.process_alive(pid) else None

    def _pid_file(self, component: str) -> Path:
        return self.layout.path("pids", f"{component}.pid")

    def _wait_for_socket(self) -> None:
        deadline = time.monotonic() + SOCKET_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.layout.containerd_socket.exists() and self._ctr("version", check=False).returncode == 0:
                return
            if self.pid("containerd") is None:
                break
            time.sleep(0.2)
        raise LabError(
            f"{self.cluster.name}: containerd did not serve {self.layout.containerd_socket}; "
            f"see {self.layout.path('logs', 'containerd.log')}"
        )

    def stop_policy_engine(self) -> None:
        """As on a cluster whose network plugin enforces no NetworkPolicies: kube-router stopped and its chains
        unhooked (it leaves them on exit); `start_policy_engine` brings it back."""
        self.stop_component("kube-router")
        for chain in ("INPUT", "FORWARD", "OUTPUT"):
            rules = self._iptables("-S", chain).stdout.splitlines()
            for rule in (r for r in rules if "-j KUBE-ROUTER-" in r):
                self._iptables("-D", *shlex.split(rule)[1:])

    def start_policy_engine(self) -> None:
        """kube-router again (if it is not running), once its first sync has hooked its chains in."""
        if self.pid("kube-router") is None:
            self.start_component("kube-router")
        self._wait_for_policy_engine()

    def _iptables(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return host.run("nsenter", f"--net={self.layout.netns_path}", "--", "iptables", "-w", *args, check=check)

    def _wait_for_policy_engine(self) -> None:
        """Until kube-router's first sync has hooked its chains in: NetworkPolicies applied after `start` are
        enforced."""
        deadline = time.monotonic() + POLICY_ENGINE_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.pid("kube-router") is None:
                break
            chain = self._iptables("-S", "FORWARD", check=False)
            if "-j KUBE-ROUTER-FORWARD" in chain.stdout:
                return
            time.sleep(0.2)
        lines = last_error_lines(self.layout.path("logs", "kube-router.log"))
        raise LabError(
            f"{self.cluster.name}: kube-router of real node {self.spec.name} did not hook its chains in: "
            + ("\n  ".join(["", *lines]) if lines else "no error logged")
            + f"\nsee {self.layout.path('logs', 'kube-router.log')}"
        )

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = ["ctr", "--address", str(self.layout.containerd_socket), "--namespace", host.CRI_NAMESPACE, *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if check and result.returncode != 0:
            raise LabError(f"{self.cluster.name}: {' '.join(command)} failed: {result.stderr.strip()}")
        return result

    def route_to(self, other: RealNode) -> None:
        """Route `other`'s pods and node address through its underlay address, as a cluster's network joins its nodes
        (the underlay is a link they share)."""
        for destination, via in _routes_to(other.spec):
            host.run("ip", "-n", self.layout.netns, "route", "replace", destination, "via", via)

    def route_node_address_to(self, other: RealNode) -> None:
        """Reach `other`'s InternalIP (a node of another cluster) through the underlay, from this node's InternalIP, as
        nodes of clusters in one network reach each other at their InternalIPs: a node port of `other` answers there,
        and the answer leaves `other` from the address kube-proxy translated (its InternalIP), so it is un-translated
        on the way back. Pod ranges stay unrouted between clusters: the fabric carries them."""
        host.run(
            "ip", "-n", self.layout.netns, "route", "replace", f"{other.spec.node_ip}/32",
            "via", other.spec.underlay_ip, "src", self.spec.node_ip,
        )  # fmt: skip

    def unroute(self, other: RealNode) -> None:
        for destination, via in _routes_to(other.spec):
            host.run("ip", "-n", self.layout.netns, "route", "delete", destination, "via", via, check=False)

    def remove(self) -> None:
        """Everything of this node off the host once its processes are stopped: its containers, mounts, network and
        host files (the rest of the lab stays)."""
        host.remove_cgroups(self.layout.host_tag)
        ids = host.task_ids(self.layout.path("containerd", "state"))
        for path in host.task_host_files(self.layout.containerd_socket, ids):
            path.unlink(missing_ok=True)
        host.unmount_under(self.layout.root)
        host.run("ip", "netns", "delete", self.layout.netns, check=False)
        # The kernel tears a network namespace down later, and the host's ends of its links with it.
        links = {self.layout.host_link(self.link_number), self.layout.underlay_host_link(self.link_number)}
        deadline = time.monotonic() + 20
        while links & set(host.link_names(f"cm{self.layout.lab_id}")) and time.monotonic() < deadline:
            time.sleep(0.2)
        for path in host.cni_cache_entries(self.layout.host_tag) + host.container_log_links(self.layout.root):
            path.unlink(missing_ok=True)

    # -- inspect ------------------------------------------------------------------------

    def status(self) -> RealNodeStatus:
        components = {component: self.pid(component) is not None for component in self.components}
        ready, detail = False, "not registered"
        result = self.kubectl(self.cluster.name, "get", "node", self.spec.name, "-o", "json", check=False, timeout=10)
        if result.returncode == 0:
            conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
            ready_condition = next((c for c in conditions if c["type"] == "Ready"), None)
            ready = bool(ready_condition) and ready_condition["status"] == "True"
            detail = (ready_condition or {}).get("message") or "no Ready condition yet"
        dead = [name for name, alive in components.items() if not alive]
        if dead:
            detail = f"{', '.join(dead)} not running; " + detail
            ready = False
        return RealNodeStatus(self.spec.name, ready, detail, components, self.memory_mib())

    def diagnosis(self) -> str:
        """Why the node is not Ready, as far as its condition and its components' last errors tell."""
        status = self.status()
        parts = [f"node: {status.detail}"]
        for component in self.components:
            lines = last_error_lines(self.layout.path("logs", f"{component}.log"))
            if lines:
                parts.append(f"last errors of {component}:\n  " + "\n  ".join(lines))
        return "\n".join(parts)

    def memory_mib(self) -> float:
        """Resident memory of the node's daemons and shims, plus its containers' cgroup usage."""
        total = 0
        marker = str(self.layout.root)
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                if marker not in cmdline:
                    continue
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        pods = Path("/sys/fs/cgroup/memory") / self.layout.cgroup_root.lstrip("/") / "kubepods"
        with contextlib.suppress(OSError, ValueError):
            total += int((pods / "memory.usage_in_bytes").read_text())
        return total / 1024**2


def _as_list(items: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _routes_to(node: RealNodeSpec) -> list[tuple[str, str]]:
    return [(node.pod_cidr, node.underlay_ip), (f"{node.node_ip}/32", node.underlay_ip)]


def last_error_lines(log_path: Path, count: int = 6, width: int = 400) -> list[str]:
    """The last error lines of a klog (`E1123 ...`) or logrus (`level=error`) log, shortened."""
    try:
        with log_path.open("rb") as log_file:
            log_file.seek(max(0, log_path.stat().st_size - 256 * 1024))
            text = log_file.read().decode(errors="replace")
    except OSError:
        return []
    errors = [
        line for line in text.splitlines() if ERROR_LINE.match(line) or "level=error" in line or "level=fatal" in line
    ]
    return [line[:width] for line in errors[-count:]]


def _pause(images: list[Image]) -> str:
    """The lab's own pause: the e2e images may hold upstream's name for another build of it."""
    return next(image.name for image in images if image.name.startswith(f"{IMAGE_PREFIX}/pause:"))


def remove_leftovers(root: Path, lab_id: str) -> list[str]:
    """Everything a real node leaves on the host, found by name and path; call after its processes are gone."""
    done = []
    prefix = f"catamaran-{lab_id}-"
    killed = host.remove_cgroups(prefix)
    if killed:
        done.append(f"{killed} container processes killed")
    for node_dir in root.glob("*/node*"):
        ids = host.task_ids(node_dir / "containerd" / "state")
        for path in host.task_host_files(node_dir / "containerd.sock", ids):
            path.unlink(missing_ok=True)
    host.unmount_under(root)
    host.remove_wireguard(f"cm{lab_id}")
    host.delete_network(prefix, f"cm{lab_id}")
    for path in host.cni_cache_entries(prefix) + host.container_log_links(root):
        path.unlink(missing_ok=True)
    host.remove_device_plugin_files()
    return done


def leftovers(root: Path, lab_id: str) -> list[str]:
    """What of the lab is still on the host: empty after a clean `lab-down`."""
    prefix = f"catamaran-{lab_id}-"
    cgroups = host.cgroups_named(prefix)
    found = [f"container process {pid}" for pid in sorted(set().union(*map(host.cgroup_pids, cgroups)))]
    found += [f"mount {path}" for path in host.mounts_under(root)]
    found += [f"network namespace {name}" for name in host.netns_names(prefix)]
    found += [f"network interface {name}" for name in host.link_names(f"cm{lab_id}")]
    wireguard_pids, wireguard_sockets = host.wireguard_leftovers(f"cm{lab_id}")
    found += [f"wireguard-go process {pid}" for pid in wireguard_pids]
    found += [f"WireGuard socket {path}" for path in wireguard_sockets]
    found += [f"cgroup {path}" for path in cgroups]
    found += [f"CNI cache {path}" for path in host.cni_cache_entries(prefix)]
    found += [f"log link {path}" for path in host.container_log_links(root)]
    found += [f"host iptables rule: {line}" for line in host.host_iptables_mentions((prefix, f"cm{lab_id}"))]
    return found
