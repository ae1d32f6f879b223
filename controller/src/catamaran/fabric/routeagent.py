"""The route agent: on every node of a cluster but the gateway's, the peers' pod ranges go to the gateway's node.

The gateway builds the tunnels on its own node only; a pod on any other node reaches the other clusters because this
agent (a DaemonSet in deployment mode: host network, NET_ADMIN) routes each range the gateway routes into a tunnel
(fabric/peerings.py: the same reading of the same objects) to the gateway's node, and exempts it from the CNI's
masquerading. The gateway's node is where its pod runs (status.hostIP): when the gateway moves, the routes follow;
while its pod is on no node, the ranges are unreachable rather than sent out by the default route. On the gateway's
node the agent holds nothing.

Routes carry their own protocol number and metric (fabric/plan.py), so a restart finds and keeps them: an agent
restarted (an upgrade rolling through the DaemonSet) leaves its node's traffic flowing. It removes them when stopped
for good: its DaemonSet deleted (the gateway turned off, teardown), or when run without one. The host is checked
again every RESYNC_SECONDS, since a CNI or an administrator may flush routes without the API knowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod

from ..constants import FABRIC_NAMESPACE, SYSTEM_NAMESPACE, TERMINAL_PHASES
from ..kube.informer import Informer, changed, enqueue
from ..kube.resources import ForeignCluster, ResourceOffer
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict
from .dataplane import DataplaneError, NodeRouting
from .peerings import consumer_behind, provider_behind, routed_ranges
from .plan import node_ranges

log = logging.getLogger(__name__)

NODE = "node"
RESYNC_SECONDS = 30.0
STOP_CHECK_SECONDS = 5.0


def _gateway_placement(pod) -> tuple[str, str] | None:
    """(node name, the node's IPv4 address) of a gateway pod placed on a node and not going; None otherwise."""
    status = pod.status
    if pod.metadata.deletionTimestamp or status is None or status.phase in TERMINAL_PHASES:
        return None
    addresses = [entry.ip for entry in status.hostIPs or []] or [status.hostIP]
    ipv4 = [a for a in addresses if a and ipaddress.ip_address(a).version == 4]
    node = pod.spec.nodeName if pod.spec else None
    return (node, ipv4[0]) if node and ipv4 else None


def wanted(behind, gateways, node_name: str) -> tuple[list[str], str | None, str]:
    """(the ranges this node holds, the gateway node's address or None, what it does and why).

    `behind` holds each Fabric peering's (peer, ranges) (fabric/peerings.py; None for others); `gateways` the
    placements of the gateway's pods (_gateway_placement). No ranges: nothing held; the gateway on this node: nothing,
    it routes them itself; no gateway placed: the ranges held unreachable."""
    ranges = node_ranges(cidr for peering in behind if peering for cidr in peering[1])
    placed = sorted(p for p in gateways if p)
    if not ranges:
        return [], None, "no peering in mode Fabric announces a pod range"
    if any(node == node_name for node, _ in placed):
        return [], None, "the gateway runs on this node and routes the ranges itself"
    if not placed:
        return ranges, None, "the gateway's pod is on no node: the ranges are unreachable until it is"
    node, address = placed[0]
    return ranges, address, f"routed to the gateway's node {node}"


class RouteAgent:
    def __init__(
        self,
        client: AsyncClient,
        routing: NodeRouting,
        node_name: str,
        gateway_labels: dict[str, str],
        namespace: str = SYSTEM_NAMESPACE,
        daemonset: str | None = None,
    ):
        self.client = client
        self.routing = routing
        self.node_name = node_name
        self.daemonset = daemonset
        # Only what the routes depend on is cached: an offer's usage or a ForeignCluster's conditions change often.
        self.foreigns = Informer(
            client, ForeignCluster, name="foreign-clusters", namespace=namespace,
            transform=lambda o: provider_behind(as_dict(o)),
        )  # fmt: skip
        self.offers = Informer(
            client, ResourceOffer, name="resource-offers", transform=lambda o: consumer_behind(as_dict(o))
        )
        self.gateways = Informer(
            client, Pod, name="gateway-pods", namespace=FABRIC_NAMESPACE, labels=gateway_labels,
            transform=_gateway_placement,
        )  # fmt: skip
        self.queue = WorkQueue("routes", self._reconcile, workers=1)
        for informer in self._informers:
            informer.on_change(enqueue(self.queue, key=lambda _: NODE, when=changed))
        self._said: str | None = None

    @property
    def _informers(self) -> tuple[Informer, ...]:
        return (self.foreigns, self.offers, self.gateways)

    def tasks(self):
        loops = [self.queue.run(), self._resync(), self._until_stopped()]
        return [*(informer.run() for informer in self._informers), *loops]

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            self.queue.add(NODE)

    async def _until_stopped(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            if await self._stopped_for_good():
                log.info("stopping for good: removing the routes to the gateway's node")
                with contextlib.suppress(DataplaneError, OSError):
                    await self.routing.remove_all()
            else:
                log.info("stopping: the routes stay for the next agent on this node")

    async def _stopped_for_good(self) -> bool:
        """No DaemonSet to bring an agent back: it is deleted or being deleted, or there was none."""
        if self.daemonset is None:
            return True
        try:
            owner = await asyncio.wait_for(
                self.client.get(DaemonSet, self.daemonset, namespace=FABRIC_NAMESPACE), STOP_CHECK_SECONDS
            )
        except ApiError as error:
            return error.status.code == 404
        except (OSError, TimeoutError):
            return False  # the API out of reach: an agent restarts more often than it goes for good
        return owner.metadata.deletionTimestamp is not None

    async def _reconcile(self, key: str) -> None:
        for informer in self._informers:
            await informer.synced.wait()
        routed, _ = routed_ranges(self.foreigns.cache.values())  # the gateway logs what it leaves out
        behind = [*routed.items(), *self.offers.cache.values()]
        ranges, address, doing = wanted(behind, self.gateways.cache.values(), self.node_name)
        try:
            await self.routing.apply(ranges, address)
        except DataplaneError as error:
            raise DataplaneError(f"cannot route to the gateway's node {address}: {error}") from None
        if doing != self._said:
            self._said = doing
            log.info("routes", extra=fields(node=self.node_name, gateway=address, ranges=ranges, doing=doing))


def route_agent_tasks(
    client: AsyncClient,
    node_name: str,
    gateway_labels: dict[str, str],
    namespace: str = SYSTEM_NAMESPACE,
    daemonset: str | None = None,
):
    return RouteAgent(client, NodeRouting(), node_name, gateway_labels, namespace, daemonset).tasks()
