"""Liqo as a benchmark peer: binaries built from a checkout, its offloading set up by hand on two bench lab clusters.

Nothing of Liqo lives in this repository. The bench is given a checkout of a pinned tag (`--liqo-src`), builds
`virtual-kubelet`, `liqo-controller-manager` and `crd-replicator` from it once into a cache next to it, and runs
them as local processes with kubeconfigs, the way the offloading bench runs Catamaran's. Networking is disabled
(the lab has kwok nodes only), so the peering is the part of `liqoctl peer` that offloading needs, written here
as plain objects: Liqo's CRDs and ClusterRoles, per side the `liqo` namespace, the cluster-id ConfigMap, a tenant
namespace and a ForeignCluster; on the consumer a ControlPlane identity Secret with a kubeconfig for the
provider and a VirtualNode; on the provider a Tenant that tolerates no handshake. Liqo's webhook is not run.

    git --git-dir=<mirror of liqotech/liqo> archive v1.2.0 | tar -x -C ~/.cache/catamaran-bench/liqo-v1.2.0/src
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import harness
import yaml

from catamaran_lab.lab import Lab
from tests.integration import federation

LIQO_TAG = "v1.2.0"
CACHE = Path.home() / ".cache" / "catamaran-bench"
BINARIES = {
    "virtual-kubelet": "cmd/virtual-kubelet",
    "liqo-controller-manager": "cmd/liqo-controller-manager",
    "crd-replicator": "cmd/crd-replicator",
}
LIQO_NAMESPACE = "liqo"
# Liqo's own names (pkg/consts, the chart): read from its source, not chosen here.
REMOTE_CLUSTER_ID = "liqo.io/remote-cluster-id"
TENANT_NAMESPACE_LABEL = "liqo.io/tenant-namespace"
IDENTITY_TYPE = "liqo.io/identity-type"
REMOTE_TENANT_NAMESPACE = "liqo.io/remote-tenant-namespace"
APP_NAME = "app.kubernetes.io/name"
NODE_TYPE = {"liqo.io/type": "virtual-node"}
VIRTUAL_NODE_TOLERATION = {"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}
# The chart's VkOptionsTemplate adds this one when not overridden; the virtual kubelet's other defaults (pod
# reflection workers 10) are the chart's too.
CHART_VK_ARGS = ["--enable-apiserver-support=true"]


def default_source(tag: str = LIQO_TAG) -> Path:
    return CACHE / f"liqo-{tag}" / "src"


def ensure_binaries(source: Path) -> Path:
    """Build Liqo's three binaries from `source` into `<source>/../bin`, skipping those already there."""
    if not (source / "go.mod").exists():
        raise SystemExit(
            f"no Liqo checkout in {source}: fetch github:liqotech/liqo and "
            f"`git --git-dir=<mirror> archive {LIQO_TAG} | tar -x -C {source}`"
        )
    bin_dir = source.parent / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    for name, package in BINARIES.items():
        if (bin_dir / name).exists():
            continue
        print(f"building Liqo's {name} from {source} ...", flush=True)
        started = time.monotonic()
        subprocess.run(["go", "build", "-o", str(bin_dir / name), f"./{package}"], cwd=source, env=env, check=True)
        print(f"  built in {time.monotonic() - started:.0f} s", flush=True)
    return bin_dir


def process(lab: Lab, name: str, argv: list[str], env: dict[str, str]) -> federation.ChildProcess:
    """A Liqo binary as a child process, its log in the lab's logs directory."""
    return federation.ChildProcess(lab, f"liqo-{name}", argv, env)


def tenant_namespace(cluster_id: str) -> str:
    return f"liqo-tenant-{cluster_id}"


def _namespace(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def _tenant_namespace(remote: str) -> dict:
    return _namespace(tenant_namespace(remote), {REMOTE_CLUSTER_ID: remote, TENANT_NAMESPACE_LABEL: "true"})


def _cluster_id_config_map(cluster: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "liqo-clusterid-configmap",
            "namespace": LIQO_NAMESPACE,
            "labels": {APP_NAME: "clusterid-configmap"},
        },
        "data": {"CLUSTER_ID": cluster},
    }


def _foreign_cluster(remote: str) -> dict:
    return {
        "apiVersion": "core.liqo.io/v1beta1",
        "kind": "ForeignCluster",
        "metadata": {"name": remote, "labels": {REMOTE_CLUSTER_ID: remote}},
        "spec": {"clusterID": remote},
    }


def _cluster_roles(source: Path) -> list[dict]:
    """The chart's ClusterRole rule files as ClusterRoles; the Tenant controller finds them by their name label."""
    roles = []
    for path in sorted((source / "deployments" / "liqo" / "files").glob("liqo-*-ClusterRole.yaml")):
        name = path.name.removesuffix("-ClusterRole.yaml")
        rules = yaml.safe_load(path.read_text()).get("rules") or []
        roles.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name, "labels": {APP_NAME: name.removeprefix("liqo-")}},
                "rules": rules,
            }
        )
    return roles


@dataclass
class LiqoPeering:
    """One consumer offloading to one provider through Liqo; shaped like offloading.Federation so the offloading
    bench's timed_deployments() measures it the same way (pids, cpu, scrape)."""

    lab: Lab
    consumer: str
    provider: str
    source: Path
    bin_dir: Path
    qps: int
    burst: int
    processes: dict[str, federation.ChildProcess] = field(default_factory=dict)

    @property
    def consumers(self) -> list[str]:
        return [self.consumer]

    @property
    def providers(self) -> list[str]:
        return [self.provider]

    @property
    def node_name(self) -> str:
        return f"liqo-{self.provider}"

    @property
    def secret_name(self) -> str:
        return f"liqo-control-plane-{self.provider}"

    def node_selector(self) -> dict:
        return dict(NODE_TYPE)

    def toleration(self) -> dict:
        return dict(VIRTUAL_NODE_TOLERATION)

    def client_limits(self) -> list[str]:
        return ["--client-qps", str(self.qps), "--client-max-burst", str(self.burst)]

    # -- set-up --------------------------------------------------------------------------------------------

    def start(self) -> None:
        crds = self.source / "deployments" / "liqo" / "charts" / "liqo-crds" / "crds"
        roles = federation.as_list(_cluster_roles(self.source))
        for cluster, remote in ((self.consumer, self.provider), (self.provider, self.consumer)):
            self.lab.kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout=120)
            self.lab.kubectl(cluster, "wait", "--for=condition=Established", "-f", str(crds), "--timeout=60s")
            self.lab.kubectl(cluster, "apply", "--server-side", "-f", "-", input=roles)
            base = [_namespace(LIQO_NAMESPACE), _tenant_namespace(remote), _cluster_id_config_map(cluster)]
            self.lab.kubectl(cluster, "apply", "--server-side", "-f", "-", input=federation.as_list(base))
            self.lab.kubectl(
                cluster, "apply", "--server-side", "-f", "-", input=federation.as_list([_foreign_cluster(remote)])
            )
        self.lab.kubectl(self.provider, "apply", "--server-side", "-f", "-", input=federation.as_list([self._tenant()]))
        self.lab.kubectl(
            self.consumer, "apply", "--server-side", "-f", "-", input=federation.as_list([self._identity_secret()])
        )
        for cluster in (self.consumer, self.provider):
            self._add(f"controller-manager {cluster}", self._controller_manager(cluster))
        self._add(f"crd-replicator {self.consumer}", self._crd_replicator())
        for process in self.processes.values():
            process.start()
        self.lab.kubectl(
            self.consumer, "apply", "--server-side", "-f", "-", input=federation.as_list([self._virtual_node()])
        )
        self._add(f"vk {self.consumer}/{self.provider}", self._virtual_kubelet())
        self.processes[f"vk {self.consumer}/{self.provider}"].start()
        deadline = time.monotonic() + 180
        while federation.node_ready(self.lab, self.consumer, self.node_name) != "True":
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"Liqo's virtual node {self.node_name} never became Ready; logs in {self.lab.root / 'logs'}"
                )
            time.sleep(1)

    def _add(self, name: str, process: federation.ChildProcess) -> None:
        self.processes[name] = process

    def _tenant(self) -> dict:
        return {
            "apiVersion": "authentication.liqo.io/v1beta1",
            "kind": "Tenant",
            "metadata": {
                "name": self.consumer,
                "namespace": tenant_namespace(self.consumer),
                "labels": {REMOTE_CLUSTER_ID: self.consumer},
            },
            "spec": {"clusterID": self.consumer, "authzPolicy": "TolerateNoHandshake", "tenantCondition": "Active"},
        }

    def _identity_secret(self) -> dict:
        """The provider's credentials as Liqo's ControlPlane identity keeps them (the lab's admin kubeconfig)."""
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.secret_name,
                "namespace": tenant_namespace(self.provider),
                "labels": {REMOTE_CLUSTER_ID: self.provider, IDENTITY_TYPE: "ControlPlane"},
                "annotations": {REMOTE_TENANT_NAMESPACE: tenant_namespace(self.consumer)},
            },
            "stringData": {"kubeconfig": self.lab.kubeconfig(self.provider).read_text()},
        }

    def _virtual_node(self) -> dict:
        """What liqoctl/the webhook would write, by hand: the Deployment at 0 replicas (the kubelet runs here)."""
        selector = {"app.kubernetes.io/name": "virtual-kubelet", "liqo.io/virtual-node": self.node_name}
        # The provider's whole capacity, as the virtual node Catamaran's provider offers has.
        nodes = self.lab.recorded_config().cluster(self.provider).nodes
        pods = sum(int(node.allocatable.get("pods", 110)) for node in nodes)
        return {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VirtualNode",
            "metadata": {
                "name": self.node_name,
                "namespace": tenant_namespace(self.provider),
                "labels": {REMOTE_CLUSTER_ID: self.provider},
            },
            "spec": {
                "clusterID": self.provider,
                "createNode": True,
                "disableNetworkCheck": True,
                "kubeconfigSecretRef": {"name": self.secret_name},
                "labels": {**NODE_TYPE, REMOTE_CLUSTER_ID: self.provider},
                "resourceQuota": {"hard": {"cpu": "3000", "memory": "12Ti", "pods": str(pods)}},
                "template": {
                    "metadata": {"name": self.node_name, "namespace": tenant_namespace(self.provider)},
                    "spec": {
                        "replicas": 0,
                        "selector": {"matchLabels": selector},
                        "template": {
                            "metadata": {"labels": selector},
                            "spec": {"containers": [{"name": "virtual-kubelet", "image": "virtual-kubelet"}]},
                        },
                    },
                },
            },
        }

    def _controller_manager(self, cluster: str) -> federation.ChildProcess:
        # The chart's arguments with networking off, and addresses of its own for each of the two on this host.
        ports = [federation.free_port() for _ in range(3)]
        argv = [
            str(self.bin_dir / "liqo-controller-manager"),
            f"--cluster-id={cluster}",
            f"--liqo-namespace={LIQO_NAMESPACE}",
            "--networking-enabled=false",
            "--authentication-enabled=true",
            "--offloading-enabled=true",
            "--default-limits-enforcement=none",
            "--enable-api-server-ip-remapping=false",
            f"--metrics-address=127.0.0.1:{ports[0]}",
            f"--health-probe-address=127.0.0.1:{ports[1]}",
            f"--webhook-port={ports[2]}",
            *self.client_limits(),
        ]
        return process(
            self.lab, f"controller-manager {cluster}", argv, {"KUBECONFIG": str(self.lab.kubeconfig(cluster))}
        )

    def _crd_replicator(self) -> federation.ChildProcess:
        argv = [
            str(self.bin_dir / "crd-replicator"),
            f"--cluster-id={self.consumer}",
            f"--metrics-address=127.0.0.1:{federation.free_port()}",
            *self.client_limits(),
        ]
        return process(
            self.lab, f"crd-replicator {self.consumer}", argv, {"KUBECONFIG": str(self.lab.kubeconfig(self.consumer))}
        )

    def _virtual_kubelet(self) -> federation.ChildProcess:
        namespace = tenant_namespace(self.provider)
        argv = [
            str(self.bin_dir / "virtual-kubelet"),
            f"--foreign-cluster-id={self.provider}",
            f"--home-cluster-id={self.consumer}",
            f"--nodename={self.node_name}",
            "--node-ip=127.0.0.1",
            f"--tenant-namespace={namespace}",
            f"--liqo-namespace={LIQO_NAMESPACE}",
            f"--foreign-kubeconfig-secret-name={self.secret_name}",
            "--certificate-type=self-signed",
            f"--listen-port={federation.free_port()}",
            "--metrics-enabled=true",
            f"--metrics-address=127.0.0.1:{federation.free_port()}",
            "--node-check-network=false",  # the VirtualNode's disableNetworkCheck, which the webhook would pass
            *CHART_VK_ARGS,
            *self.client_limits(),
        ]
        env = {
            "KUBECONFIG": str(self.lab.kubeconfig(self.consumer)),
            "VIRTUALNODE_NAME": self.node_name,
            "POD_NAMESPACE": namespace,
            "POD_NAME": f"{self.node_name}-bench",
        }
        return process(self.lab, f"vk {self.consumer}/{self.provider}", argv, env)

    # -- offloading ---------------------------------------------------------------------------------------

    def offload(self, namespace: str) -> str:
        """Offload `namespace` (a NamespaceOffloading as liqoctl writes it); the remote namespace's name once there."""
        self.lab.kubectl(self.consumer, "create", "namespace", namespace, check=False)
        offloading = {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "NamespaceOffloading",
            "metadata": {"name": "offloading", "namespace": namespace},
            "spec": {
                "namespaceMappingStrategy": "DefaultName",
                "podOffloadingStrategy": "LocalAndRemote",
                "clusterSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "liqo.io/type", "operator": "In", "values": ["virtual-node"]}]}
                    ]
                },
            },
        }
        self.lab.kubectl(self.consumer, "apply", "--server-side", "-f", "-", input=federation.as_list([offloading]))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = json.loads(
                self.lab.kubectl(
                    self.consumer, "-n", namespace, "get", "namespaceoffloading", "offloading", "-o", "json"
                ).stdout
            ).get("status", {})
            remote = status.get("remoteNamespaceName")
            ready = remote and status.get("offloadingPhase") == "Ready"
            if ready and self.lab.kubectl(self.provider, "get", "namespace", remote, check=False).returncode == 0:
                return remote
            time.sleep(1)
        raise SystemExit(f"Liqo did not offload {namespace}; logs in {self.lab.root / 'logs'}")

    # -- what timed_deployments() and the report read ------------------------------------------------------

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items() if process.process is not None}

    def cpu(self) -> dict[str, float]:
        return {name: harness.cpu_seconds(pid) for name, pid in self.pids().items()}

    def scrape(self) -> dict[str, harness.Samples]:
        # Liqo has no per-hop histograms of Catamaran's names; the hop table stays empty for it.
        return {name: {} for name in self.processes}

    def agent(self) -> federation.ChildProcess:
        return self.processes[f"vk {self.consumer}/{self.provider}"]

    def restart_agent(self) -> None:
        """The virtual kubelet killed (SIGKILL) and started again with the same arguments."""
        agent = self.agent()
        agent.kill()
        agent.start()

    def describe(self) -> list[str]:
        return [f"{name}: {' '.join(p.argv)} (log {p.log_path})" for name, p in self.processes.items()]

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            process.stop()
