"""ResourceOffers: what this provider can give each tenant, computed from nodes and pods.

Nodes and pods are cached in a compact form (allocatable, requests, owner tenant), so memory
grows with the cluster's size, not with the size of its objects.

An offer's spec carries the tenant's terms, written by the provider's side of the peering; the
tenant can read them but not change them: its placement (a node selector and tolerations), its Pod
Security level and its sharing percentage. Only nodes the placement admits count toward the offer,
every pod made from the tenant's ShadowPods carries the placement, and the tenant's quota is its
sharing percentage of those nodes' allocatable. The status publishes the quota and what the
tenant's pods use of it.

A tenant may also be lent node pools (spec.pools, docs/design.md "Node pools"): each has its own placement,
sharing percentage and cordon. A pool's pods (labelled LABEL_POOL) get the pool's placement instead of the
tenant's and count against the pool's quota, the pool's sharing percentage of the nodes its placement admits,
apart from the tenant's own pods and its other pools'; status.pools publishes each pool as the status publishes
the tenant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from .. import quantities
from ..constants import (
    DEFAULT_ALLOWED_POD_ANNOTATIONS,
    DEFAULT_ALLOWED_SERVICE_TYPES,
    DEFAULT_CONTAINER_LIMITS,
    DEFAULT_CONTAINER_REQUESTS,
    DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    DEFAULT_OBJECT_QUOTA,
    DEFAULT_POD_SECURITY_LEVEL,
    DEFAULT_SHARING_PERCENTAGE,
    DEFAULT_TWIN_NAME_POLICY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_POOL,
    LABEL_TENANT,
    LABEL_TYPE,
    MAX_POOLS,
    OFFLOADING_GROUP,
    POD_SECURITY_LEVELS,
    RESOURCE_OFFER_NAME,
    TENANT_NAMESPACE_PREFIX,
    TENANT_PRIORITY_CLASS,
    TERMINAL_PHASES,
    TWIN_NAME_POLICIES,
    TYPE_VIRTUAL_NODE,
    VERSION,
    tenant_namespace,
)
from ..kube.informer import Informer, enqueue
from ..kube.ops import tolerating
from ..kube.resources import ResourceOffer
from ..kube.workqueue import WorkQueue
from ..networks import covering_networks
from ..objects import now_iso
from ..tenancy import lent_service_types
from . import quota
from . import terms as tenant_terms

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


def _pairs(mapping: dict | None, default: dict) -> tuple:
    return tuple(sorted((mapping if mapping is not None else default).items()))


@dataclass(frozen=True)
class PoolTerms:
    """One node pool lent to a tenant (an entry of its ResourceOffer's spec.pools)."""

    name: str
    placement: Placement = field(default_factory=Placement)
    sharing_percentage: int = DEFAULT_SHARING_PERCENTAGE
    # Its cordon: no new pod of the pool (the consumer's virtual kubelet drains the running ones when asked).
    cordoned: bool = False
    cordon_reason: str = ""

    @classmethod
    def from_pool_spec(cls, spec: dict, default_percentage: int) -> PoolTerms:
        cordon = spec.get("cordon")
        return cls(
            name=spec["name"],
            placement=Placement.from_offer_spec(spec),
            sharing_percentage=int(spec.get("sharingPercentage") or default_percentage),
            cordoned=cordon is not None,
            cordon_reason=(cordon or {}).get("reason") or "",
        )


def _pools(specs: list | None, default_percentage: int) -> tuple[PoolTerms, ...]:
    """The pools of spec.pools, in its order: the first of a name (the CRD's list map makes names unique), at most
    MAX_POOLS (its maxItems)."""
    pools: dict[str, PoolTerms] = {}
    for spec in specs or ():
        if spec.get("name") and spec["name"] not in pools and len(pools) < MAX_POOLS:
            pools[spec["name"]] = PoolTerms.from_pool_spec(spec, default_percentage)
    return tuple(pools.values())


@dataclass(frozen=True)
class TenantTerms:
    """A tenant's terms on this provider, from its ResourceOffer's spec (defaults when unset)."""

    placement: Placement = field(default_factory=Placement)
    pod_security: str = DEFAULT_POD_SECURITY_LEVEL
    sharing_percentage: int = DEFAULT_SHARING_PERCENTAGE
    credential_lifetime_seconds: int = DEFAULT_CREDENTIAL_LIFETIME_SECONDS
    service_types: tuple = DEFAULT_ALLOWED_SERVICE_TYPES
    load_balancer_classes: tuple = ()
    twin_names: str = DEFAULT_TWIN_NAME_POLICY
    priority_class: str = TENANT_PRIORITY_CLASS
    allowed_priority_classes: tuple = ()
    container_requests: tuple = tuple(sorted(DEFAULT_CONTAINER_REQUESTS.items()))
    container_limits: tuple = tuple(sorted(DEFAULT_CONTAINER_LIMITS.items()))
    object_quota: tuple = tuple(sorted(DEFAULT_OBJECT_QUOTA.items()))
    consumer_pod_cidrs: tuple = ()
    consumer_api_server: str = ""  # where the consumer's pods' in-cluster clients reach its API server (home access)
    max_termination_grace_seconds: int = DEFAULT_MAX_TERMINATION_GRACE_SECONDS
    allowed_pod_annotations: tuple = DEFAULT_ALLOWED_POD_ANNOTATIONS
    ingress_classes: tuple = ()
    ingress_hosts: tuple = ()
    ingress_annotations: tuple = ()
    storage_classes: tuple = ()  # none named: the provider's default classes
    # What a tenant's pods may reach, and be reached from, beyond their twin, the cluster DNS and the fabric.
    ingress_namespaces: tuple = ()
    egress_namespaces: tuple = ()
    egress_cidrs: tuple = ()
    egress_to_api_server: bool = False
    # spec.cordon: no new pod for the tenant (its virtual kubelet drains the running ones when asked).
    cordoned: bool = False
    cordon_reason: str = ""
    # spec.pools: the node pools lent to the tenant, each its own virtual node on the consumer.
    pools: tuple[PoolTerms, ...] = ()

    def pool(self, name: str) -> PoolTerms | None:
        """The pool of that name lent to the tenant, None when it lends none of it."""
        return next((pool for pool in self.pools if pool.name == name), None)

    def lent(self, pool: str | None) -> tuple[Placement, int] | None:
        """(placement, sharing percentage) of the tenant's own pods (`pool` None) or of one of its pools; None for a
        pool the tenant is not lent."""
        if pool is None:
            return self.placement, self.sharing_percentage
        found = self.pool(pool)
        return None if found is None else (found.placement, found.sharing_percentage)

    @classmethod
    def from_offer_spec(cls, spec: dict | None) -> TenantTerms:
        spec = spec or {}
        level = spec.get("podSecurity") or DEFAULT_POD_SECURITY_LEVEL
        lifetime = spec.get("credentialLifetimeSeconds") or DEFAULT_CREDENTIAL_LIFETIME_SECONDS
        services = spec.get("services") or {}
        defaults = spec.get("containerDefaults") or {}
        pods = spec.get("pods") or {}
        ingress = spec.get("ingress") or {}
        isolation = spec.get("isolation") or {}
        # The CRD's schema rejects anything else; should it ever get through, the strictest choice applies.
        names = spec.get("twinNamespaceNames") or DEFAULT_TWIN_NAME_POLICY
        sharing = int(spec.get("sharingPercentage") or DEFAULT_SHARING_PERCENTAGE)
        return cls(
            placement=Placement.from_offer_spec(spec),
            pod_security=level if level in POD_SECURITY_LEVELS else POD_SECURITY_LEVELS[0],
            sharing_percentage=sharing,
            credential_lifetime_seconds=int(lifetime),
            service_types=lent_service_types(services.get("allowedTypes")),
            load_balancer_classes=tuple(sorted(services.get("allowedLoadBalancerClasses") or ())),
            twin_names=names if names in TWIN_NAME_POLICIES else TWIN_NAME_POLICIES[0],
            priority_class=spec.get("priorityClassName") or TENANT_PRIORITY_CLASS,
            allowed_priority_classes=tuple(sorted(spec.get("allowedPriorityClasses") or ())),
            container_requests=_pairs(defaults.get("requests"), DEFAULT_CONTAINER_REQUESTS),
            container_limits=_pairs(defaults.get("limits"), DEFAULT_CONTAINER_LIMITS),
            object_quota=_pairs(spec.get("objectQuota"), DEFAULT_OBJECT_QUOTA),
            consumer_pod_cidrs=tuple(spec.get("consumerPodCIDRs") or ()),
            consumer_api_server=spec.get("consumerAPIServer") or "",
            max_termination_grace_seconds=int(
                pods.get("maxTerminationGracePeriodSeconds")
                if pods.get("maxTerminationGracePeriodSeconds") is not None
                else DEFAULT_MAX_TERMINATION_GRACE_SECONDS
            ),
            allowed_pod_annotations=tuple(
                pods["allowedAnnotations"]
                if pods.get("allowedAnnotations") is not None
                else DEFAULT_ALLOWED_POD_ANNOTATIONS
            ),
            ingress_classes=tuple(sorted(ingress.get("allowedClasses") or ())),
            ingress_hosts=tuple(sorted(ingress.get("allowedHosts") or ())),
            ingress_annotations=tuple(sorted(ingress.get("allowedAnnotations") or ())),
            storage_classes=tuple(sorted((spec.get("storage") or {}).get("allowedClasses") or ())),
            ingress_namespaces=tuple(sorted(isolation.get("ingressFromNamespaces") or ())),
            egress_namespaces=tuple(sorted(isolation.get("egressToNamespaces") or ())),
            egress_cidrs=tuple(sorted(isolation.get("egressToCIDRs") or ())),
            egress_to_api_server=bool(isolation.get("egressToAPIServer")),
            cordoned=spec.get("cordon") is not None,
            cordon_reason=(spec.get("cordon") or {}).get("reason") or "",
            pools=_pools(spec.get("pools"), sharing),
        )


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
    pool: str | None = None  # the tenant's pool the pod is of (its LABEL_POOL), None: the tenant's own


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


def summarize_pod(pod: dict) -> PodSummary | None:
    """What a pod (plain, see the offers' pod informer) takes from its node and its tenant; None for a finished pod,
    which holds nothing."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    spec = pod.get("spec") or {}
    labels = pod["metadata"].get("labels") or {}
    return PodSummary(
        node=spec.get("nodeName") or "",
        tenant=labels.get(LABEL_ORIGIN_CLUSTER_ID),
        requests=quantities.pod_requests(spec),
        pool=labels.get(LABEL_POOL) or None,
    )


def offer_status(nodes: dict, pods: dict, tenant: str, placement: Placement | None = None) -> dict:
    """Free resources for `tenant` on the nodes its placement admits; its own offloaded pods do not count."""
    return {
        **placement_status(nodes, pods, tenant, placement),
        "podCIDRs": covering_networks({cidr for node in nodes.values() for cidr in node.pod_cidrs}),
    }


def placement_status(nodes: dict, pods: dict, tenant: str, placement: Placement | None = None) -> dict:
    """free, allocatable, nodes and pressure of the schedulable nodes `placement` admits, as `tenant` sees them: the
    tenant's own pods (of any pool) do not count against what is free."""
    placement = placement or Placement()
    usable = {name: node for (_, name), node in nodes.items() if node.schedulable and placement.admits(node)}
    requests = (pod.requests for pod in pods.values() if pod and pod.node in usable and pod.tenant != tenant)
    free = quantities.free_resources((node.allocatable for node in usable.values()), requests)
    allocatable = quantities.free_resources((node.allocatable for node in usable.values()), ())
    pressure = sorted(frozenset.intersection(*(n.pressure for n in usable.values()))) if usable else []
    return {
        "free": {r: quantities.format_quantity(r, quantities.round_down(r, v)) for r, v in sorted(free.items())},
        "allocatable": {r: quantities.format_quantity(r, v) for r, v in sorted(allocatable.items())},
        "nodes": len(usable),
        "pressure": pressure,
    }


def quota_status(cap: dict[str, Fraction], used: dict[str, Fraction]) -> dict:
    """A quota and what is used of it; every resource of the quota is shown, zero included, so a merge patch
    overwrites what was used before."""
    return {"quota": quota.formatted(cap), "used": quota.formatted({**dict.fromkeys(cap, Fraction(0)), **used})}


def pool_status(
    nodes: dict, pods: dict, tenant: str, pool: PoolTerms, cap: dict[str, Fraction], used: dict[str, Fraction]
) -> dict:
    """A pool's entry of status.pools: the tenant's fields for the pool's placement, its quota `cap` and `used`."""
    return {"name": pool.name, **placement_status(nodes, pods, tenant, pool.placement), **quota_status(cap, used)}


def weakest_enforcement(conditions: list[tuple[str | None, dict | None]]) -> dict | None:
    """The tenant's NetworkPolicyEnforced: its own placement's condition unless one of its pools' placements is worse
    (False, then Unknown), which is shown naming the pool; None until its own placement has been probed."""
    own = conditions[0][1]
    rank = {"False": 0, "Unknown": 1}
    worst = min(
        ((pool, c) for pool, c in conditions if c is not None and c.get("status") in rank),
        key=lambda found: rank[found[1]["status"]],
        default=None,
    )
    if own is None or worst is None or worst[0] is None or rank.get(own.get("status"), 2) <= rank[worst[1]["status"]]:
        return own
    pool, condition = worst
    return {**condition, "message": f"pool {pool}: {condition.get('message', '')}"}


class ResourceOfferController:
    name = "resourceoffers"

    def __init__(self, client: AsyncClient, cluster_id: str):
        self.client = client
        self.cluster_id = cluster_id
        self.nodes = Informer(client, Node, name="offer-nodes", transform=summarize_node)
        # Every pod of the cluster, the one pod watch of the manager: the ShadowPod controller reads its own
        # pods through a view of it (Informer.view). Finished pods stay, summarized as None.
        self.pods = Informer(client, Pod, name="pods", transform=summarize_pod, plain=True)
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
            transform=lambda offer: TenantTerms.from_offer_spec(offer.spec),
        )
        self.queue = WorkQueue(self.name, self.reconcile, workers=2)
        self.ledger = quota.Ledger()
        # (tenant namespace, pool or None) -> its quota, until the nodes or the tenant's terms change
        self._quotas: dict[tuple[str, str | None], dict[str, Fraction]] = {}
        self._admission_listeners: list[Callable[[str | None], None]] = []
        self._published: dict[str, dict] = {}
        # The NetworkPolicy enforcement condition of a placement's tenants (enforcement_probe.py sets it when it runs).
        self.network_policy_condition: Callable[[Placement], dict | None] = lambda placement: None
        self.nodes.on_change(self._node_changed)
        self.pods.on_change(self._pod_changed)
        self.tenants.on_change(enqueue(self.queue, key=lambda key: key[1], delay=RECOMPUTE_DELAY_S))
        self.offers.on_change(self._offer_changed)

    def on_admission_may_change(self, listener: Callable[[str | None], None]) -> None:
        """Call `listener(consumer)` when a refused pod of that tenant might now be admitted (None: any tenant)."""
        self._admission_listeners.append(listener)

    def _admission_may_change(self, consumer: str | None) -> None:
        for listener in self._admission_listeners:
            listener(consumer)

    def _offer_changed(self, event, key, new, old) -> None:
        if event == "DELETED" or new != old:  # new terms change which nodes count, the quotas and the level
            for cached in [k for k in self._quotas if k[0] == key[0]]:
                del self._quotas[cached]
            self.queue.add(key[0])
            if key[0].startswith(TENANT_NAMESPACE_PREFIX):
                self._admission_may_change(key[0].removeprefix(TENANT_NAMESPACE_PREFIX))

    def _node_changed(self, event, key, new, old) -> None:
        if new == old:
            return
        self._quotas.clear()
        self.all_tenants_changed()
        self._admission_may_change(None)

    def _pod_changed(self, event, key, new, old) -> None:
        if new == old and not self.ledger.reserves(key):
            return  # a status report: the ledger counts the pod as it was, and settles no reservation with it
        self.ledger.observe(key, new.tenant if new else None, new.requests if new else None, new.pool if new else None)
        if new == old:
            return
        self.all_tenants_changed()
        if old is not None and old.tenant and (new is None or (new.requests, new.pool) != (old.requests, old.pool)):
            self._admission_may_change(old.tenant)  # the usage of the tenant's bucket (its own or a pool's) went down

    def terms(self, tenant_namespace: str) -> TenantTerms:
        return self.offers.get(tenant_namespace, RESOURCE_OFFER_NAME) or TenantTerms()

    def pod_cidrs(self) -> list[str]:
        """This cluster's pod ranges, from its nodes."""
        return sorted({cidr for node in self.nodes.cache.values() for cidr in node.pod_cidrs})

    def _usable(self, placement: Placement) -> list[dict]:
        """The allocatable of each schedulable node `placement` admits."""
        return [node.allocatable for node in self.nodes.cache.values() if node.schedulable and placement.admits(node)]

    def quota(self, tenant_namespace: str, pool: str | None = None) -> dict[str, Fraction]:
        """The cap per resource of the tenant's pods of `pool` (None: of no pool): its sharing percentage of the
        allocatable of the nodes its placement admits; nothing for a pool the tenant is not lent."""
        cached = self._quotas.get((tenant_namespace, pool))
        if cached is None:
            lent = self.terms(tenant_namespace).lent(pool)
            if lent is None:
                return {}  # not cached: a ShadowPod's label names any pool it likes
            cached = self._quotas[(tenant_namespace, pool)] = quota.tenant_quota(self._usable(lent[0]), lent[1])
        return cached

    def beyond_every_node(
        self, tenant_namespace: str, requests: dict[str, Fraction], pool: str | None = None
    ) -> list[str]:
        """Why no node the placement of the tenant's pods of `pool` (None: of no pool) admits could ever hold a pod
        of these requests ([]: one could)."""
        lent = self.terms(tenant_namespace).lent(pool)
        if lent is None:
            return [f"pool {pool} is not lent to the tenant"]
        usable = self._usable(lent[0])
        if not usable:
            whose = "the tenant's placement" if pool is None else f"the placement of pool {pool}"
            return [f"no schedulable node matches {whose}"]
        return quota.beyond_every_node(usable, requests)

    def admit(self, pod_key, consumer: str, requests: dict[str, Fraction], pool: str | None = None) -> list[str]:
        """Reserve a new pod of `consumer` (of `pool`, None: of none) against that bucket's quota, or say which
        resources it would exceed."""
        return self.ledger.admit(pod_key, consumer, requests, self.quota(tenant_namespace(consumer), pool), pool=pool)

    def release(self, pod_key) -> None:
        self.ledger.release(pod_key)

    def all_tenants_changed(self) -> None:
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
        terms = self.terms(namespace)
        status = offer_status(self.nodes.cache, self.pods.cache, tenant, terms.placement)
        # Where the tenant's EndpointSlices may point (its reflection filters to them; admission enforces them).
        status["endpointRanges"], _ = tenant_terms.endpoint_ranges(terms.consumer_pod_cidrs, self.pod_cidrs())
        placements = [(None, terms.placement), *((pool.name, pool.placement) for pool in terms.pools)]
        enforced = weakest_enforcement([(pool, self.network_policy_condition(p)) for pool, p in placements])
        status["conditions"] = [enforced] if enforced is not None else []
        status.update(quota_status(self.quota(namespace), self.ledger.used(tenant)))
        # A list: a merge patch replaces it whole, so every pool is written each time.
        status["pools"] = [
            pool_status(
                self.nodes.cache,
                self.pods.cache,
                tenant,
                pool,
                self.quota(namespace, pool.name),
                self.ledger.used(tenant, pool=pool.name),
            )
            for pool in terms.pools
        ]
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
        previous = self._published.get(namespace)
        if previous == status:
            return None
        patch = {**status, "updateTime": now_iso()}
        for name in ("quota", "used"):  # resources no longer there are removed, not left stale
            gone = set((previous or {}).get(name) or {}) - set(status[name])
            patch[name] = {**status[name], **dict.fromkeys(gone)}
        await self.client.patch(
            ResourceOffer.Status,
            RESOURCE_OFFER_NAME,
            {"status": patch},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        self._published[namespace] = status
        return None
