"""kwokctl configuration for one lab cluster (pure: returns YAML documents)."""

from __future__ import annotations

from pathlib import Path

from .config import MANAGED_NODE_LABEL, ClusterSpec
from .pki import KUBE_APISERVER_KUBELET_CLIENT, ClusterPKI

CONFIG_GROUP = "config.kwok.x-k8s.io/v1alpha1"
KWOK_GROUP = "kwok.x-k8s.io/v1alpha1"

# How long a node may go without a heartbeat before it turns Unknown. Longer than the API server
# outages the fault tests cause (~30 s): after such an outage every node's last heartbeat is that old,
# and pods the controller manager then marks not Ready stay so on kwok nodes (kwok never re-readies
# them). Well above kwok's, the kubelets' and the virtual kubelet's ~10 s renewals.
NODE_MONITOR_GRACE_MS = 60_000
NODE_MONITOR_PERIOD_MS = 2_000


def kube_apiserver_args(cluster: ClusterSpec, pki: ClusterPKI) -> list[dict]:
    """Reaching kubelets by address, verifying them, as a client they authorize; with a real node, being reached."""
    args = [
        # Node names resolve nowhere in the lab: dial the addresses kubelets report.
        {"key": "kubelet-preferred-address-types", "value": "InternalIP,ExternalIP,Hostname"},
        # Every kubelet endpoint (kwok's, the real node's, virtual kubelets') must serve a certificate from
        # the cluster CA valid for the address dialled; without this flag the API server trusts any.
        {"key": "kubelet-certificate-authority", "value": str(pki.ca_cert)},
        # Its own identity towards kubelets, bound to system:kubelet-api-admin (as kubeadm does), not an admin.
        {"key": "kubelet-client-certificate", "value": str(pki.cert("kube-apiserver-kubelet-client"))},
        {"key": "kubelet-client-key", "value": str(pki.key("kube-apiserver-kubelet-client"))},
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
    pki = ClusterPKI(pki_dir)
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
                        # Fake nodes' kubelet endpoint (127.0.0.1:<kwok port>) serves a certificate from the
                        # cluster CA for 127.0.0.1, instead of kwokctl's admin certificate.
                        {"key": "tls-cert-file", "value": str(pki.cert("kwok-kubelet-serving")), "override": True},
                        {
                            "key": "tls-private-key-file",
                            "value": str(pki.key("kwok-kubelet-serving")),
                            "override": True,
                        },
                    ],
                },
                {"name": "kube-apiserver", "extraArgs": kube_apiserver_args(cluster, pki)},
                # One instance each: without leader election they survive an API server outage
                # (fault tests stop it) instead of exiting when their lease cannot be renewed.
                {
                    "name": "kube-controller-manager",
                    "extraArgs": [
                        {"key": "leader-elect", "value": "false"},
                        # Signs approved CSRs of every built-in signer (kubernetes.io/kubelet-serving among
                        # them) with the cluster CA; kwokctl sets no signing flags, so nothing was signed.
                        {"key": "cluster-signing-cert-file", "value": str(pki.ca_cert)},
                        {"key": "cluster-signing-key-file", "value": str(pki.ca_key)},
                    ],
                },
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


def lab_rbac() -> list[dict]:
    """The lab's identities' rights: kubelet API access for the API server."""
    rbac = "rbac.authorization.k8s.io/v1"

    def user_binding(name: str, role: str, user: str) -> dict:
        return {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }

    return [
        # kubeadm's way: logs, exec, port-forward, stats and metrics on every kubelet, nothing else.
        user_binding(
            "catamaran-lab:kube-apiserver-kubelet-client", "system:kubelet-api-admin", KUBE_APISERVER_KUBELET_CLIENT
        ),
    ]


def container_log_content(cluster: ClusterSpec) -> str:
    """What `kubectl logs` prints for any pod of this cluster."""
    return f"catamaran-lab {cluster.name}: container started\ncatamaran-lab {cluster.name}: serving\n"


def container_log_file(cluster: ClusterSpec) -> str:
    """The same lines in the CRI log format kwok's kubelet server parses (time, stream, tag, message)."""
    lines = container_log_content(cluster).splitlines()
    return "".join(f"2026-01-01T00:00:{second:02d}.000000000Z stdout F {line}\n" for second, line in enumerate(lines))
