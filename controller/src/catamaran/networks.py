# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Pod ranges, shared by the provider's manager and the collection (symlinked as module_utils/networks.py). Pure."""

import ipaddress


def covering_networks(ranges):
    """One network per address family holding every range, so IP offsets stay unique when translated."""
    by_family = {}
    for entry in ranges:
        network = ipaddress.ip_network(entry, strict=False)
        by_family.setdefault(network.version, []).append(network)
    covering = []
    for networks in by_family.values():
        supernet = networks[0]
        while not all(n.subnet_of(supernet) for n in networks):
            supernet = supernet.supernet()
        covering.append(str(supernet))
    return sorted(covering)


# Where the fabric takes the ranges one cluster sees another's overlapping pods at (RFC 6598, shared address space:
# no cluster's pods or Services are expected there).
DEFAULT_REMAP_POOL = "100.64.0.0/10"


def overlaps_any(cidr, others):
    network = ipaddress.ip_network(cidr, strict=False)
    return any(network.overlaps(ipaddress.ip_network(other, strict=False)) for other in others)


def free_range(like, taken, pool=DEFAULT_REMAP_POOL):
    """The first range of the pool as large as `like` that overlaps nothing `taken`; None when none is left."""
    size = ipaddress.ip_network(like, strict=False)
    space = ipaddress.ip_network(pool, strict=False)
    if size.version != space.version or size.prefixlen < space.prefixlen:
        return None
    for candidate in space.subnets(new_prefix=size.prefixlen):
        if not overlaps_any(candidate, taken):
            return str(candidate)
    return None


def remapper(pairs):
    """ip -> the address it is seen at (host bits kept) for [(range, seen range)]; other addresses unchanged."""
    remapped = [
        (ipaddress.ip_network(real, strict=False), ipaddress.ip_network(seen, strict=False))
        for real, seen in pairs
        if real != seen
    ]

    def translate(ip):
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return ip
        for real, seen in remapped:
            if address.version == real.version and address in real:
                return str(seen.network_address + (int(address) - int(real.network_address)))
        return ip

    return translate


def remap_pairs(entries):
    """[{podCIDR, seenAs}] (a localPodCIDRRemap field) as ((range, seen range), ...)."""
    return tuple((entry["podCIDR"], entry["seenAs"]) for entry in entries or () if entry.get("podCIDR"))


def seen_as(ranges, taken, kept=(), pool=DEFAULT_REMAP_POOL):
    """[(range, range another cluster sees it at)]: itself unless it overlaps `taken`, else a free range of the pool.

    `kept` (earlier pairs) are reused while still free, so a peering's mapping does not move when nothing
    forces it to. Raises ValueError naming the range when the pool has no room left.
    """
    earlier = dict((real, seen) for real, seen in kept)
    pairs = []
    for real in ranges:
        if not overlaps_any(real, taken):
            pairs.append((real, real))
            continue
        seen = earlier.get(real)
        if seen is None or overlaps_any(seen, taken) or overlaps_any(seen, [s for _, s in pairs]):
            seen = free_range(real, list(taken) + [s for _, s in pairs], pool)
        if seen is None:
            raise ValueError(f"no range of {pool} left to remap {real} onto (every one overlaps another cluster's)")
        pairs.append((real, seen))
    return pairs


def reachable_through_consumer(others_seen, provider_taken):
    """The consumer's other providers' pod ranges (as the consumer sees them) a provider can reach through the
    consumer's gateway: those that overlap nothing the provider already uses. Its pods then reach the other
    providers' pods at the very addresses the consumer's EndpointSlices hold for them."""
    return [cidr for cidr in others_seen if not overlaps_any(cidr, provider_taken)]


# Consent: the provider's pod ranges the consumer agreed to route, recorded on its ForeignCluster at peering
# (spec.networking.podCIDRs). A provider's admin may announce other ranges at any time (its ResourceOffer's
# status.podCIDRs); only what lies inside the consent, and apart from every other provider's, is ever accepted.
OUTSIDE_CONSENT = "OutsideConsent"
OTHER_PROVIDERS_RANGE = "AnotherProvidersRange"
NOT_A_RANGE = "NotARange"


def normalised(cidrs):
    """CIDRs as networks write them (host bits cleared), each once, in the order given."""
    result = []
    for cidr in cidrs:
        network = str(ipaddress.ip_network(cidr, strict=False))
        if network not in result:
            result.append(network)
    return result


def judge_announced(announced, consented, others=None):
    """(accepted ranges, [(range, reason, why)] refused) for a provider's announced pod ranges.

    Accepted: inside one `consented` range (the whole of it or a sub-range) and overlapping no range of another
    provider (`others`: {provider: its ranges as this cluster sees them}). A longer prefix inside another provider's
    range is refused even when consented: routes take the longest prefix, so it would take that provider's traffic.
    """
    consent = _networks(consented)
    accepted, refused = [], []
    for cidr in announced:
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except (TypeError, ValueError):
            refused.append((repr(cidr)[:60], NOT_A_RANGE, "not a CIDR"))
            continue
        inside = any(network.version == c.version and network.subnet_of(c) for c in consent)
        taken_by = _provider_overlapping(network, others or {})
        if not inside:
            agreed = ", ".join(str(c) for c in consent) or "none recorded"
            refused.append((str(network), OUTSIDE_CONSENT, f"outside the consented ranges ({agreed})"))
        elif taken_by:
            refused.append((str(network), OTHER_PROVIDERS_RANGE, "overlaps provider {}'s range {}".format(*taken_by)))
        elif str(network) not in accepted:
            accepted.append(str(network))
    return accepted, refused


def _provider_overlapping(network, others):
    """(provider, its range) of the first other provider whose range overlaps `network`; None when none does."""
    for provider in sorted(others):
        for other in _networks(others[provider]):
            if network.version == other.version and network.overlaps(other):
                return provider, str(other)
    return None


def _networks(cidrs):
    """The CIDRs that are networks (the CRD validates them; a hand-made object may not have been)."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except (TypeError, ValueError):
            continue
    return networks


def consented_view(networking):
    """A ForeignCluster's spec.networking: the ranges the consumer agreed to see the provider's pods at (its remap
    range when it has one, else the consented pod ranges); None when no consent is recorded."""
    if networking.get("podCIDRRemap"):
        return [networking["podCIDRRemap"]]
    if "podCIDRs" in networking:
        return list(networking["podCIDRs"] or [])
    return None
