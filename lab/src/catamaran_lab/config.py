"""The lab's shape: clusters, their ports, pod ranges and fake nodes. Pure data, no I/O but reading YAML."""

from __future__ import annotations

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
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"

PORT_OFFSETS = {
    "kube-apiserver": 0,
    "etcd": 1,
    "etcd-peer": 2,
    "kube-controller-manager": 3,
    "kube-scheduler": 4,
    "kwok-controller": 5,
}
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
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            },
            "spec": {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]},
            "status": {
                "allocatable": self.allocatable,
                "capacity": self.allocatable,
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

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"


@dataclass(frozen=True)
class LabConfig:
    base_port: int
    overlapping_pod_cidrs: bool
    clusters: tuple[ClusterSpec, ...]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LabConfig:
        clusters = tuple(
            ClusterSpec(**{**c, "nodes": tuple(NodeSpec(**n) for n in c["nodes"])}) for c in data["clusters"]
        )
        return cls(base_port=data["base_port"], overlapping_pod_cidrs=data["overlapping_pod_cidrs"], clusters=clusters)

    def all_ports(self) -> dict[int, str]:
        return {port: f"{cluster.name} {use}" for cluster in self.clusters for use, port in cluster.ports.items()}

    def cluster(self, name: str) -> ClusterSpec:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise LabError(f"the lab has no cluster named {name!r}; it has {[c.name for c in self.clusters]}")


def cluster_pod_cidr(number: int, overlapping: bool) -> ipaddress.IPv4Network:
    """Distinct /16 per cluster by default; one shared /16 when overlap is asked for."""
    return ipaddress.IPv4Network(f"10.{100 if overlapping else 100 + number}.0.0/16")


def load(
    path: Path = DEFAULT_CONFIG,
    clusters: int | None = None,
    overlapping_pod_cidrs: bool | None = None,
    base_port: int | None = None,
) -> LabConfig:
    """Read the lab file and apply overrides (arguments first, then CATAMARAN_LAB_* variables)."""
    clusters = clusters if clusters is not None else _env_int("CATAMARAN_LAB_CLUSTERS")
    base_port = base_port if base_port is not None else _env_int("CATAMARAN_LAB_BASE_PORT")
    if overlapping_pod_cidrs is None:
        overlapping_pod_cidrs = os.environ.get("CATAMARAN_LAB_OVERLAP") == "1"
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
            )
        )
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise LabError(f"cluster names in {path} must be unique: {names}")
    return LabConfig(base_port=base, overlapping_pod_cidrs=overlapping_pod_cidrs, clusters=tuple(specs))


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
) -> ClusterSpec:
    if not DNS_LABEL.match(name):
        raise LabError(f"cluster name {name!r} is not a DNS-1123 label (lowercase letters, digits and '-')")
    if not 1 <= node_count <= 200:
        raise LabError(f"cluster {name}: nodes must be between 1 and 200, not {node_count}")
    if len(extra_resources) > node_count:
        raise LabError(f"cluster {name}: {len(extra_resources)} extraResources entries but only {node_count} nodes")
    cidr = cluster_pod_cidr(number, overlapping)
    node_cidrs = list(cidr.subnets(new_prefix=24))
    nodes = []
    for index in range(node_count):
        node_name = f"{name}-worker-{index + 1}"
        extra = extra_resources[index] if index < len(extra_resources) else {}
        nodes.append(
            NodeSpec(
                name=node_name,
                labels={
                    MANAGED_NODE_LABEL: "true",
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
    )
