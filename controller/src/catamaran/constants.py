"""Names shared by every part of Catamaran (DESIGN.md section 2). Change them here only."""

SYSTEM_NAMESPACE = "catamaran-system"
TENANT_NAMESPACE_PREFIX = "catamaran-tenant-"
TENANT_SERVICE_ACCOUNT = "catamaran-consumer"
VIRTUAL_NODE_PREFIX = "catamaran-"
# + provider id: the service account (and Deployment) of one virtual kubelet in deployment mode.
VK_SERVICE_ACCOUNT_PREFIX = "catamaran-vk-"

CORE_GROUP = "core.catamaran.io"
OFFLOADING_GROUP = "offloading.catamaran.io"
VERSION = "v1alpha1"

LABEL_TYPE = "catamaran.io/type"
TYPE_VIRTUAL_NODE = "virtual-node"
LABEL_REMOTE_CLUSTER_ID = "catamaran.io/remote-cluster-id"
LABEL_ORIGIN_CLUSTER_ID = "catamaran.io/origin-cluster-id"
LABEL_DESTINATION_CLUSTER_ID = "catamaran.io/destination-cluster-id"
LABEL_MANAGED_BY = "catamaran.io/managed-by"
LABEL_TENANT = "catamaran.io/tenant"

MANAGED_BY_SHADOWPOD = "shadowpod"
MANAGED_BY_CATAMARAN = "catamaran"
MANAGED_BY_REFLECTION = "reflection"

ANNOTATION_LOCAL_POD_UID = "catamaran.io/local-pod-uid"
ANNOTATION_TWIN_OF = "catamaran.io/twin-of"
# Reflection policy, per object: skipped under a DenyList policy, chosen under an AllowList one.
ANNOTATION_SKIP_REFLECTION = "catamaran.io/skip-reflection"
ANNOTATION_ALLOW_REFLECTION = "catamaran.io/allow-reflection"
# On reflected copies: the local object's uid, and for token Secrets the pod they serve.
ANNOTATION_LOCAL_UID = "catamaran.io/local-uid"
ANNOTATION_TOKEN_FOR_POD = "catamaran.io/token-for-pod"
# Every namespace's CA bundle; in a twin the consumer's goes by another name, the provider keeps its own.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
CONSUMER_ROOT_CA_CONFIGMAP = "catamaran-root-ca.crt"

VIRTUAL_NODE_TAINT_KEY = "virtual-node.catamaran.io/not-allowed"
VIRTUAL_NODE_TAINT = {"key": VIRTUAL_NODE_TAINT_KEY, "value": "true", "effect": "NoExecute"}

NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_DURATION_SECONDS = 40
NODE_LEASE_RENEW_SECONDS = 10

TWIN_FINALIZER = "catamaran.io/twin-namespace"
RESOURCE_OFFER_NAME = "resources"
TENANT_WORKLOAD_CLUSTER_ROLE = "catamaran-tenant-workloads"
TENANT_CLUSTER_ROLE = "catamaran-tenant"
# In each tenant namespace on a provider: the tenant's current bound, expiring token, minted and renewed by the
# provider's manager (key `token`), and the object every such token is bound to (deleting it revokes them all).
TENANT_CREDENTIAL_SECRET = "catamaran-tenant-credential"
TENANT_TOKEN_BINDING_SECRET = "catamaran-tenant-token-binding"
# The tenant's terms on the provider, in the spec of its ResourceOffer (written by the provider's side of the
# peering, read-only for the tenant): Pod Security level, share of the selected nodes, credential lifetime.
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
DEFAULT_POD_SECURITY_LEVEL = "restricted"
DEFAULT_SHARING_PERCENTAGE = 90
DEFAULT_CREDENTIAL_LIFETIME_SECONDS = 86400
MIN_CREDENTIAL_LIFETIME_SECONDS = 600  # the API server's floor for TokenRequest expirationSeconds
# On a consumer: Secrets and service-account tokens, bound to the virtual kubelets per offloaded namespace.
VK_REFLECTION_ROLE = "catamaran-vk-reflection"
# On a consumer: the storage class whose claims the virtual kubelets provision on their providers.
VIRTUAL_STORAGE_CLASS = "catamaran"
VIRTUAL_STORAGE_PROVISIONER = "catamaran.io/virtual-storage"
LABEL_VIRTUAL_VOLUME_NODE = "catamaran.io/virtual-node"


def tenant_namespace(consumer_cluster_id: str) -> str:
    return f"{TENANT_NAMESPACE_PREFIX}{consumer_cluster_id}"


def virtual_node_name(provider_cluster_id: str) -> str:
    return f"{VIRTUAL_NODE_PREFIX}{provider_cluster_id}"


def default_twin_namespace(local_namespace: str, consumer_cluster_id: str) -> str:
    """The DefaultName mapping strategy: unique per consumer on a shared provider."""
    return f"{local_namespace}-{consumer_cluster_id}"
