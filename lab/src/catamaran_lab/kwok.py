"""kwokctl configuration for one lab cluster (pure: returns YAML documents)."""

from __future__ import annotations

import base64
from pathlib import Path

from . import dns
from .config import MANAGED_NODE_LABEL, ClusterSpec, ControlPlaneSettings
from .pki import (
    FRONT_PROXY_CLIENT,
    KUBE_APISERVER_KUBELET_CLIENT,
    KUBE_ROUTER_USER,
    METRICS_SERVER_KUBELET_CLIENT,
    ClusterPKI,
)

CONFIG_GROUP = "config.kwok.x-k8s.io/v1alpha1"
KWOK_GROUP = "kwok.x-k8s.io/v1alpha1"

# How long a node may go without a heartbeat before it turns Unknown. Longer than the API server
# outages the fault tests cause (~30 s): after such an outage every node's last heartbeat is that old,
# and pods the controller manager then marks not Ready stay so on kwok nodes (kwok never re-readies
# them). Well above kwok's, the kubelets' and the virtual kubelet's ~10 s renewals.
NODE_MONITOR_GRACE_MS = 60_000
NODE_MONITOR_PERIOD_MS = 2_000


# kwok's resource metrics emulation: every container of a pod on a fake node uses this much, unless the
# pod says otherwise in these annotations (kwok's own convention). Nodes report the sum of their pods
# plus a constant system share: metrics-server drops a node whose CPU or memory reads zero.
POD_CPU_USAGE = "5m"
POD_MEMORY_USAGE = "16Mi"
NODE_SYSTEM_CPU_CORES = 0.05
NODE_SYSTEM_MEMORY_BYTES = 256 * 1024**2
USAGE_CPU_ANNOTATION = "kwok.x-k8s.io/usage-cpu"
USAGE_MEMORY_ANNOTATION = "kwok.x-k8s.io/usage-memory"
# How often metrics-server scrapes every kubelet (kwokctl's setting); the metrics API needs two scrapes
# of a node before it reports its CPU.
METRICS_RESOLUTION = "15s"
METRICS_APISERVICE = "v1beta1.metrics.k8s.io"
METRICS_SERVER_MANIFEST_DIR = "metrics-server"


def front_proxy_trust(pki: ClusterPKI) -> list[dict]:
    """Who may pass a caller's identity in headers: the aggregator, as front-proxy-client certified by the cluster CA.

    The API server and metrics-server both take it from here. Given as flags, metrics-server never looks it up in
    the cluster at start: that lookup is fatal, and a start on a slow machine can come before the API server serves.
    """
    return [
        {"key": "requestheader-client-ca-file", "value": str(pki.ca_cert)},
        {"key": "requestheader-allowed-names", "value": FRONT_PROXY_CLIENT},
        {"key": "requestheader-username-headers", "value": "X-Remote-User"},
        {"key": "requestheader-group-headers", "value": "X-Remote-Group"},
        {"key": "requestheader-extra-headers-prefix", "value": "X-Remote-Extra-"},
    ]


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
        # The aggregator (metrics.k8s.io) proxies as front-proxy-client and passes the caller in headers;
        # aggregated API servers trust those headers only from that name, certified by the cluster CA.
        {"key": "proxy-client-cert-file", "value": str(pki.cert("front-proxy-client")), "override": True},
        {"key": "proxy-client-key-file", "value": str(pki.key("front-proxy-client")), "override": True},
        *front_proxy_trust(pki),
    ]
    if cluster.real_node:
        # Pods and the kubelet live in the node's network namespace and reach the host end of its link;
        # the `kubernetes` Service points there too, so in-cluster clients work from real pods.
        args += [
            {"key": "bind-address", "value": "0.0.0.0", "override": True},
            {"key": "advertise-address", "value": cluster.real_node.host_ip},
            # Webhooks and aggregated APIs served by pods (Catamaran in deployment mode) are dialled at their
            # endpoints, which the host routes to, instead of ClusterIPs, which nothing on the host serves.
            {"key": "enable-aggregator-routing", "value": "true"},
        ]
    return args


def metrics_server_args(cluster: ClusterSpec, pki: ClusterPKI) -> list[dict]:
    """kwokctl's metrics-server, made to verify kubelets and to scrape them as its own identity.

    kwokctl passes --kubelet-insecure-tls (without a value, so no override matches it); a later
    `=false` wins. The API-facing kubeconfig stays kwokctl's admin one: it is read before the lab can
    create any RBAC, and only the kubelet-facing identity is seen by kubelets.
    """
    args = [
        {"key": "kubelet-insecure-tls", "value": "false"},
        {"key": "kubelet-certificate-authority", "value": str(pki.ca_cert)},
        {"key": "kubelet-client-certificate", "value": str(pki.cert("metrics-server-kubelet-client"))},
        {"key": "kubelet-client-key", "value": str(pki.key("metrics-server-kubelet-client"))},
        {"key": "metric-resolution", "value": METRICS_RESOLUTION, "override": True},
        # Serving as metrics-server.kube-system.svc, so the aggregator verifies it with the APIService's caBundle.
        {"key": "tls-cert-file", "value": str(pki.cert("metrics-server")), "override": True},
        {"key": "tls-private-key-file", "value": str(pki.key("metrics-server")), "override": True},
        # Its callers' CAs as flags, not looked up in the cluster (front_proxy_trust says why).
        {"key": "client-ca-file", "value": str(pki.ca_cert)},
        *front_proxy_trust(pki),
    ]
    if cluster.real_node:
        # Reached at the real node link's host end, where its Service's endpoint points (see metrics_server_endpoint).
        args.append({"key": "bind-address", "value": "0.0.0.0", "override": True})
    return args


def metrics_server_endpoint(cluster: ClusterSpec) -> list[dict]:
    """metrics-server's Service as endpoints, for an API server with aggregator routing (a cluster with a real node).

    The endpoint resolver refuses the ExternalName Service kwokctl makes (127.0.0.1, which no endpoint may name
    either); this one keeps its name and the APIService's port and points at the host end of the real node's link.
    """
    port = cluster.ports["metrics-server"]
    labels = {"k8s-app": "metrics-server"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "metrics-server", "namespace": "kube-system", "labels": labels},
            "spec": {"type": "ClusterIP", "ports": [{"name": "https", "port": port, "targetPort": port}]},
        },
        cluster.host_endpoints("metrics-server", [{"name": "https", "port": port, "protocol": "TCP"}]),
    ]


def client_rate_args(control_plane: ControlPlaneSettings) -> list[dict]:
    return [
        {"key": "kube-api-qps", "value": str(control_plane.client_qps)},
        {"key": "kube-api-burst", "value": str(control_plane.client_burst)},
    ]


def kwokctl_documents(
    cluster: ClusterSpec,
    binaries: dict[str, Path],
    cluster_dir: Path,
    pki_dir: Path,
    control_plane: ControlPlaneSettings | None = None,
) -> list[dict]:
    """Everything kwokctl needs to start the cluster without downloading anything."""
    control_plane = control_plane or ControlPlaneSettings()
    syncs = str(control_plane.concurrent_syncs)
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
                "metricsServerPort": ports["metrics-server"],
                "securePort": True,
                "kubeAuthorization": True,
                "kubeAdmission": True,
                "kubeApiserverBinary": str(binaries["kube-apiserver"]),
                "kubeControllerManagerBinary": str(binaries["kube-controller-manager"]),
                "kubeSchedulerBinary": str(binaries["kube-scheduler"]),
                "kubectlBinary": str(binaries["kubectl"]),
                "etcdBinary": str(binaries["etcd"]),
                "kwokControllerBinary": str(binaries["kwok"]),
                "enableMetricsServer": True,
                "metricsServerBinary": str(binaries["metrics-server"]),
                # A local kustomization (the APIService and its Service): kwokctl would fetch the release's
                # components.yaml from GitHub otherwise.
                "metricsServerManifests": [str(cluster_dir / METRICS_SERVER_MANIFEST_DIR)],
                "kubeControllerManagerNodeMonitorPeriodMilliseconds": NODE_MONITOR_PERIOD_MS,
                "kubeControllerManagerNodeMonitorGracePeriodMilliseconds": NODE_MONITOR_GRACE_MS,
                "nodeLeaseDurationSeconds": 40,
                # kwokctl multiplies every heartbeat setting by this factor, 5 unless told: the grace
                # period above would silently become 150 s and the lease 200 s.
                "heartbeatFactor": 1,
            },
            # Components of the lab's own, started and stopped with kwokctl's.
            "components": (
                [dns.component(cluster, binaries["coredns"], cluster_dir, pki_dir.parent)] if cluster.real_node else []
            ),
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
                        *client_rate_args(control_plane),
                        {"key": "concurrent-replicaset-syncs", "value": syncs},
                        {"key": "concurrent-deployment-syncs", "value": syncs},
                        {"key": "concurrent-statefulset-syncs", "value": syncs},
                        {"key": "concurrent-gc-syncs", "value": syncs},
                    ],
                },
                {
                    "name": "kube-scheduler",
                    # kwokctl passes no --config, so these flags are the scheduler's client settings.
                    "extraArgs": [{"key": "leader-elect", "value": "false"}, *client_rate_args(control_plane)],
                },
                {"name": "metrics-server", "extraArgs": metrics_server_args(cluster, pki)},
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
        *metrics_emulation_documents(),
    ]


def metrics_emulation_documents() -> list[dict]:
    """kwok's resource metrics for fake nodes: a constant usage per container, served per node.

    The Metric is kwok's `kustomize/metrics/resource` (what a kubelet's /metrics/resource reports);
    kwok serves it at /metrics/nodes/<node>/metrics/resource, the path the nodes' annotation names.
    """

    def usage(annotation: str, default: str) -> dict:
        return {
            "expression": f'"{annotation}" in pod.metadata.annotations'
            f' ? Quantity(pod.metadata.annotations["{annotation}"]) : Quantity("{default}")'
        }

    pod_labels = [
        {"name": "namespace", "value": "pod.metadata.namespace"},
        {"name": "pod", "value": "pod.metadata.name"},
    ]
    container_labels = [{"name": "container", "value": "container.name"}, *pod_labels]

    def metric(name: str, dimension: str, kind: str, value: str, labels: list | None = None) -> dict:
        entry = {"name": name, "dimension": dimension, "kind": kind, "help": name, "value": value}
        if labels:
            entry["labels"] = labels
        return entry

    return [
        {
            "apiVersion": KWOK_GROUP,
            "kind": "ClusterResourceUsage",
            "metadata": {"name": "lab-usage"},
            "spec": {
                "usages": [
                    {
                        "usage": {
                            "cpu": usage(USAGE_CPU_ANNOTATION, POD_CPU_USAGE),
                            "memory": usage(USAGE_MEMORY_ANNOTATION, POD_MEMORY_USAGE),
                        }
                    }
                ]
            },
        },
        {
            "apiVersion": KWOK_GROUP,
            "kind": "Metric",
            "metadata": {"name": "lab-metrics-resource"},
            "spec": {
                "path": "/metrics/nodes/{nodeName}/metrics/resource",
                "metrics": [
                    metric("scrape_error", "node", "gauge", "0"),
                    metric("container_start_time_seconds", "container", "gauge", "pod.SinceSecond()", container_labels),
                    metric(
                        "container_cpu_usage_seconds_total",
                        "container",
                        "counter",
                        'pod.CumulativeUsage("cpu", container.name)',
                        container_labels,
                    ),
                    metric(
                        "container_memory_working_set_bytes",
                        "container",
                        "gauge",
                        'pod.Usage("memory", container.name)',
                        container_labels,
                    ),
                    metric("pod_cpu_usage_seconds_total", "pod", "counter", 'pod.CumulativeUsage("cpu")', pod_labels),
                    metric("pod_memory_working_set_bytes", "pod", "gauge", 'pod.Usage("memory")', pod_labels),
                    metric(
                        "node_cpu_usage_seconds_total",
                        "node",
                        "counter",
                        f'node.CumulativeUsage("cpu") + {NODE_SYSTEM_CPU_CORES} * node.SinceSecond()',
                    ),
                    metric(
                        "node_memory_working_set_bytes",
                        "node",
                        "gauge",
                        f'node.Usage("memory") + {float(NODE_SYSTEM_MEMORY_BYTES)}',
                    ),
                ],
            },
        },
    ]


def metrics_server_manifests(ca_pem: bytes) -> list[dict]:
    """What kwokctl applies for its metrics-server: the APIService and the Service it names.

    kwokctl sets the APIService's port and turns the Service into an ExternalName for 127.0.0.1; the
    aggregator verifies metrics-server's certificate (metrics-server.kube-system.svc) with the cluster CA.
    Only these kinds survive kwokctl's rewriting, so RBAC is applied by the lab (`lab_rbac`).
    """
    labels = {"k8s-app": "metrics-server"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "metrics-server", "namespace": "kube-system", "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "https", "port": 443, "targetPort": "https"}]},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": METRICS_APISERVICE, "labels": labels},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "caBundle": base64.b64encode(ca_pem).decode(),
                "service": {"name": "metrics-server", "namespace": "kube-system"},
            },
        },
    ]


def lab_rbac() -> list[dict]:
    """The lab's identities' rights: kubelet API access for the API server, metrics scraping for metrics-server,
    and what kube-router's network policy controller watches on the real nodes."""
    rbac = "rbac.authorization.k8s.io/v1"
    aggregated = {
        "rbac.authorization.k8s.io/aggregate-to-admin": "true",
        "rbac.authorization.k8s.io/aggregate-to-edit": "true",
        "rbac.authorization.k8s.io/aggregate-to-view": "true",
    }

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
        # metrics-server's upstream role (components.yaml), bound to its kubelet-facing identity.
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": "system:metrics-server", "labels": {"k8s-app": "metrics-server"}},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
            ],
        },
        user_binding("system:metrics-server", "system:metrics-server", METRICS_SERVER_KUBELET_CLIENT),
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {
                "name": "system:aggregated-metrics-reader",
                "labels": {"k8s-app": "metrics-server", **aggregated},
            },
            "rules": [
                {"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}
            ],
        },
        # kube-router firewall-only (realnode.py) starts informers on all of these and writes nothing.
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": KUBE_ROUTER_USER},
            "rules": [
                {"apiGroups": [""], "resources": list(KUBE_ROUTER_CORE_RESOURCES), "verbs": list(READ)},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": list(READ)},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": list(READ)},
            ],
        },
        user_binding(KUBE_ROUTER_USER, KUBE_ROUTER_USER, KUBE_ROUTER_USER),
    ]


READ = ("get", "list", "watch")
KUBE_ROUTER_CORE_RESOURCES = ("namespaces", "pods", "services", "nodes", "endpoints")


def container_log_content(cluster: ClusterSpec) -> str:
    """What `kubectl logs` prints for any pod on a fake node of this cluster (kwok follows the file for `-f`)."""
    lines = ("container started", "listening on :8080", "ready", "GET /healthz 200", "serving")
    return "".join(f"catamaran-lab {cluster.name}: {line}\n" for line in lines)


def container_log_file(cluster: ClusterSpec) -> str:
    """The same lines in the CRI log format kwok's kubelet server parses (time, stream, tag, message)."""
    lines = container_log_content(cluster).splitlines()
    return "".join(f"2026-01-01T00:00:{second:02d}.000000000Z stdout F {line}\n" for second, line in enumerate(lines))
