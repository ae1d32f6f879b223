"""What the consumer takes from a provider's reports, and its own addresses no provider pod IP may take. Pure.

A provider's administrator can write anything into the ShadowPod status, the Events of its twin namespaces
and its ResourceOffer. Text copied onto the consumer's objects is bounded here; pod IPs are checked against
the consumer's own ranges (forge.IPTranslator), since the consumer's EndpointSlices are built from them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

# Kubernetes' reason convention: one CamelCase word. A reason that is not one is replaced by PROVIDER_REASON.
REASON_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9]{0,127}")
PROVIDER_REASON = "ProviderReported"
# Messages copied from a provider: at most this many characters, the marker included when cut.
MESSAGE_LIMIT = 1024
TRUNCATION_MARK = "… (truncated)"
# Control characters (but tab and newline, which the kubelet's own messages use) and the invisible ones that
# reorder or hide text in a terminal: bidirectional overrides and isolates, zero-width marks, byte order mark.
# Lone surrogates are dropped too: they cannot be sent as UTF-8.
_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)
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


def sanitised_reason(reason: object) -> str:
    """A provider's reason if it follows Kubernetes' convention, else PROVIDER_REASON; no reason stays empty."""
    if not reason:
        return ""
    return reason if isinstance(reason, str) and REASON_PATTERN.fullmatch(reason) else PROVIDER_REASON


def sanitised_message(message: object) -> str:
    """A message without control characters, cut to MESSAGE_LIMIT characters with TRUNCATION_MARK."""
    if not message:
        return ""
    # Cut before cleaning, so a huge message costs no more than a long one.
    text = _UNPRINTABLE.sub("", str(message)[: 4 * MESSAGE_LIMIT])
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[: MESSAGE_LIMIT - len(TRUNCATION_MARK)] + TRUNCATION_MARK


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
