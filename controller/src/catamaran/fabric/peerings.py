"""What the peerings written on this cluster ask of its fabric: which peerings have a tunnel, and which pod ranges
lie behind each. Pure: one reading of the objects for the gateway, which builds the tunnels, and for the route agents
on the other nodes, which send the same ranges to the gateway's node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..constants import TENANT_NAMESPACE_PREFIX
from ..networks import consented_view, judge_announced


class ProviderBehind(NamedTuple):
    provider: str
    ranges: tuple[str, ...]  # as this cluster sees them: what the virtual kubelet accepted of the announcement
    consented: tuple[str, ...]  # what the peering agreed to route there (networks.consented_view); empty: nothing


def provider_behind(foreign: dict) -> ProviderBehind | None:
    """A consumer's ForeignCluster in mode Fabric: the provider, its pod ranges as this cluster sees them, and what
    this cluster consented to see them at; None in mode Flat. Routed only through routed_ranges."""
    networking = (foreign.get("spec") or {}).get("networking") or {}
    if networking.get("mode") != "Fabric":
        return None
    remote = ((foreign.get("status") or {}).get("network") or {}).get("remotePodCIDRs") or []
    # No consent recorded (a peering of an earlier release, until its next run): its ranges as accepted, so that an
    # upgrade keeps its traffic; they are still kept apart from every other provider's.
    consented = consented_view(networking)
    consented = remote if consented is None else consented
    return ProviderBehind(foreign["spec"]["clusterID"], tuple(remote), tuple(consented))


def routed_ranges(
    behind: Iterable[ProviderBehind | None],
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(provider -> the ranges routed into its tunnel and accepted from it (WireGuard's allowed IPs), provider -> each
    range left out and why).

    The virtual kubelet already wrote only consented ranges; this is the second lock, for the gateway and the route
    agents alike: a range outside its provider's consent, or overlapping another provider's (a hand-edited spec, two
    consents that overlap), is not routed. A provider can then never take an address the consumer did not agree to
    send it, nor, by a longer prefix, another provider's traffic."""
    providers = [peering for peering in behind if peering is not None]
    routed, refused = {}, {}
    for peering in providers:
        others = {other.provider: other.consented for other in providers if other.provider != peering.provider}
        accepted, left_out = judge_announced(peering.ranges, peering.consented, others)
        routed[peering.provider] = tuple(accepted)
        if left_out:
            refused[peering.provider] = tuple(f"{cidr} ({why})" for cidr, _, why in left_out)
    return routed, refused


def consumer_behind(offer: dict) -> tuple[str, tuple[str, ...]] | None:
    """A tenant's ResourceOffer on a provider in mode Fabric: (the consumer, the ranges reached through its tunnel:
    its pods, and its other providers' it relays to); None in mode Flat or outside a tenant namespace."""
    namespace = offer["metadata"]["namespace"]
    network = (offer.get("spec") or {}).get("network") or {}
    if network.get("mode") != "Fabric" or not namespace.startswith(TENANT_NAMESPACE_PREFIX):
        return None
    return namespace.removeprefix(TENANT_NAMESPACE_PREFIX), tuple(offer["spec"].get("consumerPodCIDRs") or [])
