"""The lab's shape: clusters, their ports, pod ranges, fake nodes and real nodes. Pure data, no I/O but reading YAML."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from .errors import LabError
from .paths import LAB_DIR

DEFAULT_CONFIG = LAB_DIR / "lab.yaml"

# kwok drives only nodes carrying this label; everything else (Catamaran's virtual nodes) is left alone.
MANAGED_NODE_LABEL = "catamaran.io/lab-node"
PROVIDER_LABEL = "catamaran.io/lab-provider"
# Every lab node says what it is: `fake` (kwok) or `real` (kubelet, containerd, runc). The real node is
# also tainted with it, so only workloads that ask for real containers (and tolerate it) land there.
NODE_KIND_LABEL = "catamaran.io/lab-node-kind"
REAL_NODE_TAINT = {"key": NODE_KIND_LABEL, "value": "real", "effect": "NoSchedule"}
# A cluster's second real node (second_real_node) is tainted with this too: only pods that ask for it land there.
SECOND_NODE_TAINT = {"key": "catamaran.io/lab-second-node", "value": "true", "effect": "NoSchedule"}
# The manager named on EndpointSlices the lab writes for its host processes (ClusterSpec.host_endpoints).
LAB_ENDPOINT_SLICE_MANAGER = "lab.catamaran.io"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"

PORT_OFFSETS = {
    "kube-apiserver": 0,
    "etcd": 1,
    "etcd-peer": 2,
    "kube-controller-manager": 3,
    "kube-scheduler": 4,
    "kwok-controller": 5,
    "metrics-server": 6,
}
# Cluster i's ports are basePort + 10 * i + offset (i >= 1): basePort + 0..9 are the lab's own, for lab-wide services.
# The lab's OCI registry (registry.py), run when the lab has real nodes:
REGISTRY_PORT_OFFSET = 1
# kwok serves each fake node's resource metrics under its own path; metrics-server reads it from this
# annotation (nodes without it, like real and virtual kubelets, are scraped at /metrics/resource).
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"
# Each real node lives in a network namespace of its own, joined to the host by a /30 out of this range.
NODE_LINK_RANGE = ipaddress.IPv4Network("172.31.0.0/16")
# The underlay: real nodes also share one bridge, a /24 per lab out of this range, as sites on a WAN share
# the internet. It carries the nodes' own addresses, never a pod range: only a fabric joins pods across.
UNDERLAY_RANGE = ipaddress.IPv4Network("172.30.0.0/16")
UNDERLAY_PREFIX = 24
# The cluster DNS Service's address, in kube-apiserver's default Service range (kwokctl sets none), and the
# domain every kubelet is given with it.
CLUSTER_DNS_IP = "10.0.0.10"
# That Service range itself: kube-router's network policies let a node's pods reach it before kube-proxy's DNAT.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
CLUSTER_DOMAIN = "cluster.local"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    labels: dict[str, str]
    pod_cidr: str
    allocatable: dict[str, str]

    def manifest(self) -> dict:
        """A Node object; kwok fills in conditions, heartbeats and the kubelet endpoint."""
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "kwok.x-k8s.io/node": "fake",
                    RESOURCE_METRICS_PATH_ANNOTATION: f"/metrics/nodes/{self.name}/metrics/resource",
                },
            },
            "spec": {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]},
            "status": {
                "allocatable": self.allocatable,
                "capacity": self.allocatable,
            },
        }


@dataclass(frozen=True)
class RealNodeSpec:
    """One real worker: a kubelet, containerd and kube-proxy in a network namespace of their own.

    `lab_id` tells this lab's host objects (network namespace, links, cgroups) from another lab's
    on the same machine; it is derived from the lab's state directory when the lab starts.
    """

    name: str
    labels: dict[str, str]
    pod_cidr: str
    host_ip: str  # the host's end of the link: kube-apiserver is reached here from the node
    node_ip: str  # the node's end: the kubelet's InternalIP
    link_prefix: int
    underlay_ip: str = ""  # the node's address on the lab's underlay (where a gateway on it is reached)
    second: bool = False  # a cluster's second real node (second_real_node)

    def manifest(self) -> dict:
        """The Node, registered before the kubelet starts so its pod range, labels and taint are fixed."""
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": {
                "podCIDR": self.pod_cidr,
                "podCIDRs": [self.pod_cidr],
                "taints": [REAL_NODE_TAINT, *([SECOND_NODE_TAINT] if self.second else [])],
            },
        }


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    number: int
    region: str
    provider: str
    pod_cidr: str
    ports: dict[str, int]
    nodes: tuple[NodeSpec, ...] = field(default_factory=tuple)
    real_node: RealNodeSpec | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def node_facing_server(self) -> str:
        """Where processes in the real node's network (kubelet, pods) reach the kube-apiserver."""
        host = self.real_node.host_ip if self.real_node else "127.0.0.1"
        return f"https://{host}:{self.ports['kube-apiserver']}"

    def host_endpoints(self, service: str, ports: list[dict]) -> dict:
        """The EndpointSlice of kube-system's selectorless `service` served by a lab process on the host: at the host
        end of the real node's link, where the node's pods and the API server's endpoint routing reach it."""
        assert self.real_node is not None
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-host",
                "namespace": "kube-system",
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": LAB_ENDPOINT_SLICE_MANAGER,
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.real_node.host_ip], "conditions": {"ready": True}}],
            "ports": ports,
        }


@dataclass(frozen=True)
class ControlPlaneSettings:
    """Client rates and concurrency of every cluster's kube-controller-manager and kube-scheduler.

    Upstream's client defaults (20 requests/s for the controller manager, 50 for the scheduler) throttle
    a burst of pod creations long before the API server is busy: a benchmark's baseline would measure
    those limits, not the cluster. The lab lifts them so that only the machine limits both sides.
    """

    client_qps: int = 5000
    client_burst: int = 10000
    concurrent_syncs: int = 50  # ReplicaSet, Deployment, StatefulSet and garbage collector workers

    @classmethod
    def from_yaml(cls, raw: dict, origin: str) -> ControlPlaneSettings:
        names = {"clientQPS": "client_qps", "clientBurst": "client_burst", "concurrentSyncs": "concurrent_syncs"}
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise LabError(f"{origin}: controlPlane has unknown keys {unknown}; known: {sorted(names)}")
        values = {}
        for key, field_name in names.items():
            if key not in raw:
                continue
            value = raw[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LabError(f"{origin}: controlPlane.{key} must be a whole number of at least 1, not {value!r}")
            values[field_name] = value
        return cls(**values)

    def describe(self) -> str:
        return (
            f"kube-controller-manager and kube-scheduler at {self.client_qps} requests/s (burst "
            f"{self.client_burst}), {self.concurrent_syncs} concurrent syncs per workload controller"
        )


@dataclass(frozen=True)
class LabConfig:
    base_port: int
    overlapping_pod_cidrs: bool
    clusters: tuple[ClusterSpec, ...]
    real_nodes: bool = True
    control_plane: ControlPlaneSettings = field(default_factory=ControlPlaneSettings)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LabConfig:
        clusters = tuple(
            ClusterSpec(
                **{
                    **c,
                    "nodes": tuple(NodeSpec(**n) for n in c["nodes"]),
                    "real_node": RealNodeSpec(**c["real_node"]) if c.get("real_node") else None,
                }
            )
            for c in data["clusters"]
        )
        return cls(
            base_port=data["base_port"],
            overlapping_pod_cidrs=data["overlapping_pod_cidrs"],
            clusters=clusters,
            real_nodes=data.get("real_nodes", False),
            control_plane=ControlPlaneSettings(**(data.get("control_plane") or {})),
        )

    @property
    def registry_port(self) -> int | None:
        """The lab's registry's port (registry.py): a lab with real nodes runs one, on every address of the host."""
        return self.base_port + REGISTRY_PORT_OFFSET if self.real_nodes else None

    def registry_address(self, cluster: str) -> str:
        """`<host>:<port>` where the real node of `cluster` (and its pods' images) reaches the lab's registry."""
        spec = self.cluster(cluster)
        if self.registry_port is None or spec.real_node is None:
            raise LabError(f"{cluster} has no real node, so the lab runs no registry for it")
        return f"{spec.real_node.host_ip}:{self.registry_port}"

    def registry_addresses(self) -> tuple[str, ...]:
        """Every cluster's registry address: a node may pull an image reference that names another cluster's."""
        return tuple(self.registry_address(c.name) for c in self.clusters if c.real_node and self.real_nodes)

    def all_ports(self) -> dict[int, str]:
        ports = {port: f"{cluster.name} {use}" for cluster in self.clusters for use, port in cluster.ports.items()}
        if self.registry_port is not None:
            ports[self.registry_port] = "lab registry"
        return ports

    def cluster(self, name: str) -> ClusterSpec:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise LabError(f"the lab has no cluster named {name!r}; it has {[c.name for c in self.clusters]}")


# Labs side by side (the test suite's lanes, a bench) take port blocks of 100 apart; each block's clusters take pod
# ranges of their own, ten /16s apart, so the host routes every lab's pods (10.100-10.199, under the remap pool).
POD_RANGE_BLOCKS = 10


def cluster_pod_cidr(number: int, overlapping: bool, base_port: int = 26000) -> ipaddress.IPv4Network:
    """Distinct /16 per cluster by default; one shared /16 when overlap is asked for; per lab port block."""
    block = 10 * ((base_port // 100) % POD_RANGE_BLOCKS)
    return ipaddress.IPv4Network(f"10.{100 + block + (0 if overlapping else number)}.0.0/16")


def fake_node_pod_prefix(pods: int) -> int:
    """The longest prefix whose range holds `pods` pod IPs: a /24 for ordinary nodes, wider for a bench's thousands
    (kwok hands out addresses past its node's range once that is used up, which a provider's announced ranges
    rightly refuse)."""
    prefix = 24
    while 2 ** (32 - prefix) - 2 < pods:
        prefix -= 1
    return prefix


def real_node_pod_cidr(cluster_range: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The last /24 of the cluster's range: fake nodes take theirs from the start (at most 200)."""
    return list(cluster_range.subnets(new_prefix=24))[-1]


def node_link(apiserver_port: int, second: bool = False) -> tuple[str, str]:
    """Host and node addresses of a real node's link, one /30 per port block, so labs never collide; a cluster's
    second real node takes its /30 from the range's upper half."""
    half = NODE_LINK_RANGE.num_addresses // 8
    base = NODE_LINK_RANGE.network_address + 4 * ((apiserver_port // 10) % half + (half if second else 0))
    return str(base + 1), str(base + 2)


# A second real node's address on the underlay: its cluster's first node's, plus this.
SECOND_NODE_UNDERLAY_OFFSET = 100


def second_real_node(cluster: ClusterSpec) -> RealNodeSpec:
    """One more real node of `cluster`, added on demand (Lab.add_second_real_node) where a test needs two nodes behind
    one API server: its pods in the second-to-last /24 of the cluster's range, on the underlay beside the first, and
    tainted SECOND_NODE_TAINT, so that pods asking for the real node keep landing on the first."""
    first = cluster.real_node
    if first is None:
        raise LabError(f"{cluster.name} has no real node: a second one needs the first")
    name = f"{cluster.name}-real-2"
    host_ip, node_ip = node_link(cluster.ports["kube-apiserver"], second=True)
    zone = f"{first.labels.get(REGION_LABEL, cluster.region)}-real-2"
    return RealNodeSpec(
        name=name,
        labels={**first.labels, "kubernetes.io/hostname": name, ZONE_LABEL: zone},
        pod_cidr=str(list(ipaddress.IPv4Network(cluster.pod_cidr).subnets(new_prefix=24))[-2]),
        host_ip=host_ip,
        node_ip=node_ip,
        link_prefix=first.link_prefix,
        underlay_ip=str(ipaddress.IPv4Address(first.underlay_ip) + SECOND_NODE_UNDERLAY_OFFSET),
        second=True,
    )


def underlay_address(base_port: int, number: int) -> str:
    """Cluster `number`'s real node on the underlay: one /24 per lab (by base port), so labs never collide."""
    slots = UNDERLAY_RANGE.num_addresses >> (32 - UNDERLAY_PREFIX)
    subnet = UNDERLAY_RANGE.network_address + ((base_port // 100) % slots << (32 - UNDERLAY_PREFIX))
    return str(subnet + number)


def lab_id(state_dir: Path) -> str:
    """Short, stable tag for one lab's host objects (network namespaces, links, cgroups)."""
    return hashlib.sha256(str(state_dir).encode()).hexdigest()[:6]


def load(
    path: Path = DEFAULT_CONFIG,
    clusters: int | None = None,
    overlapping_pod_cidrs: bool | None = None,
    base_port: int | None = None,
    real_nodes: bool | None = None,
) -> LabConfig:
    """Read the lab file and apply overrides (arguments first, then CATAMARAN_LAB_* variables)."""
    clusters = clusters if clusters is not None else _env_int("CATAMARAN_LAB_CLUSTERS")
    base_port = base_port if base_port is not None else _env_int("CATAMARAN_LAB_BASE_PORT")
    if overlapping_pod_cidrs is None:
        overlapping_pod_cidrs = os.environ.get("CATAMARAN_LAB_OVERLAP") == "1"
    if real_nodes is None:
        real_nodes = _env_flag("CATAMARAN_LAB_REAL_NODES", default=True)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise LabError(f"cannot read lab configuration {path}: {error}") from error
    declared = list(raw.get("clusters") or [])
    count = clusters if clusters is not None else len(declared)
    if not 1 <= count <= 9:
        raise LabError(f"the lab runs 1 to 9 clusters, not {count}")
    base = base_port if base_port is not None else int(raw.get("basePort", 26000))
    if not 1024 <= base <= 65535 - 100:
        raise LabError(f"basePort {base} is out of range (1024..65435)")
    defaults = raw.get("defaults") or {}
    specs = []
    for number in range(1, count + 1):
        entry = declared[number - 1] if number <= len(declared) else {}
        letter = "abcdefghi"[number - 1]
        specs.append(
            _cluster(
                number=number,
                name=entry.get("name", f"cluster-{number}"),
                region=entry.get("region", f"region-{letter}"),
                provider=entry.get("provider", f"provider-{letter}"),
                node_count=int(entry.get("nodes", defaults.get("nodes", 3))),
                allocatable={**(defaults.get("allocatable") or {}), **(entry.get("allocatable") or {})},
                extra_resources=entry.get("extraResources") or [],
                overlapping=overlapping_pod_cidrs,
                base_port=base,
                real_node=real_nodes,
            )
        )
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise LabError(f"cluster names in {path} must be unique: {names}")
    return LabConfig(
        base_port=base,
        overlapping_pod_cidrs=overlapping_pod_cidrs,
        clusters=tuple(specs),
        real_nodes=real_nodes,
        control_plane=ControlPlaneSettings.from_yaml(raw.get("controlPlane") or {}, str(path)),
    )


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value not in ("0", "1"):
        raise LabError(f"{name}={value!r} must be 0 or 1")
    return value == "1"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise LabError(f"{name}={value!r} is not a whole number") from None


def _cluster(
    *,
    number: int,
    name: str,
    region: str,
    provider: str,
    node_count: int,
    allocatable: dict,
    extra_resources: list,
    overlapping: bool,
    base_port: int,
    real_node: bool,
) -> ClusterSpec:
    if not DNS_LABEL.match(name):
        raise LabError(f"cluster name {name!r} is not a DNS-1123 label (lowercase letters, digits and '-')")
    if not 1 <= node_count <= 200:
        raise LabError(f"cluster {name}: nodes must be between 1 and 200, not {node_count}")
    if len(extra_resources) > node_count:
        raise LabError(f"cluster {name}: {len(extra_resources)} extraResources entries but only {node_count} nodes")
    cidr = cluster_pod_cidr(number, overlapping, base_port)
    node_cidrs = list(cidr.subnets(new_prefix=fake_node_pod_prefix(int(allocatable.get("pods", 110)))))
    # Fake nodes take the ranges after the first; real nodes the last two /24s.
    last_free = cidr.broadcast_address - (2 * 256 if real_node else 0)
    if node_count >= len(node_cidrs) or node_cidrs[node_count].broadcast_address > last_free:
        raise LabError(
            f"cluster {name}: {node_count} nodes of {allocatable.get('pods')} pods each need more pod addresses than "
            f"its range {cidr} holds{' beside its real nodes' if real_node else ''}"
        )
    nodes = []
    for index in range(node_count):
        node_name = f"{name}-worker-{index + 1}"
        extra = extra_resources[index] if index < len(extra_resources) else {}
        nodes.append(
            NodeSpec(
                name=node_name,
                labels={
                    MANAGED_NODE_LABEL: "true",
                    NODE_KIND_LABEL: "fake",
                    "type": "kwok",
                    "kubernetes.io/hostname": node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "node-role.kubernetes.io/worker": "",
                    REGION_LABEL: region,
                    ZONE_LABEL: f"{region}-{'abc'[index % 3]}",
                    PROVIDER_LABEL: provider,
                },
                pod_cidr=str(node_cidrs[index + 1]),
                allocatable={key: str(value) for key, value in {**allocatable, **extra}.items()},
            )
        )
    ports = {use: base_port + 10 * number + offset for use, offset in PORT_OFFSETS.items()}
    return ClusterSpec(
        name=name,
        number=number,
        region=region,
        provider=provider,
        pod_cidr=str(cidr),
        ports=ports,
        nodes=tuple(nodes),
        real_node=_real_node(name, region, provider, cidr, ports["kube-apiserver"], underlay_address(base_port, number))
        if real_node
        else None,
    )


def _real_node(
    cluster: str, region: str, provider: str, cidr: ipaddress.IPv4Network, apiserver_port: int, underlay_ip: str
) -> RealNodeSpec:
    node_name = f"{cluster}-real"
    host_ip, node_ip = node_link(apiserver_port)
    return RealNodeSpec(
        name=node_name,
        labels={
            NODE_KIND_LABEL: "real",
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node-role.kubernetes.io/worker": "",
            REGION_LABEL: region,
            ZONE_LABEL: f"{region}-real",
            PROVIDER_LABEL: provider,
        },
        pod_cidr=str(real_node_pod_cidr(cidr)),
        host_ip=host_ip,
        node_ip=node_ip,
        link_prefix=30,
        underlay_ip=underlay_ip,
    )
