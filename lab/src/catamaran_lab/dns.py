"""Cluster DNS of a lab cluster: CoreDNS as one of kwokctl's components, the `kube-dns` Service. Pure.

CoreDNS runs on the host, as the control plane does, and listens on the host end of the real node's
link: pods reach it there (they masquerade to the node's address when they leave it). The
`kube-dns` Service has the cluster DNS address every kubelet is given and a hand-made EndpointSlice
pointing at that listener, so kube-proxy on the real node carries DNS to it like to any Service.
A cluster without a real node runs no pod that could ask, so it gets no DNS.
"""

from __future__ import annotations

from pathlib import Path

from .config import CLUSTER_DNS_IP, CLUSTER_DOMAIN, ClusterSpec
from .pki import COREDNS_USER

COMPONENT = "coredns"
DNS_PORT = 53
DIR = "dns"
# Short, so names of pods that come and go resolve to their current Service endpoints at once in tests.
TTL_SECONDS = 5


def corefile(cluster: ClusterSpec, kubeconfig: Path) -> str:
    """Cluster names only: the lab has no upstream resolver, so other names fail fast instead of timing out."""
    assert cluster.real_node is not None
    return f"""\
.:{DNS_PORT} {{
    bind {cluster.real_node.host_ip}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} lab
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl {TTL_SECONDS}
    }}
    cache {TTL_SECONDS}
    loadbalance
}}
"""


def component(cluster: ClusterSpec, binary: Path, cluster_dir: Path, kwok_cluster_dir: Path) -> dict:
    """kwokctl starts, stops, logs and deletes it with the control plane. Run from kwokctl's own directory of the
    cluster, as its components are: their logs go to its `logs/`. The lab applies `manifests` itself, once the API
    server is up (kwokctl would ignore an error, such as a Service address not yet allocatable)."""
    return {
        "name": COMPONENT,
        "binary": str(binary),
        "args": ["-conf", str(cluster_dir / DIR / "Corefile")],
        "workDir": str(kwok_cluster_dir),
    }


def manifests(cluster: ClusterSpec) -> list[dict]:
    assert cluster.real_node is not None
    rules = [
        {"apiGroups": [""], "resources": ["services", "endpoints", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    ports = [
        {"name": name, "port": DNS_PORT, "protocol": protocol}
        for name, protocol in (("dns", "UDP"), ("dns-tcp", "TCP"))
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": COREDNS_USER},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": COREDNS_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {
                "clusterIP": CLUSTER_DNS_IP,
                "ports": ports,
            },
        },
        cluster.host_endpoints("kube-dns", ports),
    ]
