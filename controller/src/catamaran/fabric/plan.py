"""What a gateway's host should hold for its tunnels: interfaces, routes and iptables rules; and what the cluster's
other nodes hold to reach them (routes to the gateway's node, one nat chain). Pure.

Each peering is one WireGuard interface with one peer, so keys, health and teardown are per peering
and stopping one tunnel touches nothing else. The provider's gateway listens (its address and port
are given to the consumer at peering); the consumer's dials it and keeps the path open with
keepalives, so a consumer behind NAT works too.

Overlapping pod ranges are remapped 1:1 (NETMAP keeps the host bits). Each side's gateway
translates its own pods' addresses into what the other side sees them as, and back: the source of
what leaves through the tunnel, the destination of what arrives. So each side routes and accepts
the other's pods only at the addresses it sees them at, which never collide with its own.

Rules live in Catamaran's own chains, jumped to from the first position of the built-in ones, and
are rewritten whole (`iptables-restore --noflush`): a rule is never left behind by a change.
- nat POSTROUTING: what leaves through a tunnel keeps its pod address, or has it remapped (the CNI
  would masquerade it to the node's address, and the other side could not tell pods apart).
- nat PREROUTING: what arrives for a remapped address of this side's pods goes to the real one.
- mangle FORWARD: TCP's MSS clamped to the tunnel's MTU in both directions (pods keep MTU 1500).
- mangle FORWARD and INPUT: through a tunnel only connections to what the peering shares are opened
  (a tenant's: the pods of its twin namespaces; a provider's: the consumer's pods of the namespaces
  extended to it, and the consumer's other providers it relays to); replies to connections opened from
  this side pass, and nothing of the node itself is reachable. In mangle, not filter: NetworkPolicy
  engines (kube-router, Calico) keep their own jump first in filter FORWARD and accept there what their
  policies allow (everything, for pods no policy selects), so a filter chain after theirs never saw
  that traffic. The mangle hooks run before filter's.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field

# Userspace and kernel WireGuard alike; 80 bytes of IPv4/UDP/WireGuard framing under a 1500-byte underlay.
MTU = 1420
KEEPALIVE_SECONDS = 5
INTERFACE_NAME_MAX = 15
DEFAULT_INTERFACE_PREFIX = "cmgw"
CHAIN = "CATAMARAN-FABRIC"
JUMPS = (
    ("mangle", "FORWARD", CHAIN),
    ("mangle", "INPUT", f"{CHAIN}-INPUT"),
    ("nat", "POSTROUTING", f"{CHAIN}-POSTROUTING"),
    ("nat", "PREROUTING", f"{CHAIN}-PREROUTING"),
    ("mangle", "FORWARD", f"{CHAIN}-MSS"),
)
# Where gateways of release 0.2.0 filtered: removed from a node the gateway takes over.
RETIRED_JUMPS = (("filter", "FORWARD", CHAIN), ("filter", "INPUT", f"{CHAIN}-INPUT"))
TABLES = ("nat", "mangle")


@dataclass(frozen=True)
class Tunnel:
    """One peering's tunnel as this cluster's gateway runs it."""

    peering: str  # the other cluster's id
    interface: str
    private_key: str = field(repr=False)
    peer_public_key: str
    remote_cidrs: tuple[str, ...]  # the peer's pods as this cluster sees them: routed in, accepted from
    listen_port: int | None = None  # provider side: where the consumer's gateway connects
    peer_endpoint: str | None = None  # consumer side: the provider's gateway, host:port
    # The only addresses or ranges the peer may open connections to (what the peering shares); None: no limit.
    allowed_destinations: tuple[str, ...] | None = None
    # This side's pod ranges the peer sees elsewhere: (real range, range the peer sees it as), same size.
    remapped: tuple[tuple[str, str], ...] = ()


def check_remap(real: str, seen: str) -> None:
    """NETMAP maps address to address: both ranges of one family and size."""
    a, b = ipaddress.ip_network(real, strict=False), ipaddress.ip_network(seen, strict=False)
    if a.version != b.version or a.prefixlen != b.prefixlen:
        raise ValueError(f"pod range {a} cannot be remapped 1:1 onto {b}: the two need the same family and prefix")


def interface_name(prefix: str, peering: str) -> str:
    """Unique per host (userspace WireGuard's control socket is named after it), stable per peering."""
    room = INTERFACE_NAME_MAX - len(prefix)
    if room < 4:
        raise ValueError(f"interface prefix {prefix!r} leaves fewer than 4 characters of the {INTERFACE_NAME_MAX}")
    return prefix + hashlib.sha256(peering.encode()).hexdigest()[:room]


def routes(tunnels: list[Tunnel]) -> dict[str, str]:
    """Destination range -> interface."""
    wanted: dict[str, str] = {}
    for tunnel in tunnels:
        for cidr in tunnel.remote_cidrs:
            wanted[str(ipaddress.ip_network(cidr, strict=False))] = tunnel.interface
    return wanted


def iptables_restore(tunnels: list[Tunnel]) -> str:
    """Input for `iptables-restore --noflush`: Catamaran's chains, each flushed and written whole."""
    rules: dict[tuple[str, str], list[str]] = {(table, chain): [] for table, _, chain in JUMPS}
    for tunnel in sorted(tunnels, key=lambda t: t.interface):
        interface = tunnel.interface
        for real, seen in tunnel.remapped:
            rules["nat", f"{CHAIN}-POSTROUTING"].append(f"-o {interface} -s {real} -j NETMAP --to {seen}")
            rules["nat", f"{CHAIN}-PREROUTING"].append(f"-i {interface} -d {seen} -j NETMAP --to {real}")
        rules["nat", f"{CHAIN}-POSTROUTING"].append(f"-o {interface} -j ACCEPT")
        for direction in ("-o", "-i"):
            rules["mangle", f"{CHAIN}-MSS"].append(
                f"{direction} {interface} -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu"
            )
        if tunnel.allowed_destinations is None:
            continue
        replies = f"-i {interface} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
        forward = rules["mangle", CHAIN]
        forward.append(replies)
        # iptables is IPv4's: an IPv6 destination (a dual-stack pod's second IP) is not this table's to allow.
        networks = {ipaddress.ip_network(d, strict=False) for d in tunnel.allowed_destinations}
        destinations = sorted(str(n) for n in networks if n.version == 4)
        forward += [f"-i {interface} -d {destination} -j ACCEPT" for destination in destinations]
        forward.append(f"-i {interface} -j DROP")
        rules["mangle", f"{CHAIN}-INPUT"] += [replies, f"-i {interface} -j DROP"]
    lines: list[str] = []
    for table in TABLES:
        chains = [(chain, body) for (t, chain), body in rules.items() if t == table]
        lines.append(f"*{table}")
        lines += [f":{chain} - [0:0]" for chain, _ in chains]
        lines += [f"-A {chain} {rule}" for chain, body in chains for rule in body]
        lines.append("COMMIT")
    return "\n".join(lines) + "\n"


# The other nodes of the gateway's cluster (fabric/routeagent.py): the routes to the gateway's node carry a protocol
# of their own, so the agent finds and removes its routes whatever else routes the node, and a metric of their own, so
# they never replace a route of the same range someone else made (metric 0 wins); its one nat chain keeps the CNI from
# masquerading pod traffic to those ranges (the gateways admit connections by pod address).
ROUTE_PROTOCOL = 157
ROUTE_METRIC = 157
NODE_CHAIN = "CATAMARAN-ROUTES"
NODE_JUMP = ("nat", "POSTROUTING", NODE_CHAIN)


def node_ranges(ranges) -> list[str]:
    """The IPv4 ranges a node sends to the gateway's node, normalised and sorted (iptables and a v4 next hop are
    IPv4's)."""
    networks = {ipaddress.ip_network(cidr, strict=False) for cidr in ranges}
    return [str(n) for n in sorted(n for n in networks if n.version == 4)]


def node_rules(ranges: list[str]) -> str:
    """Input for `iptables-restore --noflush`: the node's chain, flushed and written whole."""
    table, _, chain = NODE_JUMP
    body = [f"-A {chain} -d {cidr} -j ACCEPT" for cidr in ranges]
    return "\n".join([f"*{table}", f":{chain} - [0:0]", *body, "COMMIT"]) + "\n"


def wg_set_arguments(tunnel: Tunnel) -> list[str]:
    """`wg set <interface> …` for the tunnel; the private key is read from standard input, never a file or argv."""
    arguments = [tunnel.interface, "private-key", "/dev/stdin"]
    if tunnel.listen_port:
        arguments += ["listen-port", str(tunnel.listen_port)]
    arguments += ["peer", tunnel.peer_public_key, "allowed-ips", ",".join(tunnel.remote_cidrs)]
    arguments += ["persistent-keepalive", str(KEEPALIVE_SECONDS)]
    if tunnel.peer_endpoint:
        arguments += ["endpoint", tunnel.peer_endpoint]
    return arguments
