"""lightkube classes for Catamaran's custom resources (CRD manifests live in controller/crds)."""

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from ..constants import CORE_GROUP, OFFLOADING_GROUP, VERSION

ForeignCluster = create_namespaced_resource(CORE_GROUP, VERSION, "ForeignCluster", "foreignclusters")
ShadowPod = create_namespaced_resource(OFFLOADING_GROUP, VERSION, "ShadowPod", "shadowpods")
ResourceOffer = create_namespaced_resource(OFFLOADING_GROUP, VERSION, "ResourceOffer", "resourceoffers")
TwinNamespace = create_namespaced_resource(OFFLOADING_GROUP, VERSION, "TwinNamespace", "twinnamespaces")
NamespaceOffloading = create_namespaced_resource(
    OFFLOADING_GROUP, VERSION, "NamespaceOffloading", "namespaceoffloadings"
)
NamespaceOffloadingPolicy = create_global_resource(
    OFFLOADING_GROUP, VERSION, "NamespaceOffloadingPolicy", "namespaceoffloadingpolicies"
)
