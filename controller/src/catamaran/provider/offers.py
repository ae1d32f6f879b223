"""ResourceOffers: what this provider can give each tenant, computed from nodes and pods.

Nodes and pods are cached in a compact form (allocatable, requests, owner tenant), so memory
grows with the cluster's size, not with the size of its objects.

An offer's spec may carry the tenant's placement (a node selector and tolerations), written by the
provider's side of the peering; the tenant can read it but not change it. Only nodes the placement
admits count toward the offer, and every pod made from the tenant's ShadowPods carries it.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from lightkube import AsyncClient, operators
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from .. import quantities
from ..constants import (
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_TENANT,
    LABEL_TYPE,
    OFFLOADING_GROUP,
    RESOURCE_OFFER_NAME,
    TYPE_VIRTUAL_NODE,
    VERSION,
)
from ..kube.informer import Informer
from ..kube.ops import tolerating
from ..kube.resources import ResourceOffer
from ..kube.workqueue import WorkQueue
from ..objects import now_iso

log = logging.getLogger(__name__)

PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")
# Batch bursts of pod events (a Deployment scaling by hundreds) into one offer update.
RECOMPUTE_DELAY_S = 1.0


@dataclass(frozen=True)
class NodeSummary:
    schedulable: bool
    allocatable: dict
    pod_cidrs: tuple
    pressure: frozenset
    labels: tuple = ()  # sorted (key, value) pairs
    taints: tuple = ()  # (key, value, effect) of NoSchedule and NoExecute taints


@dataclass(frozen=True)
class Placement:
    """Where a tenant's pods may run on this provider."""

    node_selector: tuple = ()  # sorted (key, value) pairs
    tolerations: tuple = ()  # as the API writes them, each a tuple of sorted items

    @classmethod
    def from_offer_spec(cls, spec: dict | None) -> Placement:
        spec = spec or {}
        return cls(
            node_selector=tuple(sorted((spec.get("nodeSelector") or {}).items())),
            tolerations=tuple(tuple(sorted(t.items())) for t in spec.get("tolerations") or []),
        )

    def admits(self, node: NodeSummary) -> bool:
        labels = dict(node.labels)
        if any(labels.get(key) != value for key, value in self.node_selector):
            return False
        tolerations = [dict(t) for t in self.tolerations]
        return all(any(tolerates(t, taint) for t in tolerations) for taint in node.taints)

    def apply(self, pod_spec: dict) -> dict:
        """The pod spec with this placement added; the provider's selector wins over the pod's own keys."""
        if not self.node_selector and not self.tolerations:
            return pod_spec
        tolerations = list(pod_spec.get("tolerations") or [])
        tolerations += [dict(t) for t in self.tolerations if dict(t) not in tolerations]
        selector = {**(pod_spec.get("nodeSelector") or {}), **dict(self.node_selector)}
        return {**pod_spec, "nodeSelector": selector or None, "tolerations": tolerations or None}


def tolerates(toleration: dict, taint: tuple) -> bool:
    """The scheduler's toleration rule, for one (key, value, effect) taint."""
    key, value, effect = taint
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == key
    return toleration.get("key") == key and (toleration.get("value") or "") == (value or "")


@dataclass(frozen=True)
class PodSummary:
    node: str
    tenant: str | None
    requests: dict


def summarize_node(node) -> NodeSummary:
    labels = node.metadata.labels or {}
    status = node.status
    conditions = {c.type: c.status for c in (status.conditions or [])} if status else {}
    taints = node.spec.taints or [] if node.spec else []
    schedulable = (
        labels.get(LABEL_TYPE) != TYPE_VIRTUAL_NODE
        and not (node.spec and node.spec.unschedulable)
        and conditions.get("Ready") == "True"
    )
    allocatable = {k: str(v) for k, v in ((status.allocatable if status else None) or {}).items()}
    cidrs = tuple((node.spec.podCIDRs or ([node.spec.podCIDR] if node.spec.podCIDR else [])) if node.spec else ())
    pressure = frozenset(kind for kind in PRESSURE_CONDITIONS if conditions.get(kind) == "True")
    hard_taints = tuple(
        sorted((t.key, t.value or "", t.effect) for t in taints if t.effect in ("NoSchedule", "NoExecute"))
    )
    return NodeSummary(schedulable, allocatable, cidrs, pressure, tuple(sorted(labels.items())), hard_taints)


def summarize_pod(pod) -> PodSummary:
    spec = pod.spec.to_dict() if pod.spec else {}
    return PodSummary(
        node=spec.get("nodeName") or "",
        tenant=(pod.metadata.labels or {}).get(LABEL_ORIGIN_CLUSTER_ID),
        requests=quantities.pod_requests(spec),
    )


def offer_status(nodes: dict, pods: dict, tenant: str, placement: Placement | None = None) -> dict:
    """Free resources for `tenant` on the nodes its placement admits; its own offloaded pods do not count."""
    placement = placement or Placement()
    usable = {name: node for (_, name), node in nodes.items() if node.schedulable and placement.admits(node)}
    requests = (pod.requests for pod in pods.values() if pod.node in usable and pod.tenant != tenant)
    free = quantities.free_resources((node.allocatable for node in usable.values()), requests)
    allocatable = quantities.free_resources((node.allocatable for node in usable.values()), ())
    pressure = sorted(frozenset.intersection(*(n.pressure for n in usable.values()))) if usable else []
    return {
        "free": {r: quantities.format_quantity(r, quantities.round_down(r, v)) for r, v in sorted(free.items())},
        "allocatable": {r: quantities.format_quantity(r, v) for r, v in sorted(allocatable.items())},
        "nodes": len(usable),
        "podCIDRs": covering_networks({cidr for node in nodes.values() for cidr in node.pod_cidrs}),
        "pressure": pressure,
    }


def covering_networks(cidrs) -> list[str]:
    """One network per address family containing every node's pod range, so IP offsets stay unique."""
    by_family: dict[int, list] = {}
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr, strict=False)
        by_family.setdefault(network.version, []).append(network)
    covering = []
    for networks in by_family.values():
        supernet = networks[0]
        while not all(n.subnet_of(supernet) for n in networks):
            supernet = supernet.supernet()
        covering.append(str(supernet))
    return sorted(covering)


class ResourceOfferController:
    name = "resourceoffers"

    def __init__(self, client: AsyncClient, cluster_id: str):
        self.client = client
        self.cluster_id = cluster_id
        self.nodes = Informer(client, Node, name="offer-nodes", transform=summarize_node)
        self.pods = Informer(
            client,
            Pod,
            name="offer-pods",
            # Finished pods hold no resources; the server drops them from the watch.
            fields={"status.phase": operators.not_in(["Succeeded", "Failed"])},
            transform=summarize_pod,
        )
        self.tenants = Informer(
            client,
            Namespace,
            name="tenant-namespaces",
            labels={LABEL_TENANT: "true"},
            transform=lambda ns: (ns.metadata.labels or {}).get(LABEL_ORIGIN_CLUSTER_ID),
        )
        self.offers = Informer(
            client,
            ResourceOffer,
            name="resource-offers",
            transform=lambda offer: Placement.from_offer_spec(offer.spec),
        )
        self.queue = WorkQueue(self.name, self.reconcile, workers=2)
        self._published: dict[str, dict] = {}
        for informer in (self.nodes, self.pods):
            informer.on_change(self._all_tenants_changed)
        self.tenants.on_change(lambda event, key, new, old: self.queue.add(key[1], RECOMPUTE_DELAY_S))
        self.offers.on_change(self._offer_changed)

    def _offer_changed(self, event, key, new, old) -> None:
        if event == "DELETED" or new != old:  # a new placement changes which nodes count
            self.queue.add(key[0])

    def placement(self, tenant_namespace: str) -> Placement:
        return self.offers.get(tenant_namespace, RESOURCE_OFFER_NAME) or Placement()

    def _all_tenants_changed(self, event, key, new, old) -> None:
        if new == old:
            return
        for _, namespace in self.tenants.cache:
            self.queue.add(namespace, RECOMPUTE_DELAY_S)

    def tasks(self):
        return [informer.run() for informer in (self.nodes, self.pods, self.tenants, self.offers)] + [self._run()]

    async def _run(self):
        for informer in (self.nodes, self.pods, self.tenants, self.offers):
            await informer.synced.wait()
        await self.queue.run()

    async def reconcile(self, namespace: str) -> float | None:
        tenant = self.tenants.get(None, namespace)
        if tenant is None:
            self._published.pop(namespace, None)
            return None
        status = offer_status(self.nodes.cache, self.pods.cache, tenant, self.placement(namespace))
        if self.offers.get(namespace, RESOURCE_OFFER_NAME) is None:
            with tolerating(409):
                await self.client.create(
                    ResourceOffer(
                        apiVersion=f"{OFFLOADING_GROUP}/{VERSION}",
                        kind="ResourceOffer",
                        metadata={"name": RESOURCE_OFFER_NAME, "namespace": namespace},
                        spec={"clusterID": self.cluster_id},
                    )
                )
            self._published.pop(namespace, None)
        if self._published.get(namespace) == status:
            return None
        await self.client.patch(
            ResourceOffer.Status,
            RESOURCE_OFFER_NAME,
            {"status": {**status, "updateTime": now_iso()}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        self._published[namespace] = status
        return None
