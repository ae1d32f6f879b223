"""The route agent: on every node of a cluster but the gateway's, the peers' pod ranges go to the gateway's node.

The gateway builds the tunnels on its own node only; a pod on any other node reaches the other clusters because this
agent (a DaemonSet in deployment mode: host network, NET_ADMIN) routes each range the gateway routes into a tunnel
(fabric/peerings.py: the same reading of the same objects) to the gateway's node, and exempts it from the CNI's
masquerading. The gateway's node is where its pod runs (status.hostIP): when the gateway moves, the routes follow.
On the gateway's node the agent holds nothing. Routes carry their own protocol number, so a restart finds and
replaces them, and a stop (SIGTERM: the DaemonSet deleted) removes them; the host is also checked again every
RESYNC_SECONDS, since a CNI or an administrator may flush routes without the API knowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from ..constants import FABRIC_NAMESPACE, SYSTEM_NAMESPACE, TERMINAL_PHASES
from ..kube.informer import Informer, changed, enqueue
from ..kube.resources import ForeignCluster, ResourceOffer
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict
from .dataplane import DataplaneError, NodeRouting
from .peerings import consumer_behind, provider_behind
from .plan import node_ranges

log = logging.getLogger(__name__)

NODE = "node"
RESYNC_SECONDS = 30.0


def _gateway_placement(pod) -> tuple[str | None, str | None] | None:
    """(node name, node address) of a gateway pod that runs or is about to; None for one that is going or gone."""
    status = pod.status
    if pod.metadata.deletionTimestamp or (status is not None and status.phase in TERMINAL_PHASES):
        return None
    return (pod.spec.nodeName if pod.spec else None), (status.hostIP if status else None)


def wanted(foreigns, offers, gateways, node_name: str) -> tuple[list[str], str | None, str | None]:
    """(the ranges this node sends to the gateway's node, that node's address, why nothing is routed or None).

    `foreigns` and `offers` are ForeignClusters and ResourceOffers (dicts); `gateways` the placements of the gateway's
    pods (_gateway_placement)."""
    behind = [provider_behind(f) for f in foreigns] + [consumer_behind(o) for o in offers]
    ranges = node_ranges(cidr for peering in behind if peering for cidr in peering[1])
    placed = sorted((p for p in gateways if p and p[0] and p[1]), key=lambda p: p[0] != node_name)
    if not ranges:
        return [], None, "no peering in mode Fabric announces a pod range"
    if not placed:
        return [], None, "the gateway's pod is not placed on a node"
    gateway_node, address = placed[0]
    if gateway_node == node_name:
        return [], None, "the gateway runs on this node and routes its ranges itself"
    return ranges, address, None


class RouteAgent:
    def __init__(
        self,
        client: AsyncClient,
        routing: NodeRouting,
        node_name: str,
        gateway_labels: dict[str, str],
        namespace: str = SYSTEM_NAMESPACE,
    ):
        self.routing = routing
        self.node_name = node_name
        self.foreigns = Informer(
            client, ForeignCluster, name="foreign-clusters", namespace=namespace, transform=as_dict
        )
        self.offers = Informer(client, ResourceOffer, name="resource-offers", transform=as_dict)
        self.gateways = Informer(
            client, Pod, name="gateway-pods", namespace=FABRIC_NAMESPACE, labels=gateway_labels,
            transform=_gateway_placement,
        )  # fmt: skip
        self.queue = WorkQueue("routes", self._reconcile, workers=1)
        for informer in self._informers:
            informer.on_change(enqueue(self.queue, key=lambda _: NODE, when=changed))
        self._last: tuple | None = None

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
            log.info("stopping: removing the routes to the gateway's node")
            with contextlib.suppress(DataplaneError, OSError):
                await self.routing.remove_all()

    async def _reconcile(self, key: str) -> None:
        for informer in self._informers:
            await informer.synced.wait()
        ranges, address, idle = wanted(
            self.foreigns.cache.values(), self.offers.cache.values(), self.gateways.cache.values(), self.node_name
        )
        try:
            await self.routing.apply(ranges, address)
        except DataplaneError as error:
            log.error("cannot route to the gateway's node", extra=fields(gateway=address, error=str(error)[:500]))
            raise
        if (ranges, address, idle) != self._last:
            self._last = (ranges, address, idle)
            log.info("routes", extra=fields(node=self.node_name, gateway=address, ranges=ranges, idle=idle))


def route_agent_tasks(
    client: AsyncClient, node_name: str, gateway_labels: dict[str, str], namespace: str = SYSTEM_NAMESPACE
):
    return RouteAgent(client, NodeRouting(), node_name, gateway_labels, namespace).tasks()
