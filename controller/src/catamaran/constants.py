"""Names shared by every part of Catamaran (docs/design.md §2). Change them here only."""

SYSTEM_NAMESPACE = "catamaran-system"
TENANT_NAMESPACE_PREFIX = "catamaran-tenant-"
TENANT_SERVICE_ACCOUNT = "catamaran-consumer"
VIRTUAL_NODE_PREFIX = "catamaran-"
# + provider id: the service account (and Deployment) of one virtual kubelet in deployment mode, and the Lease its
# replicas elect a leader with.
VK_SERVICE_ACCOUNT_PREFIX = "catamaran-vk-"
# The manager's and the virtual kubelet's names as API servers see them: field manager, Event source, user agent.
MANAGER_COMPONENT = "catamaran-manager"
VIRTUAL_KUBELET_COMPONENT = "catamaran-virtual-kubelet"
# A virtual node's kubelet API listens here unless told otherwise, as a kubelet does.
KUBELET_PORT = 10250
# The Lease the manager's replicas elect a leader with, in the controller namespace; the leader's pod carries the
# label (value "true"), which the Services of its servers (webhook, pod counters) select.
MANAGER_LEASE = MANAGER_COMPONENT
LEADER_LABEL = "catamaran.io/leader"

CORE_GROUP = "core.catamaran.io"
OFFLOADING_GROUP = "offloading.catamaran.io"
VERSION = "v1alpha1"
# A provider's manager serves its kubelets' CPU and memory counters of a twin's pods to that twin's tenant, as an
# aggregated API (provider/counters.py); the consumer's virtual kubelet reads them (vk/kubelet/stats.py).
COUNTERS_GROUP = "metrics.catamaran.io"
COUNTERS_RESOURCE = "podcounters"
COUNTERS_API_SERVICE = f"{VERSION}.{COUNTERS_GROUP}"
COUNTERS_SERVICE = "catamaran-counters"

LABEL_TYPE = "catamaran.io/type"
TYPE_VIRTUAL_NODE = "virtual-node"
LABEL_REMOTE_CLUSTER_ID = "catamaran.io/remote-cluster-id"
LABEL_ORIGIN_CLUSTER_ID = "catamaran.io/origin-cluster-id"
LABEL_DESTINATION_CLUSTER_ID = "catamaran.io/destination-cluster-id"
LABEL_MANAGED_BY = "catamaran.io/managed-by"
LABEL_TENANT = "catamaran.io/tenant"
# On a NamespaceOffloading a NamespaceOffloadingPolicy made: the policy's name.
LABEL_OFFLOADING_POLICY = "catamaran.io/offloading-policy"
# A node pool of a peering (docs/design.md, "Node pools"): on its virtual node, on the ShadowPods of the pods bound
# there and on the provider's pods made from them. Its name is a DNS-1123 label of at most MAX_POOL_NAME.
LABEL_POOL = "catamaran.io/pool"
MAX_POOL_NAME = 20
MAX_POOLS = 16  # per peering: each is a virtual node, a Lease and a pod watch on the consumer

MANAGED_BY_SHADOWPOD = "shadowpod"
MANAGED_BY_CATAMARAN = "catamaran"
# The Kubernetes labels of an EndpointSlice: its Service, and the controller owning it (the API server's own
# EndpointSlice controller leaves slices with another manager alone).
ENDPOINT_SLICE_SERVICE_LABEL = "kubernetes.io/service-name"
ENDPOINT_SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# The manager writing the pod counters' EndpointSlice for an out-of-cluster manager (provider/counters.py).
COUNTERS_SLICE_MANAGER = "counters.catamaran.io"
MANAGED_BY_REFLECTION = "reflection"

# A pod in one of these phases runs nothing any more (its IP may be another pod's by now).
TERMINAL_PHASES = ("Succeeded", "Failed")

ANNOTATION_LOCAL_POD_UID = "catamaran.io/local-pod-uid"
# On a ShadowPod being deleted: the local pod's grace period when it is not the pod's own (kubectl delete
# --grace-period, a second delete cutting it short). A custom resource keeps no grace period of its own.
ANNOTATION_DELETION_GRACE = "catamaran.io/deletion-grace-period-seconds"
ANNOTATION_TWIN_OF = "catamaran.io/twin-of"
# On a twin namespace, written by the provider's manager when it creates it: the consumer namespace it extends (its
# first TwinNamespace's originNamespace). A later TwinNamespace of the same name extending another one never adopts
# it, nor removes it.
ANNOTATION_ORIGIN_NAMESPACE = "catamaran.io/origin-namespace"
# On a ShadowPod: the consumer namespace of its local pod (its twin's origin; the provider refuses any other).
ANNOTATION_LOCAL_NAMESPACE = "catamaran.io/local-namespace"
# On a ShadowPod: where the virtual kubelet reads its pod's status. `pod`: from the remote Pod itself, so the manager
# writes the ShadowPod's status only with what it decides (refusals, recreations, the end). Without it (releases
# before), the manager copies the Pod's status into the ShadowPod's.
ANNOTATION_STATUS_SOURCE = "catamaran.io/status-source"
STATUS_SOURCE_POD = "pod"
# On a remote Pod, written by the manager as it creates it: how many pods of its ShadowPod were gone before it.
ANNOTATION_RECREATIONS = "catamaran.io/recreations"
# Reflection policy, per object: skipped under a DenyList policy, chosen under an AllowList one.
ANNOTATION_SKIP_REFLECTION = "catamaran.io/skip-reflection"
ANNOTATION_ALLOW_REFLECTION = "catamaran.io/allow-reflection"
# On reflected copies: the local object's uid, and for token Secrets the service account (or, written by earlier
# releases, the pod) they serve; on a consumer's token binding Secret, its service account.
ANNOTATION_LOCAL_UID = "catamaran.io/local-uid"
ANNOTATION_TOKEN_FOR_POD = "catamaran.io/token-for-pod"
ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT = "catamaran.io/token-for-service-account"
# Which API server an offloaded pod's in-cluster clients reach: the consumer's (home, with the consumer's token),
# the provider's (provider, with a token of the twin's default ServiceAccount) or none (disabled).
ANNOTATION_API_SERVER_ACCESS = "catamaran.io/api-server-access"
API_SERVER_ACCESS_HOME, API_SERVER_ACCESS_PROVIDER, API_SERVER_ACCESS_DISABLED = "home", "provider", "disabled"
API_SERVER_ACCESS_MODES = (API_SERVER_ACCESS_HOME, API_SERVER_ACCESS_PROVIDER, API_SERVER_ACCESS_DISABLED)
# Every namespace's CA bundle; in a twin the consumer's goes by another name, the provider keeps its own.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
CONSUMER_ROOT_CA_CONFIGMAP = "catamaran-root-ca.crt"

VIRTUAL_NODE_TAINT_KEY = "virtual-node.catamaran.io/not-allowed"
VIRTUAL_NODE_TAINT = {"key": VIRTUAL_NODE_TAINT_KEY, "value": "true", "effect": "NoExecute"}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# On the virtual node: the taints of the ForeignCluster's spec.nodeTaints the virtual kubelet put there, as
# comma-separated key:effect pairs; it removes only those when they leave the spec, never a taint others added.
ANNOTATION_OWNED_TAINTS = "catamaran.io/owned-taints"

# The signer of kubelet serving certificates: the virtual kubelet asks it (CSR), the consumer's manager approves.
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"

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
# Every other field a tenant writes is decided by the same terms (docs/tenant-terms.md has the table). Services:
# ClusterIP (headless included) only, unless the peering allows more types (and load-balancer classes).
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
DEFAULT_ALLOWED_SERVICE_TYPES = ("ClusterIP",)
# Twin names: Suffixed allows only `<name>-<consumer-id>` (the DefaultName strategy); Any allows same and selected
# names too (never reserved ones).
TWIN_NAME_POLICIES = ("Suffixed", "Any")
DEFAULT_TWIN_NAME_POLICY = "Suffixed"
# Every tenant pod runs at this provider-made class unless the peering allows the class it names: lower than the
# default (0), so the provider's own workloads preempt tenants, and never preempting anything itself.
TENANT_PRIORITY_CLASS = "catamaran-tenant"
TENANT_PRIORITY_VALUE = -100
# Containers without requests or limits get these (the manager when it makes the Pod, the twin's LimitRange for
# anything else), so nothing a tenant runs is free.
DEFAULT_CONTAINER_REQUESTS = {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "256Mi"}
DEFAULT_CONTAINER_LIMITS = {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "4Gi"}
# Hard limits of each twin's ResourceQuota: storage and object counts (pods and compute are the tenant-wide quota
# the manager keeps). Room for the per-pod token Secrets of earlier releases, 10 000 pods in one namespace.
DEFAULT_OBJECT_QUOTA = {
    "configmaps": "1000",
    "secrets": "11000",
    "services": "200",
    "persistentvolumeclaims": "50",
    "requests.storage": "500Gi",
    "count/endpointslices.discovery.k8s.io": "1000",
    "count/ingresses.networking.k8s.io": "100",
}
# How long a tenant's pod may take to stop (its terminationGracePeriodSeconds, and the grace of its deletion), so
# that deleting, evicting or draining it, and so un-peering, always ends.
DEFAULT_MAX_TERMINATION_GRACE_SECONDS = 300
# No pod, a tenant's or the provider admin's own ShadowPod's, is given more than a day to stop: no workload needs more.
MAX_TERMINATION_GRACE_SECONDS = 86400
# The annotations of a tenant's pod the provider's pod keeps: an exact key, or a prefix ending in "/*". Others are
# dropped, as the provider's infrastructure acts on them (autoscalers, CNI plugins, service meshes, scrapers).
DEFAULT_ALLOWED_POD_ANNOTATIONS = (
    "kubectl.kubernetes.io/default-container",
    "container.apparmor.security.beta.kubernetes.io/*",  # checked against the Pod Security level
)
# The LimitRange, ResourceQuota and ValidatingAdmissionPolicy (and its binding) made for tenants carry this name.
TENANT_TERMS_NAME = "catamaran-tenant-terms"
# On each twin namespace, written by the manager from the terms, read by the admission policy (CEL reads a
# namespace's annotations, not another object): comma-separated lists.
ANNOTATION_ALLOWED_SERVICE_TYPES = "terms.catamaran.io/service-types"
ANNOTATION_ALLOWED_LOAD_BALANCER_CLASSES = "terms.catamaran.io/load-balancer-classes"
ANNOTATION_ENDPOINT_RANGES = "terms.catamaran.io/endpoint-ranges"
ANNOTATION_ALLOWED_INGRESS_CLASSES = "terms.catamaran.io/ingress-classes"
ANNOTATION_ALLOWED_STORAGE_CLASSES = "terms.catamaran.io/storage-classes"
# Kubernetes marks a cluster's default StorageClass with this annotation ("true").
ANNOTATION_DEFAULT_STORAGE_CLASS = "storageclass.kubernetes.io/is-default-class"
ANNOTATION_ALLOWED_INGRESS_HOSTS = "terms.catamaran.io/ingress-hosts"
ANNOTATION_ALLOWED_INGRESS_ANNOTATIONS = "terms.catamaran.io/ingress-annotations"
# The cluster DNS a tenant's pods may always query: its Service's EndpointSlices (their addresses, after kube-proxy's
# translation, are what a NetworkPolicy sees) and, for DNS pods a policy can select, their usual label.
CLUSTER_DNS_NAMESPACE = "kube-system"
CLUSTER_DNS_SERVICE = "kube-dns"
CLUSTER_DNS_POD_LABELS = {"k8s-app": "kube-dns"}
# A tenant Ingress host that another namespace of the provider serves is refused: the provider's manager keeps this
# ConfigMap (SYSTEM_NAMESPACE; a key per host, `*` written `_`; the value the namespaces serving it), which the
# second tenant policy reads as its parameter (a policy reads no other object).
INGRESS_HOSTS_CONFIGMAP = "catamaran-ingress-hosts"
TENANT_INGRESS_HOSTS_POLICY = "catamaran-tenant-ingress-hosts"
# On a consumer: Secrets and service-account tokens, bound to the virtual kubelets per offloaded namespace.
VK_REFLECTION_ROLE = "catamaran-vk-reflection"
# On a consumer: the storage class whose claims the virtual kubelets provision on their providers.
VIRTUAL_STORAGE_CLASS = "catamaran"
VIRTUAL_STORAGE_PROVISIONER = "catamaran.io/virtual-storage"
LABEL_VIRTUAL_VOLUME_NODE = "catamaran.io/virtual-node"


def tenant_namespace(consumer_cluster_id: str) -> str:
    return f"{TENANT_NAMESPACE_PREFIX}{consumer_cluster_id}"


def virtual_node_name(provider_cluster_id: str, pool: "str | None" = None) -> str:
    """The virtual node of a peering, or of one of its pools (a dot never appears in a cluster id or a pool name,
    so no two peerings' pools share a name)."""
    return f"{VIRTUAL_NODE_PREFIX}{provider_cluster_id}" + (f".{pool}" if pool else "")


def default_twin_namespace(local_namespace: str, consumer_cluster_id: str) -> str:
    """The DefaultName mapping strategy: unique per consumer on a shared provider."""
    return f"{local_namespace}-{consumer_cluster_id}"


# The network fabric (docs/network-fabric.md). A peering's mode: Fabric (a WireGuard tunnel between the two
# clusters' gateways) or Flat (the clusters already route each other's pod ranges: no gateway, no remap).
NETWORK_MODES = ("Fabric", "Flat")
# Where each cluster's gateway runs in deployment mode and keeps its keys: apart from SYSTEM_NAMESPACE, because a
# gateway needs the host network and NET_ADMIN (Pod Security `privileged` here, `restricted` there) and reads Secrets
# here, where nothing but its keys lives (the peering credentials stay out of its reach).
FABRIC_NAMESPACE = "catamaran-fabric"
# The gateway renews this Lease in FABRIC_NAMESPACE while it runs (and deletes it when stopped on purpose): a virtual
# kubelet whose cluster's gateway stopped renewing it takes the tunnels for down, whatever NetworkReady last said.
GATEWAY_LEASE = "catamaran-gateway"
# Each side's WireGuard private key for one peering: a Secret in its own FABRIC_NAMESPACE (key `privateKey`),
# labelled FABRIC_KEY_LABEL, named by direction and the other cluster's id (a cluster may be both sides).
# Release 0.2.0 kept them in SYSTEM_NAMESPACE; the peering moves them here.
FABRIC_KEY_LABEL = "catamaran.io/fabric-key"
FABRIC_KEY_TO_PROVIDER_PREFIX = "catamaran-fabric-to-"
FABRIC_KEY_FROM_CONSUMER_PREFIX = "catamaran-fabric-from-"
FABRIC_PRIVATE_KEY = "privateKey"
NETWORK_READY_CONDITION = "NetworkReady"
# Whether the provider's network plugin enforces NetworkPolicies where the tenant's pods run (provider/enforcement.py):
# on the tenant's ResourceOffer, and copied onto the consumer's ForeignCluster.
NETWORK_POLICY_CONDITION = "NetworkPolicyEnforced"
# On a ShadowPod (False, reason Infeasible or Deferred) while the provider's manager does not resize its pod in
# place as the ShadowPod asks (provider/shadowpods.py); the consumer shows it as the pod's PodResizePending
# (vk/status_back.py).
SHADOWPOD_RESIZE_CONDITION = "PodResized"
