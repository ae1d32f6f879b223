"""Which virtual nodes a peering has: one, or one per node pool both sides declare (docs/design.md, "Node pools").

The provider's ResourceOffer lends the pools (`spec.pools`: placement, share, cordon); the consumer's ForeignCluster
takes them (`spec.pools`: each pool node's labels and taints). A pool has a node only when both declare it: the
provider's offer alone never makes nodes on the consumer. Pure: the virtual kubelet's VirtualNodes
(virtual_nodes.py) acts on what `peering_nodes` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..constants import virtual_node_name
from .trust import sanitised_message


@dataclass(frozen=True)
class Cordon:
    """A cordon of the provider's (the tenant's or a pool's spec.cordon), its reason bounded as provider text."""

    drain: bool = False
    reason: str = ""


def cordon_from(spec_cordon: object) -> Cordon | None:
    if not isinstance(spec_cordon, dict):
        return None
    reason = sanitised_message(str(spec_cordon.get("reason") or ""))
    return Cordon(drain=spec_cordon.get("drain") is True, reason=reason)


def cordon_of(offer: dict | None) -> Cordon | None:
    """The tenant's cordon, from its ResourceOffer's spec."""
    return cordon_from(((offer or {}).get("spec") or {}).get("cordon"))


@dataclass(frozen=True)
class PeeringNode:
    """One virtual node of the peering, as the offer and the ForeignCluster describe it."""

    name: str
    pool: str | None = None  # None: the peering's one node, without pools
    sharing_percentage: int | None = None  # None: the ForeignCluster's
    labels: tuple = ()  # sorted (key, value): the pool's, besides the peering's
    taints: tuple = ()  # the pool's taints (dicts as the ForeignCluster writes them), besides the peering's
    cordon: Cordon | None = None  # the pool's own (the tenant's applies to every node)


def lent_pools(offer: dict | None) -> list[dict]:
    """The pools of the offer's spec with a usable name (the CRD's schema checks them; nothing else is trusted)."""
    pools = ((offer or {}).get("spec") or {}).get("pools")
    if not isinstance(pools, list):
        return []
    named = [pool for pool in pools if isinstance(pool, dict) and isinstance(pool.get("name"), str) and pool["name"]]
    return [pool for pool in named if "." not in pool["name"] and "/" not in pool["name"]]


def peering_nodes(provider_id: str, offer: dict | None, foreign_spec: dict) -> dict[str, PeeringNode]:
    """The peering's virtual nodes by name: one per pool the provider lends and the consumer takes, or the one node
    when there is none such."""
    settings = {
        entry["name"]: entry
        for entry in foreign_spec.get("pools") or []
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    }
    pools = [pool for pool in lent_pools(offer) if pool["name"] in settings]
    if not pools:
        name = virtual_node_name(provider_id)
        return {name: PeeringNode(name)}
    nodes = {}
    for pool in pools:
        own = settings[pool["name"]]
        share = pool.get("sharingPercentage")
        node = PeeringNode(
            name=virtual_node_name(provider_id, pool["name"]),
            pool=pool["name"],
            sharing_percentage=share if isinstance(share, int) and not isinstance(share, bool) else None,
            labels=tuple(sorted((own.get("nodeLabels") or {}).items())),
            taints=tuple(own.get("nodeTaints") or ()),
            cordon=cordon_from(pool.get("cordon")),
        )
        nodes[node.name] = node
    return nodes


def pool_offer(offer_status: dict | None, pool: str | None) -> dict | None:
    """What a node sizes itself from: the offer's status, or its pool's entry in status.pools (None until published)."""
    if pool is None or offer_status is None:
        return offer_status
    for entry in offer_status.get("pools") or []:
        if isinstance(entry, dict) and entry.get("name") == pool:
            return entry
    return None


def node_cordon(tenant: Cordon | None, node: PeeringNode, going: bool) -> Cordon | None:
    """The cordon a node shows: a node going away drains; else the tenant's cordon, then the pool's."""
    if going:
        reason = f"pool {node.pool} is no longer lent" if node.pool else "the provider lends this tenant node pools now"
        return Cordon(drain=True, reason=reason)
    if tenant is not None and (node.cordon is None or tenant.drain or not node.cordon.drain):
        return tenant
    return node.cordon
