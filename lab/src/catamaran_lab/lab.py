"""Start, stop and inspect the lab's clusters (kwokctl binary runtime on loopback, one real node each)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import dns, e2e, host, nodeconfig, realnode
from .binaries import ALL_BINARIES, BinaryCache
from .config import MANAGED_NODE_LABEL, ClusterSpec, LabConfig, lab_id, second_real_node
from .errors import LabError
from .images import Image, ensure_images
from .kwok import (
    METRICS_APISERVICE,
    METRICS_SERVER_MANIFEST_DIR,
    container_log_file,
    kwokctl_documents,
    lab_rbac,
    metrics_server_endpoint,
    metrics_server_manifests,
)
from .nodeconfig import NodeLayout, RegistryTrust, underlay_bridge
from .packages import ensure_packages
from .paths import GO_MODULE_DIR, state_dir
from .pki import COREDNS_USER, ClusterPKI
from .preflight import check_addresses_free, check_disk, check_ports_free, check_real_node_host, raise_inotify_limits
from .realnode import NODE_COMPONENTS, PROVISIONER, RealNode, RealNodeStatus
from .registry import Registry, RegistryLayout, cluster_facts

STATE_FILE = "lab.json"
GATEWAY_FACTS = "gateway.json"
REGISTRY_FACTS = "registry.json"
KWOK_WORKDIR = "kwok"
START_TIMEOUT_S = 240
METRICS_API_TIMEOUT_S = 90
RUNTIME_DISK_BYTES = 1024**3
# kube-controller-manager and kube-scheduler exit when the API server is not healthy within about 10 s of their start.
# kwokctl starts them before the API server's post-start hooks are done, which labs starting side by side on 2 CPUs
# can delay past that: once the cluster is up, a component that exited is started again.
COMPONENT_GIVE_UP_S = 20
# A cluster's second real node numbers its links past any cluster's own (NodeLayout.host_link and the like).
SECOND_NODE_LINK_NUMBER = 100


@dataclass
class ClusterStatus:
    name: str
    server: str
    kubeconfig: Path
    ready: bool
    detail: str
    ready_nodes: int
    rss_mib: float
    peak_rss_mib: float
    real_node: RealNodeStatus | None = None
    processes: dict[str, bool] = field(default_factory=dict)  # kwokctl's components -> alive
    metrics_api: str = "unknown"  # the metrics.k8s.io APIService's Available condition


class Lab:
    """The lab rooted at one state directory (`.lab/` by default)."""

    def __init__(self, root: Path | None = None, cache: BinaryCache | None = None, log=print):
        self.root = root or state_dir()
        self.cache = cache or BinaryCache()
        self.log = log
        self.lab_id = lab_id(self.root)

    # -- layout -------------------------------------------------------------------------

    def cluster_dir(self, name: str) -> Path:
        return self.root / name

    def kubeconfig(self, name: str) -> Path:
        return self.cluster_dir(name) / "kubeconfig"

    @property
    def merged_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def kwok_workdir(self) -> Path:
        return self.root / KWOK_WORKDIR

    def pki_dir(self, name: str) -> Path:
        """The cluster's CA and certificates (`pki.ClusterPKI`), where kwokctl looks for its own."""
        return self.kwok_workdir / "clusters" / name / "pki"

    def ca_file(self, name: str) -> Path:
        """The cluster CA: clients, kubelets and kubelet-serving CSRs are all certified by it."""
        return ClusterPKI(self.pki_dir(name)).ca_cert

    def real_node(self, cluster: ClusterSpec, lab: LabConfig | None = None) -> RealNode:
        """The cluster's real node; to start it, pass the lab's configuration: its containerd then trusts the lab's
        registry."""
        layout = NodeLayout(root=self.cluster_dir(cluster.name) / "node", lab_id=self.lab_id, cluster=cluster.name)
        binaries = {name: self.cache.path(name) for name in ALL_BINARIES}
        trust = self._registry_trust(lab)
        return RealNode(cluster, layout, binaries, self.pki_dir(cluster.name), self.kubectl, registry=trust)

    def second_node_of(self, cluster: ClusterSpec, lab: LabConfig | None = None) -> RealNode:
        spec = second_real_node(cluster)
        layout = NodeLayout(root=self.cluster_dir(cluster.name) / "node-2", lab_id=self.lab_id, cluster=spec.name)
        binaries = {name: self.cache.path(name) for name in ALL_BINARIES}
        number = cluster.number + SECOND_NODE_LINK_NUMBER
        trust = self._registry_trust(lab)
        return RealNode(cluster, layout, binaries, self.pki_dir(cluster.name), self.kubectl, spec, number, trust)

    # -- the lab's registry (registry.py) -----------------------------------------------------

    def registry(self, lab: LabConfig | None = None) -> Registry:
        """The lab's OCI registry (a lab with real nodes runs one); `lab` defaults to the running lab's."""
        lab = lab or self.recorded_config()
        if lab is None or lab.registry_port is None:
            raise LabError(f"no lab with real nodes in {self.root}, so no registry; start one first (make lab-up)")
        return Registry(self.root, self.cache.path("registry"), lab.registry_port)

    def _registry_trust(self, lab: LabConfig | None) -> RegistryTrust | None:
        if lab is None or lab.registry_port is None:
            return None
        return RegistryTrust(lab.registry_addresses(), RegistryLayout(self.root).ca_cert)

    def registry_facts_file(self, name: str) -> Path:
        return self.cluster_dir(name) / REGISTRY_FACTS

    def registry_facts(self, cluster: str) -> dict:
        """The lab's registry as cluster `cluster`'s nodes reach it: `address` (`<host>:<port>`, what image references
        name), `ca` (the CA certificate's path), `username` and `password` (for pushes and imagePullSecrets)."""
        path = self.registry_facts_file(cluster)
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise LabError(f"{cluster}: no registry facts in {path} ({error}); is a lab with real nodes up?") from None

    def push_image(self, image: Image, repository: str, tag: str | None = None) -> str:
        """Push `image`'s OCI archive to the lab's registry as `<repository>:<tag>` (its own tag by default); the tag
        pushed. Images are content-addressed: a pod of any cluster pulls it as
        `<registry_facts(cluster)["address"]>/<repository>:<tag>`, with an imagePullSecret."""
        return self.registry().push(image, repository, tag)

    def _start_registry(self, lab: LabConfig) -> None:
        """Before the clusters, so their real nodes' containerd trusts it from its start; writes each cluster's
        registry facts."""
        lab_registry = self.registry(lab)
        link_ips = tuple(c.real_node.host_ip for c in lab.clusters if c.real_node)
        lab_registry.start(link_ips, self.log)
        password = lab_registry.password()
        for cluster in lab.clusters:
            if cluster.real_node is None:
                continue
            path = self.registry_facts_file(cluster.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600, exist_ok=True)
            path.chmod(0o600)
            facts = cluster_facts(lab.registry_address(cluster.name), lab_registry.ca_cert, password)
            path.write_text(json.dumps(facts, indent=2))

    def add_second_real_node(self, name: str, images: tuple[Image, ...] = ()) -> RealNode:
        """A second real node in running cluster `name`, with the lab's images and `images`, its network joined to the
        first node's through the underlay; Ready when this returns. For tests that need two nodes behind one API
        server; remove_second_real_node (or `down`) removes it."""
        lab = self.recorded_config()
        cluster = self._recorded_cluster(name)
        if lab.overlapping_pod_cidrs:
            raise LabError(
                "a second real node needs a lab whose pod ranges do not overlap (unset CATAMARAN_LAB_OVERLAP)"
            )
        base_images = ensure_images(self.cache.dir, self.cache.pins.kubernetes, GO_MODULE_DIR, self.log)
        first, node = self.real_node(cluster), self.second_node_of(cluster, lab)
        if node.layout.root.exists() or node.layout.netns_path.exists():  # a crashed run's
            self.remove_second_real_node(name)
        try:
            node.create_network(lab.overlapping_pod_cidrs, self.log)
            first.route_to(node)
            node.route_to(first)
            node.start([*base_images, *images], self.log)
        except BaseException:
            self.remove_second_real_node(name)
            raise
        return node

    def remove_second_real_node(self, name: str) -> None:
        cluster = self._recorded_cluster(name)
        first, node = self.real_node(cluster), self.second_node_of(cluster)
        self.kubectl(name, "delete", "node", node.spec.name, "--ignore-not-found", "--wait=false", check=False)
        for component in reversed(node.components):
            if node.pid(component) is not None:
                node.stop_component(component)
        _kill_processes_under(node.layout.root)
        node.remove()
        first.unroute(node)
        shutil.rmtree(node.layout.root, ignore_errors=True)
        self.log(f"lab: {name}: second real node {node.spec.name} removed")

    def prepare(self, wanted: LabConfig) -> list[Image]:
        """Binaries, and for real nodes the packages, host checks and images: all before anything starts."""
        self.cache.ensure(self.log)
        raise_inotify_limits(self.log)
        if not wanted.real_nodes:
            return []
        ensure_packages(self.log)
        check_real_node_host()
        images = ensure_images(self.cache.dir, self.cache.pins.kubernetes, GO_MODULE_DIR, self.log)
        # The conformance suite's images, only if built (`catamaran-lab e2e-build`): absent, `up` stays as fast.
        e2e_images = e2e.built_images(self.cache)
        if e2e_images:
            self.log(f"lab: the real nodes will hold {len(e2e_images)} e2e test images too")
        return images + e2e_images

    def recorded_config(self) -> LabConfig | None:
        path = self.root / STATE_FILE
        if not path.exists():
            return None
        return LabConfig.from_dict(json.loads(path.read_text()))

    # -- commands -----------------------------------------------------------------------

    def up(self, wanted: LabConfig) -> LabConfig:
        """Bring the lab to `wanted`; an identical healthy lab is reused as is."""
        images = self.prepare(wanted)
        current = self.recorded_config()
        if current == wanted and all(status.ready for status in self.status(current)) and self._registry_up(wanted):
            self.log(f"lab: {len(wanted.clusters)} clusters already up")
            return current
        if current is not None or self.root.exists():
            self.log("lab: tearing down the previous lab first")
            self.down()
        self.root.mkdir(parents=True, exist_ok=True)
        check_disk(self.root, RUNTIME_DISK_BYTES, "the lab's etcd data and logs")
        check_ports_free(wanted.all_ports())
        if wanted.real_nodes:  # this lab's own links went with the down above: what is left is another lab's
            check_addresses_free({c.real_node.host_ip: f"{c.name}'s real node" for c in wanted.clusters if c.real_node})
        self._link_binaries()
        if wanted.real_nodes:
            host.create_bridge(underlay_bridge(self.lab_id))
        started = time.monotonic()
        try:
            if wanted.registry_port is not None:
                self._start_registry(wanted)
            with ThreadPoolExecutor(max_workers=len(wanted.clusters)) as pool:
                timings = dict(
                    zip(
                        [c.name for c in wanted.clusters],
                        pool.map(lambda c: self._start_cluster(c, wanted, images), wanted.clusters),
                        strict=True,
                    )
                )
        except BaseException:
            self.log("lab: start failed; removing what was started")
            self.down(quiet=True)
            raise
        nodes = [self.real_node(c) for c in wanted.clusters if c.real_node and c.real_node.underlay_ip]
        for node in nodes:
            for other in nodes:
                if other is not node:
                    node.route_node_address_to(other)
        (self.root / STATE_FILE).write_text(json.dumps(wanted.to_dict(), indent=2))
        self._write_merged_kubeconfig(wanted)
        for name, seconds in timings.items():
            self.log(f"lab: {name} ready in {seconds:.1f}s, kubeconfig {self.kubeconfig(name)}")
        self.log(f"lab: {len(wanted.clusters)} clusters up in {time.monotonic() - started:.1f}s")
        return wanted

    def _registry_up(self, lab: LabConfig) -> bool:
        return lab.registry_port is None or self.registry(lab).running()

    def import_images(self, images: list[Image]) -> None:
        """Into the running lab's real nodes, as `up` does at their start: for images built after `up`."""
        lab = self.recorded_config()
        if lab is None:
            raise LabError(f"no lab in {self.root}; start it first (make lab-up)")
        nodes = [self.real_node(cluster) for cluster in lab.clusters if cluster.real_node]
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            list(pool.map(lambda node: node.import_images(images), nodes))
        self.log(f"lab: {len(images)} images imported into {len(nodes)} real nodes")

    def down(self, quiet: bool = False) -> None:
        """Remove every process, port and file the lab made, including a crashed run's leftovers."""
        workdir = self.kwok_workdir / "clusters"
        kwokctl = self.cache.path("kwokctl")
        if workdir.exists() and kwokctl.exists():
            for cluster in sorted(p.name for p in workdir.iterdir() if p.is_dir()):
                subprocess.run(
                    [str(kwokctl), "--name", cluster, "delete", "cluster"],
                    env=self._kwok_env(),
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
        killed = _kill_processes_under(self.root)
        # Containers outlive their shims; cgroups, mounts, namespaces and caches are found by name.
        cleaned = realnode.remove_leftovers(self.root, self.lab_id)
        recorded = self.recorded_config()
        shutil.rmtree(self.root, ignore_errors=True)
        if recorded is not None:
            _wait_ports_released(recorded.all_ports())
        if not quiet:
            extra = f" ({killed} leftover processes killed)" if killed else ""
            self.log(f"lab: down, {self.root} removed{extra}" + "".join(f"; {line}" for line in cleaned))

    def leftovers(self) -> list[str]:
        """Anything of this lab still on the host (processes, mounts, namespaces, links, cgroups, rules)."""
        found = [f"process {pid}: {_cmdline(pid)[:160]}" for pid in _processes_under(self.root)]
        return found + realnode.leftovers(self.root, self.lab_id)

    def status(self, lab: LabConfig | None = None) -> list[ClusterStatus]:
        lab = lab or self.recorded_config()
        if lab is None:
            return []
        return [self._cluster_status(cluster) for cluster in lab.clusters]

    def stop_component(self, cluster: str, component: str) -> None:
        """Stop one process of a cluster (fault tests); `start_component` brings it back as it was.

        Control-plane components are kwokctl's; `containerd`, `kubelet`, `kube-proxy`, `kube-router` and
        `local-path-provisioner` are the real node's.
        """
        if component in (*NODE_COMPONENTS, PROVISIONER):
            self.real_node(self._recorded_cluster(cluster)).stop_component(component)
            return
        pid_file = self.kwok_workdir / "clusters" / cluster / "pids" / f"{component}.pid"
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except (OSError, ValueError) as error:
            raise LabError(f"{cluster}: {component} is not running ({error})") from error
        saved = {"argv": [arg.decode() for arg in cmdline], "cwd": cwd}
        (self.cluster_dir(cluster) / f"{component}.stopped.json").write_text(json.dumps(saved))
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while host.process_alive(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def stop_policy_engine(self, cluster: str) -> None:
        """The cluster's real node stops enforcing NetworkPolicies (RealNode.stop_policy_engine), until
        `start_policy_engine`."""
        self.real_node(self._recorded_cluster(cluster)).stop_policy_engine()

    def start_policy_engine(self, cluster: str) -> None:
        self.real_node(self._recorded_cluster(cluster)).start_policy_engine()

    def start_component(self, cluster: str, component: str) -> None:
        if component in (*NODE_COMPONENTS, PROVISIONER):
            node = self.real_node(self._recorded_cluster(cluster))
            if node.pid(component) is not None:
                raise LabError(f"{cluster}: {component} of the real node is already running")
            node.start_component(component)
            return
        saved_path = self.cluster_dir(cluster) / f"{component}.stopped.json"
        if not saved_path.exists():
            raise LabError(f"{cluster}: {component} was not stopped by the lab")
        saved = json.loads(saved_path.read_text())
        self._spawn_component(cluster, component, saved["argv"], saved["cwd"])
        saved_path.unlink()

    def _spawn_component(self, cluster: str, component: str, argv: list[str], cwd: str) -> None:
        """A control-plane component started as kwokctl starts it: its log appended to, its pid file written."""
        log_path = self.kwok_workdir / "clusters" / cluster / "logs" / f"{component}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pid_file = self.kwok_workdir / "clusters" / cluster / "pids" / f"{component}.pid"
        pid_file.write_text(str(process.pid))

    def _revive_exited_components(self, cluster: ClusterSpec, created_at: float) -> None:
        """Start again a component that exited while the cluster started (COMPONENT_GIVE_UP_S says why); fail if one
        exits again."""
        time.sleep(max(0.0, created_at + COMPONENT_GIVE_UP_S - time.monotonic()))
        work = self.kwok_workdir / "clusters" / cluster.name
        config = next(doc for doc in yaml.safe_load_all((work / "kwok.yaml").read_text()) if "components" in doc)
        exited = exited_components(_processes_of(work / "pids"), config)
        if not exited:
            return
        for name, argv, cwd in exited:
            last = _last_line(work / "logs" / f"{name}.log")
            self.log(f"lab: {cluster.name}: {name} exited while the cluster started ({last}); starting it again")
            self._spawn_component(cluster.name, name, argv, cwd)
        time.sleep(COMPONENT_GIVE_UP_S)
        again = [name for name, _, _ in exited_components(_processes_of(work / "pids"), config)]
        if again:
            raise LabError(f"{cluster.name}: {', '.join(again)} exited again after a restart; see {work / 'logs'}")

    # -- helpers ------------------------------------------------------------------------

    def _recorded_cluster(self, name: str) -> ClusterSpec:
        recorded = self.recorded_config()
        if recorded is None:
            raise LabError(f"the lab is not running (no state in {self.root})")
        cluster = recorded.cluster(name)
        if cluster.real_node is None:
            raise LabError(f"{name} has no real node (the lab was started with CATAMARAN_LAB_REAL_NODES=0)")
        return cluster

    def kubectl(self, cluster: str, *args: str, timeout: float | None = None, check: bool = True, **kwargs):
        """Run kubectl against a cluster. Without a timeout, the process gets 60 s, or 30 s beyond the `--timeout=`
        kubectl is given (`wait`, `delete`), so kubectl reports its own timeout rather than being killed first."""
        command = [str(self.cache.path("kubectl")), "--kubeconfig", str(self.kubeconfig(cluster)), *args]
        if timeout is None:
            timeout = max(60.0, kubectl_timeout(args) + 30)
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
        if check and result.returncode != 0:
            raise LabError(kubectl_failure(cluster, args, result))
        return result

    def _kwok_env(self) -> dict[str, str]:
        # KWOK_WORKDIR keeps kwokctl's clusters, pids and logs inside the lab's state directory.
        return dict(os.environ, KWOK_WORKDIR=str(self.kwok_workdir))

    def _link_binaries(self) -> None:
        bin_dir = self.root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for name in ALL_BINARIES:
            link = bin_dir / name
            link.unlink(missing_ok=True)
            link.symlink_to(self.cache.path(name))

    def _start_cluster(self, cluster: ClusterSpec, lab: LabConfig, images: list[Image]) -> float:
        started = time.monotonic()
        cluster_dir = self.cluster_dir(cluster.name)
        (cluster_dir / "exec").mkdir(parents=True, exist_ok=True)
        (cluster_dir / "container.log").write_text(container_log_file(cluster))
        binaries = {name: self.cache.path(name) for name in ALL_BINARIES}
        node = self.real_node(cluster, lab) if cluster.real_node else None
        if node:
            node.create_network(lab.overlapping_pod_cidrs, self.log)
        # The lab's own PKI, in place before kwokctl looks (it keeps an existing pki directory). The API
        # server's certificate names every real node link of the lab: clusters start in parallel.
        link_ips = [c.real_node.host_ip for c in lab.clusters if c.real_node]
        pki = ClusterPKI(self.pki_dir(cluster.name))
        pki.create(cluster.name, tuple(dict.fromkeys([*host.interface_addresses(), *link_ips])))
        manifest_dir = cluster_dir / METRICS_SERVER_MANIFEST_DIR
        manifest_dir.mkdir(exist_ok=True)
        (manifest_dir / "metrics-server.yaml").write_text(
            yaml.safe_dump_all(metrics_server_manifests(pki.ca_cert.read_bytes()))
        )
        (manifest_dir / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["metrics-server.yaml"]}))
        if cluster.real_node:
            self._write_dns_files(cluster, pki)
        config_path = cluster_dir / "kwokctl.yaml"
        documents = kwokctl_documents(cluster, binaries, cluster_dir, self.pki_dir(cluster.name), lab.control_plane)
        config_path.write_text(yaml.safe_dump_all(documents))
        self.log(f"lab: starting {cluster.name} (kube-apiserver {cluster.server})")
        result = subprocess.run(
            [
                str(self.cache.path("kwokctl")),
                "--name",
                cluster.name,
                "create",
                "cluster",
                "--config",
                str(config_path),
                "--wait",
                f"{START_TIMEOUT_S}s",
            ],
            env=self._kwok_env(),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 60,
            check=False,
        )
        created_at = time.monotonic()
        if result.returncode != 0:
            logs = self.kwok_workdir / "clusters" / cluster.name / "logs"
            raise LabError(
                f"{cluster.name}: kwokctl create cluster failed (component logs in {logs}):\n"
                + "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            )
        self._write_kubeconfig(cluster)
        # Before any kubelet is dialled: the API server's and metrics-server's rights on kubelets; and cluster DNS.
        items = lab_rbac()
        if cluster.real_node:
            # kwokctl's ExternalName Service cannot become one with endpoints in place: it goes first.
            self.kubectl(cluster.name, "-n", "kube-system", "delete", "service", "metrics-server", "--ignore-not-found")
            items += dns.manifests(cluster) + metrics_server_endpoint(cluster)
        self.kubectl(
            cluster.name, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        )
        manifests = {"apiVersion": "v1", "kind": "List", "items": [node.manifest() for node in cluster.nodes]}
        self.kubectl(cluster.name, "apply", "-f", "-", input=json.dumps(manifests))
        realnode.kubectl_wait(
            self.kubectl, cluster.name, "Ready", "node", "-l", f"{MANAGED_NODE_LABEL}=true", seconds=120, check=True
        )
        if node:
            node.start(images, self.log)
            self._write_gateway_facts(cluster, node)
        self._wait_for_metrics_api(cluster)
        self._revive_exited_components(cluster, created_at)
        return time.monotonic() - started

    def gateway_facts_file(self, name: str) -> Path:
        return self.cluster_dir(name) / GATEWAY_FACTS

    def _write_gateway_facts(self, cluster: ClusterSpec, node: realnode.RealNode) -> None:
        """Where a network gateway on the real node runs (the Ansible inventory and the tests read it): its network
        namespace, its tunnels' names, its address on the underlay, and a kubeconfig that works from there."""
        assert cluster.real_node is not None
        kubeconfig = yaml.safe_load(self.kubeconfig(cluster.name).read_text())
        kubeconfig["clusters"][0]["cluster"]["server"] = cluster.node_facing_server
        path = self.cluster_dir(cluster.name) / "node-network.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)
        facts = {
            "network_namespace": node.layout.netns,
            "interface_prefix": node.layout.gateway_interface_prefix(cluster.number),
            "gateway_address": cluster.real_node.underlay_ip,
            # Its health endpoint listens here, where a supervisor on the host can probe it.
            "health_address": cluster.real_node.node_ip,
            "kubeconfig": str(path),
            # Where pods on any real node reach this cluster's API server: the host's end of this node's link, a
            # local address of the host for every node (the serving certificate names each such address).
            "api_server": cluster.node_facing_server,
            # The lab's own build (lab/gomod-wireguard says why), for kernels without WireGuard such as this one's.
            "wireguard_go": str(self.cache.path("wireguard-go")),
        }
        self.gateway_facts_file(cluster.name).write_text(json.dumps(facts, indent=2))

    def _write_dns_files(self, cluster: ClusterSpec, pki: ClusterPKI) -> None:
        dns_dir = self.cluster_dir(cluster.name) / dns.DIR
        dns_dir.mkdir(exist_ok=True)
        kubeconfig_path = dns_dir / "kubeconfig"
        kubeconfig_path.write_text(
            nodeconfig.kubeconfig(cluster.server, pki.ca_cert, pki.cert("coredns"), pki.key("coredns"), COREDNS_USER)
        )
        kubeconfig_path.chmod(0o600)
        (dns_dir / "Corefile").write_text(dns.corefile(cluster, kubeconfig_path))

    def _wait_for_metrics_api(self, cluster: ClusterSpec) -> None:
        result = realnode.kubectl_wait(
            self.kubectl, cluster.name, "Available", f"apiservice/{METRICS_APISERVICE}", seconds=METRICS_API_TIMEOUT_S
        )
        if result.returncode != 0:
            logs = self.kwok_workdir / "clusters" / cluster.name / "logs" / "metrics-server.log"
            raise LabError(
                f"{cluster.name}: the metrics API ({METRICS_APISERVICE}) did not become Available: "
                f"{self._metrics_api_state(cluster.name)}; see {logs}"
            )

    def _metrics_api_state(self, cluster: str) -> str:
        """`Available`, or why not, from the APIService's condition."""
        try:
            result = self.kubectl(
                cluster, "get", "apiservice", METRICS_APISERVICE, "-o", "json", timeout=10, check=False
            )
        except subprocess.TimeoutExpired:
            return "the API server did not answer"
        if result.returncode != 0:
            return (result.stderr.strip() or "no APIService")[:200]
        conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
        available = next((c for c in conditions if c["type"] == "Available"), None)
        if available is None:
            return "no Available condition yet"
        if available["status"] == "True":
            return "Available"
        return f"not Available: {available.get('reason')}: {available.get('message', '')}"[:200]

    def _write_kubeconfig(self, cluster: ClusterSpec) -> None:
        """kwokctl's kubeconfig, renamed so the context is the cluster id and certificates are inline."""
        result = subprocess.run(
            [str(self.cache.path("kwokctl")), "--name", cluster.name, "get", "kubeconfig"],
            env=self._kwok_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        source = yaml.safe_load(result.stdout)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": cluster.name, "cluster": _inline(source["clusters"][0]["cluster"])}],
            "users": [{"name": f"{cluster.name}-admin", "user": _inline(source["users"][0]["user"])}],
            "contexts": [{"name": cluster.name, "context": {"cluster": cluster.name, "user": f"{cluster.name}-admin"}}],
            "current-context": cluster.name,
        }
        kubeconfig["clusters"][0]["cluster"]["server"] = cluster.server
        path = self.kubeconfig(cluster.name)
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)

    def _write_merged_kubeconfig(self, lab: LabConfig) -> None:
        merged = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
        for cluster in lab.clusters:
            one = yaml.safe_load(self.kubeconfig(cluster.name).read_text())
            for key in ("clusters", "users", "contexts"):
                merged[key] += one[key]
        merged["current-context"] = lab.clusters[0].name
        self.merged_kubeconfig.write_text(yaml.safe_dump(merged))
        self.merged_kubeconfig.chmod(0o600)

    def _cluster_status(self, cluster: ClusterSpec) -> ClusterStatus:
        kubeconfig = self.kubeconfig(cluster.name)
        ready, detail, ready_nodes = False, "not started", 0
        if kubeconfig.exists():
            try:
                readyz = self.kubectl(cluster.name, "get", "--raw", "/readyz", timeout=10, check=False)
                ready = readyz.returncode == 0 and readyz.stdout.strip() == "ok"
                detail = "ready" if ready else (readyz.stderr.strip() or readyz.stdout.strip())[:200]
                if ready:
                    nodes = self.kubectl(cluster.name, "get", "nodes", "-l", f"{MANAGED_NODE_LABEL}=true", "-o", "json")
                    ready_nodes = sum(_node_ready(node) for node in json.loads(nodes.stdout)["items"])
                    ready = ready_nodes == len(cluster.nodes)
                    if not ready:
                        detail = f"{ready_nodes}/{len(cluster.nodes)} nodes Ready"
            except (subprocess.TimeoutExpired, LabError) as error:
                detail = str(error)[:200]
        pid_dir = self.kwok_workdir / "clusters" / cluster.name / "pids"
        rss, peak = _memory_of(pid_dir)
        processes = _processes_of(pid_dir)
        metrics_api = self._metrics_api_state(cluster.name) if ready else "unknown"
        if ready and metrics_api != "Available":
            ready, detail = False, f"metrics API {METRICS_APISERVICE}: {metrics_api}"
        dead = [name for name, alive in processes.items() if not alive]
        if ready and dead:
            ready, detail = False, f"{', '.join(dead)} not running"
        node = None
        if cluster.real_node and kubeconfig.exists():
            node = self.real_node(cluster).status()
            if not node.ready:
                ready, detail = False, f"real node {node.name}: {node.detail}"[:300]
        return ClusterStatus(
            cluster.name,
            cluster.server,
            kubeconfig,
            ready,
            detail,
            ready_nodes,
            rss,
            peak,
            node,
            processes,
            metrics_api,
        )


def kubectl_failure(cluster: str, args: tuple[str, ...], result: subprocess.CompletedProcess) -> str:
    """What a failed kubectl said. One killed by a signal (a negative status) writes nothing: its status says it."""
    said = (result.stderr or "").strip() or (result.stdout or "").strip() or "no output"
    return f"{cluster}: kubectl {' '.join(args)} failed (exit status {result.returncode}): {said}"


def kubectl_timeout(args) -> float:
    """The seconds of a kubectl `--timeout=<n>s|<n>m` argument, else 0."""
    for argument in args:
        if argument.startswith("--timeout="):
            value = argument.split("=", 1)[1]
            with contextlib.suppress(ValueError):
                if value.endswith("m"):
                    return float(value[:-1]) * 60
                return float(value.rstrip("s"))
    return 0.0


def _inline(entry: dict) -> dict:
    """Replace `*-file` references by their `*-data` so the kubeconfig stands alone."""
    result = {}
    for key, value in entry.items():
        if key in ("certificate-authority", "client-certificate", "client-key"):
            result[f"{key}-data"] = base64.b64encode(Path(value).read_bytes()).decode()
        else:
            result[key] = value
    return result


def _node_ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def _memory_of(pid_dir: Path) -> tuple[float, float]:
    """Current and peak resident memory (MiB) of a cluster's processes, from /proc."""
    rss = peak = 0
    for pid_file in pid_dir.glob("*.pid") if pid_dir.exists() else []:
        try:
            status = Path(f"/proc/{pid_file.read_text().strip()}/status").read_text()
        except (OSError, ValueError):
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss += int(fields.get("VmRSS", "0 kB").split()[0])
        peak += int(fields.get("VmHWM", "0 kB").split()[0])
    return rss / 1024, peak / 1024


def _processes_of(pid_dir: Path) -> dict[str, bool]:
    """kwokctl's components of a cluster (metrics-server among them) and whether each is alive."""
    found = {}
    for pid_file in sorted(pid_dir.glob("*.pid")) if pid_dir.exists() else []:
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            found[pid_file.stem] = False
            continue
        found[pid_file.stem] = host.process_alive(pid)
    return found


def exited_components(processes: dict[str, bool], kwok_config: dict) -> list[tuple[str, list[str], str]]:
    """Components of kwokctl's configuration whose process is gone: (name, argv, working directory) to start it as
    kwokctl did."""
    return [
        (component["name"], [component["binary"], *component.get("args", [])], component.get("workDir", "/"))
        for component in kwok_config.get("components", [])
        if processes.get(component["name"]) is False
    ]


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "empty log"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _processes_under(root: Path) -> list[int]:
    """Processes whose command line or working directory points into the lab's state directory."""
    marker = f"{root}/"  # with the slash, .lab never matches a sibling such as .lab-bench
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if marker in cmdline or cwd == str(root) or cwd.startswith(marker):
            found.append(int(entry))
    return found


def _kill_processes_under(root: Path) -> int:
    pids = _processes_under(root)
    found = len(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(host.process_alive(pid) for pid in pids):
            time.sleep(0.2)
        pids = [pid for pid in pids if host.process_alive(pid)]
        if not pids:
            break
    return found


def _wait_ports_released(ports: dict[int, str], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            check_ports_free(ports)
            return
        except LabError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
