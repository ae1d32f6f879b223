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
