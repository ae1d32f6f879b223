"""Which provider pod IPs the consumer's pods show, and as what (IPTranslator); the consumer's own addresses, which
no provider pod IP may take. Pure.

Pod IPs are checked against the ranges the provider announced and the consumer consented to, and against the
consumer's own ranges, since the consumer's EndpointSlices are built from them (vk/trust.py bounds the rest of what
a provider reports; vk/pod_ips.py keeps an IPTranslator current, vk/local_ranges.py the consumer's ranges).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

from ..networks import judge_announced

# Why a pod IP its provider reports is refused: the reason of the local pod's POD_IP_CONDITION (vk/status_back.py).
POD_IP_OUTSIDE_PROVIDER_RANGES = "PodIPOutsideProviderRanges"
POD_IP_NOT_TRANSLATABLE = "PodIPNotTranslatable"
# Every pod IP of a provider refused: its ranges, or the remap range, overlap the consumer's own.
PROVIDER_RANGE_OVERLAPS_CONSUMER = "ProviderRangeOverlapsConsumer"
REMAP_OVERLAPS_CONSUMER = "RemapRangeOverlapsConsumer"
POD_IP_NOT_CONSENTED = "PodIPNotConsented"
# A provider announces one range per address family (networks.covering_networks); more are ignored.
PROVIDER_RANGES_LIMIT = 8
# Shown in messages about overlaps; the rest are counted.
OVERLAPS_SHOWN = 3

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
OwnRange = tuple[Network, str]  # a range or address of the consumer's, and what it is

# Addresses no pod has. EndpointSlice validation refuses most of them, so one such pod IP could stall its
# Service's slices; a link-local one would point the Service at the nodes' metadata server; an IPv4-mapped IPv6
# one is an IPv4 address (the API server's, say) in disguise.
SPECIAL_RANGES: tuple[OwnRange, ...] = tuple(
    (ipaddress.ip_network(cidr), what)
    for cidr, what in (
        ("0.0.0.0/32", "unspecified address"),
        ("127.0.0.0/8", "loopback range"),
        ("169.254.0.0/16", "link-local range (metadata services)"),
        ("224.0.0.0/4", "multicast range"),
        ("::/128", "unspecified address"),
        ("::1/128", "loopback address"),
        ("::ffff:0:0/96", "IPv4-mapped range"),
        ("fe80::/10", "link-local range"),
        ("ff00::/8", "multicast range"),
    )
)


class IPTranslator:
    """Which provider pod IPs the consumer's pods show, and as what: None for an IP it refuses.

    The provider is trusted only with the pod ranges it announced (its ResourceOffer's status.podCIDRs). Any
    other IP is refused, and so is every IP before it announced any: the consumer's EndpointSlice controller
    builds Service endpoints from pod status, so a provider could otherwise point the consumer's Services at
    the consumer's API server, nodes or pods. With a remap range, an accepted IP is shown at the same offset
    inside it.

    Without a remap range, a provider range that overlaps the consumer's own (`own`: node pod ranges and
    addresses, service range, API server, addresses no pod has) is refused as a whole, and so is a remap range
    that overlaps them: no IP is shown, and `conflict` holds (reason, message). A remap range smaller than a
    provider range (or of another address family) cannot hold every offset: the IPs beyond it are refused too,
    not shown untranslated (they would be addresses the remap was meant to keep apart from the consumer's),
    and `problem` says so; it is empty when every offset fits.

    `consented` (consented_pod_cidrs): the provider's pod ranges the consumer agreed to at peering. An announced
    range outside them is refused (`refused`: (range, reason, why)), and so are its pod IPs; None: no consent to
    check against (mode Flat, or a remap range, which alone is routed, from a peering of an earlier release).
    """

    def __init__(
        self,
        provider_cidrs: list[str],
        remap_cidr: str | None,
        own: tuple[OwnRange, ...] = (),
        consented: Sequence[str] | None = None,
    ):
        self.sources, self.ignored = provider_networks(provider_cidrs)
        self.consented = tuple(consented) if consented is not None else None
        self.refused: list[tuple[str, str, str]] = []
        if self.consented is not None:
            accepted, self.refused = judge_announced([str(s) for s in self.sources], self.consented)
            self.sources = [ipaddress.ip_network(cidr) for cidr in accepted]
        self.target = ipaddress.ip_network(remap_cidr, strict=False) if remap_cidr else None
        self.problem = ""
        self.conflict: tuple[str, str] | None = None
        if self.target is not None:
            problems = []
            larger = [
                s
                for s in self.sources
                if s.version == self.target.version and s.num_addresses > self.target.num_addresses
            ]
            if larger:
                size, prefix = self.target.num_addresses, min(source.prefixlen for source in larger)
                problems.append(
                    f"remap range {self.target} (spec.networking.podCIDRRemap) holds {size} addresses, fewer than the"
                    f" provider's pod range {', '.join(map(str, larger))}: pod IPs beyond the first {size} of that"
                    f" range are refused (their pods show no IP); use a remap range of prefix /{prefix} or shorter"
                )
            if other_family := [s for s in self.sources if s.version != self.target.version]:
                problems.append(
                    f"remap range {self.target} (spec.networking.podCIDRRemap) cannot hold the provider's pod range"
                    f" {', '.join(map(str, other_family))} of another address family: its pod IPs are refused"
                )
            self.problem = "; ".join(problems)
            if overlapping := overlaps(self.target, own):
                self.conflict = (
                    REMAP_OVERLAPS_CONSUMER,
                    f"remap range {self.target} (spec.networking.podCIDRRemap) overlaps the consumer's {overlapping}:"
                    " no pod IP of this provider is shown; choose a remap range the consumer does not use",
                )
        else:
            for source in self.sources:
                if overlapping := overlaps(source, own):
                    self.conflict = (
                        PROVIDER_RANGE_OVERLAPS_CONSUMER,
                        f"the provider's pod range {source} overlaps the consumer's {overlapping}: no pod IP of"
                        " this provider is shown; set spec.networking.podCIDRRemap to a range the consumer does"
                        " not use",
                    )
                    break

    def __call__(self, ip: str) -> str | None:
        if self.conflict is not None:
            return None
        address = _address(ip)
        if address is None:
            return None
        source = next((s for s in self.sources if address in s), None)
        if source is None:
            return None
        if self.target is None:
            return str(address)
        offset = int(address) - int(source.network_address)
        if source.version != self.target.version or offset >= self.target.num_addresses:
            return None
        return str(self.target.network_address + offset)

    def seen_ranges(self) -> list[str]:
        """The provider's pod ranges as the consumer sees them: where its accepted pod IPs are shown."""
        if self.conflict is not None:
            return []
        if self.target is None:
            return [str(source) for source in self.sources]
        return [str(self.target)] if any(s.version == self.target.version for s in self.sources) else []

    def refusal(self, ip: str) -> tuple[str, str]:
        """(reason, message) for the local pod when `ip` is refused."""
        if self.conflict is not None:
            return self.conflict
        shown = repr(str(ip)[:50])
        address = _address(ip)
        if any(address is not None and address in source for source in self.sources):
            return (
                POD_IP_NOT_TRANSLATABLE,
                f"the provider reported pod IP {shown}, which cannot be translated: {self.problem}",
            )
        if address is not None and (refused := self._refused_range(address)) is not None:
            cidr, _, why = refused
            return (
                POD_IP_NOT_CONSENTED,
                f"the provider reported pod IP {shown}, inside its announced range {cidr}, which the consumer refuses"
                f" ({why}): the pod shows no IP, so no Service sends it traffic",
            )
        announced = ", ".join(map(str, self.sources)) or "none yet"
        return (
            POD_IP_OUTSIDE_PROVIDER_RANGES,
            f"the provider reported pod IP {shown}, outside the pod ranges it announced ({announced}): the pod shows"
            " no IP, so no Service sends it traffic",
        )

    def same_as(self, other: IPTranslator) -> bool:
        """Does `other` decide every IP as this one does, and say the same about it?"""
        return self._verdict() == other._verdict()

    def _verdict(self) -> tuple:
        return self.sources, self.target, self.problem, self.conflict, self.ignored, self.consented, self.refused

    def _refused_range(self, address) -> tuple[str, str, str] | None:
        for refused in self.refused:
            network = _network_or_none(refused[0])
            if network is not None and address.version == network.version and address in network:
                return refused
        return None


def consented_pod_cidrs(networking: Mapping) -> list[str] | None:
    """What a ForeignCluster's spec.networking consents to of the provider's announced pod ranges: its podCIDRs,
    which every peering run records; None (no check, the ForeignCluster says NoConsentRecorded) when none are, as in
    a peering of an earlier release until its next run, which must keep its traffic through an upgrade."""
    if "podCIDRs" in networking:
        return list(networking.get("podCIDRs") or [])
    return None


def _network_or_none(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def _address(ip: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(ip) if isinstance(ip, str) else None
    except ValueError:
        return None


def provider_networks(cidrs: list) -> tuple[list[Network], list[str]]:
    """The provider's announced pod ranges that are networks, of the first PROVIDER_RANGES_LIMIT; what was ignored."""
    networks, ignored = [], []
    for cidr in cidrs[:PROVIDER_RANGES_LIMIT]:
        network = _network(cidr)
        if network is None:
            ignored.append(repr(cidr)[:60])
        elif network not in networks:
            networks.append(network)
    if len(cidrs) > PROVIDER_RANGES_LIMIT:
        ignored.append(f"{len(cidrs) - PROVIDER_RANGES_LIMIT} beyond the first {PROVIDER_RANGES_LIMIT}")
    return networks, ignored


def own_ranges(entries: Iterable[tuple[str, str]]) -> tuple[OwnRange, ...]:
    """(network, what) for each (CIDR or address, what) of the consumer's; what is not one is skipped."""
    ranges = []
    for cidr, what in entries:
        network = _network(cidr)
        if network is not None:
            ranges.append((network, what))
    return tuple(ranges)


def overlaps(network: Network, own: Iterable[OwnRange]) -> str:
    """What of the consumer's (`own`, and SPECIAL_RANGES) overlaps `network`, for a message; empty when nothing."""
    hits = [f"{what} {_shown(range_)}" for range_, what in (*SPECIAL_RANGES, *own) if network.overlaps(range_)]
    if len(hits) > OVERLAPS_SHOWN:
        hits[OVERLAPS_SHOWN:] = [f"{len(hits) - OVERLAPS_SHOWN} more"]
    return ", ".join(hits)


def node_entries(node: dict) -> list[tuple[str, str]]:
    """A consumer node's pod ranges and addresses (names, like Hostname, are skipped later)."""
    name = node["metadata"]["name"]
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ranges = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    entries = [(cidr, f"node {name}'s pod range") for cidr in ranges]
    entries += [(a.get("address") or "", f"node {name}'s address") for a in status.get("addresses") or []]
    return entries


def service_cidr_entries(service_cidr: dict) -> list[tuple[str, str]]:
    name = service_cidr["metadata"]["name"]
    return [
        (cidr, f"service range (ServiceCIDR {name})") for cidr in (service_cidr.get("spec") or {}).get("cidrs") or []
    ]


def kubernetes_service_entries(service: dict | None) -> list[tuple[str, str]]:
    """The `kubernetes` Service's cluster IPs: inside the consumer's service range (the first of it, usually)."""
    spec = (service or {}).get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    return [(ip, "kubernetes Service's cluster IP") for ip in ips if ip and ip != "None"]


def api_server_entries(endpoint_slice: dict | None) -> list[tuple[str, str]]:
    """The API server's own addresses, from the `kubernetes` Service's EndpointSlice."""
    return [
        (address, "API server's address")
        for endpoint in (endpoint_slice or {}).get("endpoints") or []
        for address in endpoint.get("addresses") or []
    ]


def _network(cidr: object) -> Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False) if isinstance(cidr, str) else None
    except ValueError:
        return None


def _shown(network: Network) -> str:
    return str(network.network_address) if network.num_addresses == 1 else str(network)
