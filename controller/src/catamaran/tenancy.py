"""RBAC and namespaces that make a consumer a tenant of a provider (least privilege). Pure manifests.

The consumer's credential can touch only its tenant namespace and the twin namespaces the
provider's manager made for it; it holds no cluster-wide rights.
"""

from __future__ import annotations

from .constants import (
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_TENANT,
    MANAGED_BY_CATAMARAN,
    OFFLOADING_GROUP,
    TENANT_CLUSTER_ROLE,
    TENANT_SERVICE_ACCOUNT,
    TENANT_WORKLOAD_CLUSTER_ROLE,
    tenant_namespace,
)

READ = ["get", "list", "watch"]
WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]
# Exactly what resource reflection does with its copies: informers, create, update (with the
# resourceVersion it read), delete (with a UID precondition). No patch, no deletecollection.
REFLECT = ["get", "list", "watch", "create", "update", "delete"]


def provider_cluster_roles() -> list[dict]:
    """Roles bound per namespace: one in the tenant namespace, one in each twin namespace."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": TENANT_CLUSTER_ROLE, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
            "rules": [
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["twinnamespaces"], "verbs": WRITE},
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["resourceoffers"], "verbs": READ},
                {"apiGroups": [""], "resources": ["events"], "verbs": READ},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": TENANT_WORKLOAD_CLUSTER_ROLE,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
            },
            "rules": [
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["shadowpods"], "verbs": WRITE},
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["shadowpods/status"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "events"], "verbs": READ},
                # The virtual kubelet's API (vk/kubelet): logs, streams (WebSocket upgrades are GETs that
                # also need create) and pod metrics for metrics-server on the consumer.
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["pods/exec", "pods/attach", "pods/portforward"],
                    "verbs": ["get", "create"],
                },
                {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]},
                # Resource reflection (vk/reflection): the consumer's objects copied into this twin.
                {
                    "apiGroups": [""],
                    "resources": ["configmaps", "secrets", "services", "persistentvolumeclaims"],
                    "verbs": REFLECT,
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": REFLECT},
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": REFLECT},
            ],
        },
    ]


def tenant_manifests(consumer_id: str) -> list[dict]:
    """Tenant namespace, its ServiceAccount, token Secret and RoleBinding, on the provider."""
    namespace = tenant_namespace(consumer_id)
    labels = {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN, LABEL_ORIGIN_CLUSTER_ID: consumer_id}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {**labels, LABEL_TENANT: "true"}},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": TENANT_SERVICE_ACCOUNT, "namespace": namespace, "labels": labels},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": f"{TENANT_SERVICE_ACCOUNT}-token",
                "namespace": namespace,
                "labels": labels,
                "annotations": {"kubernetes.io/service-account.name": TENANT_SERVICE_ACCOUNT},
            },
        },
        tenant_role_binding(namespace, namespace, TENANT_CLUSTER_ROLE),
    ]


def tenant_role_binding(namespace: str, tenant_ns: str, cluster_role: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": cluster_role,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT_SERVICE_ACCOUNT, "namespace": tenant_ns}],
    }


def tenant_kubeconfig(server: str, ca_data_b64: str, token: str, provider_id: str, consumer_id: str) -> dict:
    """The credential the consumer stores: the tenant token, defaulting to the tenant namespace."""
    user = f"{consumer_id}-on-{provider_id}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": provider_id, "cluster": {"server": server, "certificate-authority-data": ca_data_b64}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": provider_id,
                "context": {"cluster": provider_id, "user": user, "namespace": tenant_namespace(consumer_id)},
            }
        ],
        "current-context": provider_id,
    }
