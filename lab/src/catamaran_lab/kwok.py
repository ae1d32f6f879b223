"""kwokctl configuration for one lab cluster (pure: returns YAML documents)."""

from __future__ import annotations

from pathlib import Path

from .config import MANAGED_NODE_LABEL, ClusterSpec

CONFIG_GROUP = "config.kwok.x-k8s.io/v1alpha1"
KWOK_GROUP = "kwok.x-k8s.io/v1alpha1"

# How long a node may go without a heartbeat before it turns Unknown. Longer than the API server
# outages the fault tests cause (~30 s): after such an outage every node's last heartbeat is that old,
# and pods the controller manager then marks not Ready stay so on kwok nodes (kwok never re-readies
# them). Well above kwok's, the kubelets' and the virtual kubelet's ~10 s renewals.
NODE_MONITOR_GRACE_MS = 60_000
NODE_MONITOR_PERIOD_MS = 2_000


def kube_apiserver_args(cluster: ClusterSpec, pki_dir: Path) -> list[dict]:
    """Reaching kubelets by address with a client certificate; with a real node, being reached from it."""
    args = [
        # Node names resolve nowhere in the lab: dial the addresses kubelets report.
        {"key": "kubelet-preferred-address-types", "value": "InternalIP,ExternalIP,Hostname"},
        # Without a client certificate a real kubelet sees system:anonymous and refuses logs and exec.
        {"key": "kubelet-client-certificate", "value": str(pki_dir / "admin.crt")},
        {"key": "kubelet-client-key", "value": str(pki_dir / "admin.key")},
    ]
    if cluster.real_node:
        # Pods and the kubelet live in the node's network namespace and reach the host end of its link;
        # the `kubernetes` Service points there too, so in-cluster clients work from real pods.
        args += [
            {"key": "bind-address", "value": "0.0.0.0", "override": True},
            {"key": "advertise-address", "value": cluster.real_node.host_ip},
        ]
    return args


def kwokctl_documents(cluster: ClusterSpec, binaries: dict[str, Path], cluster_dir: Path, pki_dir: Path) -> list[dict]:
    """Everything kwokctl needs to start the cluster without downloading anything."""
    ports = cluster.ports
    cert_sans = [cluster.real_node.host_ip] if cluster.real_node else []
    return [
        {
            "apiVersion": CONFIG_GROUP,
            "kind": "KwokctlConfiguration",
            "options": {
                "runtime": "binary",
                "bindAddress": "127.0.0.1",
                "kubeApiserverPort": ports["kube-apiserver"],
                "etcdPort": ports["etcd"],
                "etcdPeerPort": ports["etcd-peer"],
                "kubeControllerManagerPort": ports["kube-controller-manager"],
                "kubeSchedulerPort": ports["kube-scheduler"],
                "kwokControllerPort": ports["kwok-controller"],
                "securePort": True,
                "kubeAuthorization": True,
                "kubeAdmission": True,
                "kubeApiserverBinary": str(binaries["kube-apiserver"]),
                "kubeControllerManagerBinary": str(binaries["kube-controller-manager"]),
                "kubeSchedulerBinary": str(binaries["kube-scheduler"]),
                "kubectlBinary": str(binaries["kubectl"]),
                "etcdBinary": str(binaries["etcd"]),
                "kwokControllerBinary": str(binaries["kwok"]),
                "kubeControllerManagerNodeMonitorPeriodMilliseconds": NODE_MONITOR_PERIOD_MS,
                "kubeControllerManagerNodeMonitorGracePeriodMilliseconds": NODE_MONITOR_GRACE_MS,
                "nodeLeaseDurationSeconds": 40,
                # kwokctl multiplies every heartbeat setting by this factor, 5 unless told: the grace
                # period above would silently become 150 s and the lease 200 s.
                "heartbeatFactor": 1,
                "kubeApiserverCertSANs": cert_sans,
            },
            "componentsPatches": [
                {
                    # kwokctl's binary runtime hard-codes --manage-all-nodes=true; that would also
                    # drive Catamaran's virtual nodes and fake every offloading test.
                    "name": "kwok-controller",
                    "extraArgs": [
                        {"key": "manage-all-nodes", "value": "false", "override": True},
                        {"key": "manage-nodes-with-label-selector", "value": f"{MANAGED_NODE_LABEL}=true"},
                        {"key": "node-ip", "value": "127.0.0.1", "override": True},
                    ],
                },
                {"name": "kube-apiserver", "extraArgs": kube_apiserver_args(cluster, pki_dir)},
                # One instance each: without leader election they survive an API server outage
                # (fault tests stop it) instead of exiting when their lease cannot be renewed.
                {"name": "kube-controller-manager", "extraArgs": [{"key": "leader-elect", "value": "false"}]},
                {"name": "kube-scheduler", "extraArgs": [{"key": "leader-elect", "value": "false"}]},
            ],
        },
        {
            "apiVersion": KWOK_GROUP,
            "kind": "ClusterLogs",
            "metadata": {"name": "lab-logs"},
            "spec": {"logs": [{"containers": [], "logsFile": str(cluster_dir / "container.log"), "follow": True}]},
        },
        {
            "apiVersion": KWOK_GROUP,
            "kind": "ClusterExec",
            "metadata": {"name": "lab-exec"},
            "spec": {"execs": [{"containers": [], "local": {"workDir": str(cluster_dir / "exec")}}]},
        },
    ]


def container_log_content(cluster: ClusterSpec) -> str:
    """What `kubectl logs` prints for any pod of this cluster."""
    return f"catamaran-lab {cluster.name}: container started\ncatamaran-lab {cluster.name}: serving\n"


def container_log_file(cluster: ClusterSpec) -> str:
    """The same lines in the CRI log format kwok's kubelet server parses (time, stream, tag, message)."""
    lines = container_log_content(cluster).splitlines()
    return "".join(f"2026-01-01T00:00:{second:02d}.000000000Z stdout F {line}\n" for second, line in enumerate(lines))
