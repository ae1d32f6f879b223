"""The peering's virtual nodes, one or one per node pool both sides declare (pools.py decides which), served by this
one process: each node's Node and Lease (node.py), the watch of the pods bound to it (a field selector on its name,
as a kubelet's), its kubelet API on a port of its own (so metrics-server reads each node's pods apart) and its drain
(tenant_drain.py); one provider health check (node.ProviderHealth) for them all.

A node no longer wanted (its pool removed from the offer, or the pool-less node once the provider lends pools, or one
found at start-up that the offer no longer has) is cordoned and drained through the Eviction API, then its Node and
Lease are deleted once no pod is bound to it; until then it is served as before (its pods keep their logs and exec).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from lightkube.resources.core_v1 import Node, Pod

from ..constants import LABEL_REMOTE_CLUSTER_ID, LABEL_TYPE, TYPE_VIRTUAL_NODE, virtual_node_name
from ..kube.informer import Informer, InformerUnion
from ..logs import fields
from .context import PeeringContext
from .forge import offloading_selects
from .kubelet.server import listen
from .node import HealthSettings, NodeSettings, ProviderHealth, VirtualNode, node_labels
from .pods import compact_local_pod
from .pools import Cordon, PeeringNode, cordon_of, node_cordon, peering_nodes, pool_offer
from .tenant_drain import TenantDrain

log = logging.getLogger(__name__)

RETRY_S = 2.0  # after a node could not be removed (its deletion failed): tried again
CANCEL_AGAIN_S = 1.0


@dataclass
class NodeUnit:
    """One virtual node and what serves it."""

    plan: PeeringNode
    node: VirtualNode
    pods: Informer  # the pods bound to it
    drain: TenantDrain
    sock: socket.socket
    kubelet: object  # its KubeletServer (built by the caller's factory)
    tasks: list[asyncio.Task] = field(default_factory=list)
    going: bool = False

    def pods_on_node(self) -> list[dict]:
        return list(self.pods.cache.values())


async def stopped(tasks: list[asyncio.Task]) -> None:
    """Cancel the tasks and wait until they have ended, cancelling again those that went on: a cancellation can be
    lost (Python 3.11's wait_for returns a result that arrived as it was cancelled), and a loop that lost it runs on."""
    while pending := [task for task in tasks if not task.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)


def merged_taints(base: list[dict], pool: tuple) -> list[dict]:
    """The peering's taints and a pool's; the pool's wins on the same key and effect."""
    own = {(t["key"], t["effect"]) for t in pool}
    return [t for t in base if (t["key"], t["effect"]) not in own] + [dict(t) for t in pool]


def node_pods_informer(peering: PeeringContext, node_name: str) -> Informer:
    """The pods bound to one virtual node: a server-side field selector on its name, each kept compact."""
    return Informer(
        peering.local,
        Pod,
        name=f"local-pods {node_name}",
        fields={"spec.nodeName": node_name},
        transform=compact_local_pod,
        packed=True,
        plain=True,
    )


class VirtualNodes:
    def __init__(
        self,
        peering: PeeringContext,
        settings: NodeSettings,
        health: HealthSettings,
        *,
        listener: socket.socket,
        bind_address: str,
        make_kubelet: Callable[..., object],
    ):
        self.peering = peering
        self.settings = settings  # the peering's own (ForeignCluster); each node adds its pool's
        self.health = ProviderHealth(peering, health)
        self.local_pods = InformerUnion("local-pods")
        # This peering's nodes as they are (labels only): the namespaces' cluster selectors read them.
        self.informer = Informer(
            peering.local,
            Node,
            name="own-nodes",
            labels={LABEL_REMOTE_CLUSTER_ID: peering.provider_id, LABEL_TYPE: TYPE_VIRTUAL_NODE},
            transform=lambda node: dict(node.metadata.labels or {}),
        )
        self.units: dict[str, NodeUnit] = {}
        self.changed_listeners: list[Callable[[], None]] = []  # told when a node joins or leaves the peering
        self.offer: dict | None = None  # the provider's ResourceOffer (spec and status)
        self.foreign_spec: dict = {}
        self.offer_synced = asyncio.Event()  # the assembly hands in its offer informer's
        self.offer_synced.set()
        self._listener: socket.socket | None = listener  # the process's kubelet port, for the pool-less node
        self._default_port = listener.getsockname()[1]
        self._bind_address = bind_address
        self._make_kubelet = make_kubelet
        self._wake = asyncio.Event()
        self.local_pods.on_change(self._pod_changed)

    # -- what the other parts ask ---------------------------------------------------------------------------------

    def labels_of(self, name: str) -> dict:
        """A node's labels: as it carries them, or as it will once created."""
        found = self.informer.get(None, name)
        if found is not None:
            return found
        unit = self.units.get(name)
        return node_labels(unit.node.settings) if unit else {}

    def selects(self, offloading: dict | None) -> bool:
        """Does a NamespaceOffloading select any node of this peering?"""
        return any(offloading_selects(offloading, self.labels_of(name), name) for name in self.peering.node_names)

    def pool_of(self, name: str) -> str | None:
        unit = self.units.get(name)
        return unit.plan.pool if unit else None

    @property
    def names(self) -> list[str]:
        return sorted(self.units)

    # -- what changes them ----------------------------------------------------------------------------------------

    def update_offer(self, offer: dict | None) -> None:
        self.offer = offer
        self._wake.set()

    def update_settings(self, settings: NodeSettings, foreign_spec: dict) -> None:
        self.settings, self.foreign_spec = settings, foreign_spec
        self._wake.set()

    def _pod_changed(self, event, key, new, old) -> None:
        if event == "DELETED" and any(unit.going for unit in self.units.values()):
            self._wake.set()  # perhaps a going node's last pod

    def tasks(self) -> list:
        return [*self.health.tasks(), self.informer.run(), self.local_pods.run(), self._run()]

    async def _run(self) -> None:
        await self.informer.synced.wait()
        syncing: asyncio.Task | None = None  # until the first nodes' pods are listed (local_pods.synced)
        try:
            if not self.offer_synced.is_set():
                # Until the provider's offer is read (it may be unreachable): the nodes there are, or the peering's
                # one node, served as they were (node.py keeps their last status until then).
                found = self._found() or [virtual_node_name(self.peering.provider_id)]
                for name in found:
                    unit = self._run_unit(self.add_node(self._found_plan(name)))
                    self._apply(unit, None)
                syncing = asyncio.get_running_loop().create_task(self.local_pods.sync())
                await self.offer_synced.wait()
            await self._converge()
            syncing = syncing or asyncio.get_running_loop().create_task(self.local_pods.sync())
            while True:
                await self._wake.wait()
                self._wake.clear()
                try:
                    await self._converge()
                except Exception as error:  # a deletion that failed: the node stays, served, and is tried again
                    log.warning("cannot converge the virtual nodes", extra=fields(error=str(error)[:300]))
                    await asyncio.sleep(RETRY_S)
                    self._wake.set()
        finally:
            if syncing is not None:
                syncing.cancel()
            for unit in self.units.values():
                for task in unit.tasks:
                    task.cancel()

    async def _converge(self) -> None:
        wanted = peering_nodes(self.peering.provider_id, self.offer, self.foreign_spec)
        tenant = cordon_of(self.offer)
        for name, plan in wanted.items():
            unit = self.units.get(name) or self._run_unit(self.add_node(plan))
            unit.plan, unit.going = plan, False
            self._apply(unit, tenant)
        # Nodes of this peering that exist but are not wanted (a restart after their pool went) are drained too.
        for name in sorted((set(self.units) | set(self._found())) - set(wanted)):
            unit = self.units.get(name) or self._run_unit(self.add_node(self._found_plan(name)))
            unit.going = True
            self._apply(unit, tenant)
            if unit.pods.synced.is_set() and not unit.pods_on_node():
                await self._finish(unit)

    def _found(self) -> list[str]:
        """The nodes of this peering that exist."""
        base = virtual_node_name(self.peering.provider_id)
        pools = (name.removeprefix(f"{base}.") for _, name in self.informer.cache if name.startswith(f"{base}."))
        found = [virtual_node_name(self.peering.provider_id, pool) for pool in pools if pool and "." not in pool]
        return sorted(found + ([base] if self.informer.get(None, base) is not None else []))

    def _found_plan(self, name: str) -> PeeringNode:
        """A node found, as this side's settings describe it (its pool's labels and taints, when it still takes it)."""
        pool = name.partition(".")[2]
        if not pool:
            return PeeringNode(name)
        lent = {"spec": {"pools": [{"name": pool}]}}
        return peering_nodes(self.peering.provider_id, lent, self.foreign_spec).get(name) or PeeringNode(name, pool)

    def _settings(self, plan: PeeringNode, port: int) -> NodeSettings:
        base = self.settings
        return dataclasses.replace(
            base,
            pool=plan.pool,
            kubelet_port=port,
            sharing_percentage=plan.sharing_percentage or base.sharing_percentage,
            suggested_labels={**base.suggested_labels, **dict(plan.labels)},
            taints=merged_taints(base.taints, plan.taints),
        )

    def _apply(self, unit: NodeUnit, tenant: Cordon | None) -> None:
        unit.node.update_settings(self._settings(unit.plan, unit.sock.getsockname()[1]))
        unit.node.update_offer(pool_offer((self.offer or {}).get("status"), unit.plan.pool))
        cordon = node_cordon(tenant, unit.plan, unit.going)
        unit.node.update_cordon(cordon)
        unit.drain.update(cordon)

    def add_node(self, plan: PeeringNode) -> NodeUnit:
        """A node of the peering, its pods watched from now on; its loops start with `_run_unit`."""
        if plan.pool is None and self._listener is not None:
            sock, self._listener = self._listener, None  # the process's own port, once
        else:
            sock = listen(self._bind_address, self._default_port if plan.pool is None else 0)
        node = VirtualNode(self.peering, self._settings(plan, sock.getsockname()[1]), self.health)
        node.offer_synced = self.offer_synced
        pods = node_pods_informer(self.peering, plan.name)
        self.local_pods.add(plan.name, pods)
        unit = NodeUnit(plan, node, pods, TenantDrain(self.peering, lambda: []), sock, None)
        unit.drain.pods_on_node = unit.pods_on_node
        # The node's own pods only (its watch's): one node's kubelet API never serves another's pods.
        unit.kubelet = self._make_kubelet(plan.name, sock, node, unit.pods_on_node, pods.get)
        self.units[plan.name] = unit
        self.peering.node_names.add(plan.name)
        self._tell_changed()
        return unit

    def _run_unit(self, unit: NodeUnit) -> NodeUnit:
        loop = asyncio.get_running_loop()
        for work in [*unit.node.tasks(), *unit.drain.tasks(), *unit.kubelet.tasks()]:  # type: ignore[attr-defined]
            task = loop.create_task(work)
            task.add_done_callback(self._task_done)
            unit.tasks.append(task)
        port = unit.sock.getsockname()[1]
        log.info("virtual node served", extra=fields(node=unit.plan.name, pool=unit.plan.pool, port=port))
        return unit

    async def _finish(self, unit: NodeUnit) -> None:
        """A going node with no pod left: its loops stopped, its Node and Lease deleted, its watch and port closed."""
        name = unit.plan.name
        await stopped(unit.tasks)
        await unit.node.remove()
        self.local_pods.remove(name)
        unit.sock.close()
        del self.units[name]
        self.peering.node_names.discard(name)
        self._tell_changed()
        log.info("virtual node removed: no longer lent, and no pod left on it", extra=fields(node=name))

    async def remove_all(self) -> None:
        """Delete every node of the peering (un-peering); call once tasks() are cancelled."""
        for unit in list(self.units.values()):
            await unit.node.remove()

    def _tell_changed(self) -> None:
        for listener in self.changed_listeners:
            listener()

    def _task_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("a virtual node's loop ended", exc_info=error)
