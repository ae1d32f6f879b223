"""What the peerings written on this cluster ask of its fabric: which peerings have a tunnel, and which pod ranges
lie behind each. Pure: one reading of the objects for the gateway, which builds the tunnels, and for the route agents
on the other nodes, which send the same ranges to the gateway's node."""

from __future__ import annotations

from ..constants import TENANT_NAMESPACE_PREFIX


def provider_behind(foreign: dict) -> tuple[str, tuple[str, ...]] | None:
    """A consumer's ForeignCluster in mode Fabric: (the provider, its pod ranges as this cluster sees them, written by
    the virtual kubelet from what the provider announces); None in mode Flat."""
    networking = (foreign.get("spec") or {}).get("networking") or {}
    if networking.get("mode") != "Fabric":
        return None
    remote = ((foreign.get("status") or {}).get("network") or {}).get("remotePodCIDRs") or []
    return foreign["spec"]["clusterID"], tuple(remote)


def consumer_behind(offer: dict) -> tuple[str, tuple[str, ...]] | None:
    """A tenant's ResourceOffer on a provider in mode Fabric: (the consumer, the ranges reached through its tunnel:
    its pods, and its other providers' it relays to); None in mode Flat or outside a tenant namespace."""
    namespace = offer["metadata"]["namespace"]
    network = (offer.get("spec") or {}).get("network") or {}
    if network.get("mode") != "Fabric" or not namespace.startswith(TENANT_NAMESPACE_PREFIX):
        return None
    return namespace.removeprefix(TENANT_NAMESPACE_PREFIX), tuple(offer["spec"].get("consumerPodCIDRs") or [])
