# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Read-only reports for the *_info modules: one list call per kind, never one call per object."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.catamaran.federation.plugins.module_utils import offloading
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    CORE_GROUP,
    LABEL_TYPE,
    SYSTEM_NAMESPACE,
    TYPE_VIRTUAL_NODE,
    VERSION,
    virtual_node_name,
)
from ansible_collections.catamaran.federation.plugins.module_utils.kube import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ClusterError,
)

FOREIGN_CLUSTER_API = "%s/%s" % (CORE_GROUP, VERSION)
CATAMARAN_CRD_SUFFIXES = (".catamaran.io",)


def condition(obj, kind):
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return entry
    return {}


def cluster_report(cluster):
    version = cluster.version()
    crds = (
        cluster.request(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", what="list CustomResourceDefinitions"
        ).get("items")
        or []
    )
    catamaran_crds = sorted(
        c["metadata"]["name"] for c in crds if c["metadata"]["name"].endswith(CATAMARAN_CRD_SUFFIXES)
    )
    return dict(
        server=cluster.server,
        context=cluster.context,
        version=version.get("gitVersion"),
        catamaran_crds=catamaran_crds,
        managed=managed_report(cluster, catamaran_crds),
    )


def managed_report(cluster, catamaran_crds):
    """What this collection made on the cluster, which is what a playbook's prune may remove: one labelled list per
    kind, empty for a kind whose CRD is not installed, None for one the credential may not list (this module only
    needs to read the CRDs)."""
    selector = "%s=%s" % (MANAGED_BY_LABEL, MANAGED_BY)

    def managed(crd, api_version, kind, key, namespace=None):
        if crd not in catamaran_crds:
            return []
        try:
            items = cluster.list(api_version, kind, namespace=namespace, labels=selector)
        except ClusterError as error:
            if error.status == 403:
                return None
            raise
        return sorted(key(item) for item in items)

    return dict(
        peerings=managed(
            "foreignclusters.%s" % CORE_GROUP,
            FOREIGN_CLUSTER_API,
            "ForeignCluster",
            lambda foreign: (foreign.get("spec") or {}).get("clusterID") or foreign["metadata"]["name"],
            namespace=SYSTEM_NAMESPACE,
        ),
        offloaded_namespaces=managed(
            offloading.CRD, offloading.API, offloading.KIND, lambda item: item["metadata"]["namespace"]
        ),
        offloading_policies=managed(
            offloading.POLICY_CRD, offloading.API, offloading.POLICY_KIND, lambda item: item["metadata"]["name"]
        ),
    )


def node_report(name, node):
    """A virtual node's name, whether it exists, its readiness, whether it is cordoned and its resources."""
    status = (node or {}).get("status") or {}
    return dict(
        name=name,
        exists=node is not None,
        ready=condition(node, "Ready").get("status") == "True",
        unschedulable=bool(((node or {}).get("spec") or {}).get("unschedulable")),
        capacity=status.get("capacity") or {},
        allocatable=status.get("allocatable") or {},
    )


def pools_report(provider_id, spec, nodes):
    """The peering's node pools: those its ForeignCluster sets (spec.pools) and those that have a virtual node
    (catamaran-<provider>.<pool>; the provider's offer decides which exist), each with its node, sorted by name."""
    settings = dict((pool.get("name"), pool) for pool in spec.get("pools") or [] if pool.get("name"))
    prefix = virtual_node_name(provider_id) + "."
    names = set(settings) | set(name[len(prefix) :] for name in nodes if name.startswith(prefix))
    report = []
    for pool in sorted(names):
        node_name = virtual_node_name(provider_id, pool)
        report.append(
            dict(
                name=pool,
                node_labels=settings.get(pool, {}).get("nodeLabels") or {},
                node_taints=settings.get(pool, {}).get("nodeTaints") or [],
                virtual_node=node_report(node_name, nodes.get(node_name)),
            )
        )
    return report


def peerings_report(cluster):
    """ForeignClusters on a consumer with their virtual nodes' (and pools' nodes') readiness and resources."""
    if not cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "foreignclusters.%s" % CORE_GROUP):
        return []
    foreigns = cluster.list(FOREIGN_CLUSTER_API, "ForeignCluster", namespace=SYSTEM_NAMESPACE)
    nodes = {
        n["metadata"]["name"]: n for n in cluster.list("v1", "Node", labels="%s=%s" % (LABEL_TYPE, TYPE_VIRTUAL_NODE))
    }
    report = []
    for foreign in foreigns:
        spec = foreign.get("spec") or {}
        provider_id = spec.get("clusterID", foreign["metadata"]["name"])
        node_name = virtual_node_name(provider_id)
        ready = condition(foreign, "Ready")
        report.append(
            dict(
                provider_id=spec.get("clusterID"),
                name=foreign["metadata"]["name"],
                sharing_percentage=spec.get("sharingPercentage"),
                node_labels=spec.get("nodeLabels") or {},
                node_taints=spec.get("nodeTaints") or [],
                ready=ready.get("status") == "True",
                reason=ready.get("reason"),
                message=ready.get("message"),
                managed_by_ansible=(foreign["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY,
                virtual_node=node_report(node_name, nodes.get(node_name)),
                pools=pools_report(provider_id, spec, nodes),
            )
        )
    return sorted(report, key=lambda entry: entry["name"])


def offloadings_report(cluster, namespace=None):
    if not cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", offloading.CRD):
        return []
    items = cluster.list(offloading.API, offloading.KIND, namespace=namespace)
    return sorted((offloading.summary(item) for item in items), key=lambda entry: entry["namespace"])


def policies_report(cluster):
    if not cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", offloading.POLICY_CRD):
        return []
    items = cluster.list(offloading.API, offloading.POLICY_KIND)
    return sorted((offloading.policy_summary(item) for item in items), key=lambda entry: entry["name"])
