"""The gateway's host side: WireGuard interfaces, routes and iptables rules, converged to a plan.

Runs where the gateway runs (a node's network namespace: host network, NET_ADMIN). A kernel with
WireGuard gets kernel interfaces; otherwise each interface is served by a `wireguard-go` child that
dies with the gateway (PR_SET_PDEATHSIG), so a killed gateway leaves no tunnel behind and its
restart builds them again. Everything is found again by the interface prefix, so a restart also
removes tunnels of peerings deleted while it was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import json
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ..logs import fields
from .plan import (
    JUMPS,
    MTU,
    NODE_JUMP,
    RETIRED_JUMPS,
    ROUTE_METRIC,
    ROUTE_PROTOCOL,
    Tunnel,
    iptables_restore,
    node_rules,
    routes,
    wg_set_arguments,
)

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"
INTERFACE_APPEARS_SECONDS = 15.0


class DataplaneError(Exception):
    """A host command failed; the message names it and what it said."""


@dataclass(frozen=True)
class PeerTraffic:
    """What `wg show` says of a tunnel's one peer."""

    latest_handshake: int  # seconds since the epoch, 0: never
    received_bytes: int


async def run(*command: str, stdin: str | None = None, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate(stdin.encode() if stdin is not None else None)
    except asyncio.CancelledError:
        await _end(process)  # a stopping process's cleanup must not race a command still on its way
        raise
    if check and process.returncode != 0:
        # The command line only: a private key travels on standard input, never in argv.
        raise DataplaneError(f"{' '.join(command)}: {err.decode(errors='replace').strip() or process.returncode}")
    return out.decode()


async def succeeds(*command: str) -> bool:
    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        return await process.wait() == 0
    except asyncio.CancelledError:
        await _end(process)
        raise


async def _end(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await asyncio.shield(process.wait())


async def _jump_first(table: str, builtin: str, chain: str) -> None:
    """A jump to one of Catamaran's chains, first in the built-in chain, once."""
    if not await succeeds("iptables", "-t", table, "-C", builtin, "-j", chain):
        await run("iptables", "-t", table, "-I", builtin, "1", "-j", chain)


async def _remove_chain(table: str, builtin: str, chain: str) -> None:
    """Every jump to one of Catamaran's chains, then the chain."""
    while await succeeds("iptables", "-t", table, "-D", builtin, "-j", chain):
        pass
    await run("iptables", "-t", table, "-F", chain, check=False)
    await run("iptables", "-t", table, "-X", chain, check=False)


async def _link_exists(name: str) -> bool:
    # Asked of `ip`, not /sys: a process that only entered a network namespace (nsenter --net) still sees the
    # sysfs, and so the interfaces, of the namespace that mounted it.
    return await succeeds("ip", "link", "show", "dev", name)


def _check_forwarding() -> None:
    # /proc/sys/net shows the network namespace of the process reading it: the node's. A pod cannot set it (its
    # /proc/sys is read-only), and a node without it drops every packet between its pods and the tunnels.
    if Path(IP_FORWARD).read_text().strip() != "1":
        raise DataplaneError(f"{IP_FORWARD} is 0 on this node: it must forward between its pods and the tunnels")


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Dataplane:
    def __init__(self, interface_prefix: str, wireguard_go: str = "wireguard-go"):
        self.prefix = interface_prefix
        self.wireguard_go = wireguard_go
        self.userspace: dict[str, asyncio.subprocess.Process] = {}
        self.kernel_wireguard: bool | None = None  # learnt on the first interface
        self.retired_removed = False  # an earlier release's chains, removed once per process

    async def apply(self, tunnels: list[Tunnel]) -> None:
        if tunnels:
            _check_forwarding()
        wanted = {tunnel.interface: tunnel for tunnel in tunnels}
        existing = await self.interfaces()
        for name in sorted(existing - set(wanted)):
            await self._delete(name)
        for tunnel in tunnels:
            if tunnel.interface not in existing or not self._alive(tunnel.interface):
                await self._create(tunnel.interface)
            await self._configure(tunnel)
        await self._routes(routes(tunnels), set(wanted))
        await self._rules(tunnels)

    async def interfaces(self) -> set[str]:
        links = json.loads(await run("ip", "-j", "link", "show") or "[]")
        return {link["ifname"] for link in links if link["ifname"].startswith(self.prefix)}

    async def traffic(self, interface: str) -> dict[str, PeerTraffic]:
        """Peer public key -> its latest handshake and bytes received (`wg show … dump`)."""
        lines = (await run("wg", "show", interface, "dump")).splitlines()[1:]  # the first line is the interface's
        found = {}
        for line in lines:
            parts = line.split("\t")
            if len(parts) >= 7:
                found[parts[0]] = PeerTraffic(latest_handshake=int(parts[4]), received_bytes=int(parts[5]))
        return found

    async def remove_all(self) -> None:
        """Everything of this gateway off the host: its interfaces (their routes and userspace processes go with
        them), the jumps to Catamaran's chains and the chains themselves."""
        for name in sorted(await self.interfaces()):
            await self._delete(name)
        for jump in (*JUMPS, *RETIRED_JUMPS):
            await _remove_chain(*jump)

    def _alive(self, name: str) -> bool:
        process = self.userspace.get(name)
        return process is None or process.returncode is None

    async def _create(self, name: str) -> None:
        await self._delete(name)
        if self.kernel_wireguard is not False:
            self.kernel_wireguard = await succeeds("ip", "link", "add", name, "type", "wireguard")
        if not self.kernel_wireguard:
            process = await asyncio.create_subprocess_exec(
                self.wireguard_go,
                "-f",
                name,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            self.userspace[name] = process
            deadline = time.monotonic() + INTERFACE_APPEARS_SECONDS
            while not await _link_exists(name):
                if process.returncode is not None or time.monotonic() > deadline:
                    ended = f"exited with {process.returncode}" if process.returncode is not None else "still running"
                    raise DataplaneError(f"{self.wireguard_go} {name} did not make its interface ({ended})")
                await asyncio.sleep(0.05)
        log.info("tunnel interface created", extra=fields(interface=name, kernel=bool(self.kernel_wireguard)))

    async def _configure(self, tunnel: Tunnel) -> None:
        # Every time, not only at creation: an interface made late (a slow start) must still come up.
        await run("ip", "link", "set", tunnel.interface, "mtu", str(MTU), "up")
        await run("wg", "set", *wg_set_arguments(tunnel), stdin=tunnel.private_key)
        peers = (await run("wg", "show", tunnel.interface, "peers")).split()
        for stale in peers:
            if stale != tunnel.peer_public_key:
                await run("wg", "set", tunnel.interface, "peer", stale, "remove")

    async def _delete(self, name: str) -> None:
        process = self.userspace.pop(name, None)
        if process is not None and process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 5)
        if await _link_exists(name):
            await run("ip", "link", "delete", name, check=False)

    async def _routes(self, wanted: dict[str, str], interfaces: set[str]) -> None:
        current = json.loads(await run("ip", "-j", "route", "show") or "[]")
        for route in current:
            if route.get("dev", "").startswith(self.prefix) and wanted.get(route["dst"]) != route["dev"]:
                await run("ip", "route", "delete", route["dst"], "dev", route["dev"], check=False)
        for destination, interface in wanted.items():
            if interface in interfaces:
                await run("ip", "route", "replace", destination, "dev", interface)

    async def _rules(self, tunnels: list[Tunnel]) -> None:
        if not self.retired_removed:
            for jump in RETIRED_JUMPS:
                await _remove_chain(*jump)
            self.retired_removed = True
        await run("iptables-restore", "--noflush", stdin=iptables_restore(tunnels))
        for jump in JUMPS:
            await _jump_first(*jump)


class NodeRouting:
    """A node other than the gateway's: the peers' pod ranges routed to the gateway's node, the way this node reaches
    that node's address (its next hop, when it is not on a shared link), and kept from the CNI's masquerading.

    The routes carry ROUTE_PROTOCOL and ROUTE_METRIC: a route of the same range that someone else made (metric 0, as
    an administrator's or a CNI's) is neither replaced nor removed, and wins."""

    async def apply(self, ranges: list[str], gateway_address: str | None) -> None:
        """Route `ranges` (node_ranges) to `gateway_address`, or while it is unknown (the gateway's pod between two
        nodes) make them unreachable, so no pod's packet to them leaks out by the default route, masqueraded."""
        if gateway_address is None:
            kind, next_hop = ("unreachable",), ()
        else:
            via, device = await self.next_hop(gateway_address)
            kind, next_hop = (), ("via", via, "dev", device)
        wanted = set(ranges)
        for route in await self.routes():
            destination = str(ipaddress.ip_network(route["dst"], strict=False))  # `ip` shows a /32 without its length
            unreachable = route.get("type") == "unreachable"
            if gateway_address is None:
                current = unreachable
            else:
                current = not unreachable and (route.get("gateway"), route.get("dev")) == (via, device)
            if destination not in wanted or not current:
                await run("ip", "route", "delete", destination, *OWN_ROUTE, check=False)
        for destination in ranges:
            await run("ip", "route", "replace", *kind, destination, *next_hop, *OWN_ROUTE)
        await run("iptables-restore", "--noflush", stdin=node_rules(ranges))
        await _jump_first(*NODE_JUMP)

    async def next_hop(self, address: str) -> tuple[str, str]:
        """(next hop, interface) of this node's path to `address`: the address itself on a shared link, else the
        router this node sends it to (which must then route the ranges too: docs/network-fabric.md)."""
        found = json.loads(await run("ip", "-j", "route", "get", address) or "[]")
        route = found[0] if found else {}
        if not route.get("dev") or route.get("dev") == "lo" or route.get("type") == "local":
            raise DataplaneError(f"the gateway's node address {address} is this node's own, or not routed from it")
        return route.get("gateway") or address, route["dev"]

    async def routes(self) -> list[dict]:
        return json.loads(await run("ip", "-j", "route", "show", "proto", str(ROUTE_PROTOCOL)) or "[]")

    async def remove_all(self) -> None:
        await run("ip", "route", "flush", "proto", str(ROUTE_PROTOCOL), check=False)
        await _remove_chain(*NODE_JUMP)


OWN_ROUTE = ("proto", str(ROUTE_PROTOCOL), "metric", str(ROUTE_METRIC))
