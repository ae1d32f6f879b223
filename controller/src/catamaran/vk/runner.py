"""The virtual kubelet's process: it waits for a usable ForeignCluster and credential Secret, serves the peering
(every part built once by vk/assembly.py's ServedPeering) and reports on the ForeignCluster until it is deleted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from ..constants import VIRTUAL_KUBELET_COMPONENT, virtual_node_name
from ..kube.clients import async_client
from ..kube.events import EventRecorder
from ..kube.ops import patch_status_if_unchanged
from ..kube.resources import ForeignCluster
from ..logs import fields
from ..objects import reference, set_condition
from .assembly import KubeletOptions, PeeringRemoved, ServedPeering
from .kubelet.channel import ProviderChannel
from .kubelet.server import listen
from .peering import ForeignClusterError, PeeringWatch
from .pods import WORKERS as POD_WORKERS
from .validation import foreign_spec_problems

log = logging.getLogger(__name__)
FIELD_MANAGER = VIRTUAL_KUBELET_COMPONENT
# Watches wake the virtual kubelet as soon as its peering appears; this bounds the wait when one
# breaks or misses something, and is the only retry when there is nothing to watch.
RECHECK_SECONDS = 10.0


class VirtualKubelet:
    def __init__(
        self,
        local: AsyncClient,
        *,
        foreign_cluster: str,
        namespace: str,
        consumer_id: str,
        node_ip: str,
        kubelet: KubeletOptions | None = None,
        workers: int = POD_WORKERS,
    ):
        self.local = local
        self.foreign_cluster = foreign_cluster
        self.namespace = namespace
        self.consumer_id = consumer_id
        self.node_ip = node_ip
        self.kubelet = kubelet or KubeletOptions()
        self.workers = workers
        self.events = EventRecorder(local, FIELD_MANAGER)
        # The peering's virtual nodes once serving (one, or its pools'), which the ForeignCluster's status names.
        self.node_names: Callable[[], list[str]] = list
        # Status reports started from callbacks: held until done, so none is collected mid-flight or fails unseen.
        self._reports: set[asyncio.Task] = set()

    async def run(self) -> None:
        """Wait until the ForeignCluster and its credential are usable, then serve until the peering is removed.

        Raises PeeringRemoved once the ForeignCluster is deleted and the virtual node cleaned up.
        """
        listener = listen(self.kubelet.bind_address or self.node_ip, self.kubelet.port)
        watch = PeeringWatch(self.local, self.namespace, self.foreign_cluster)
        watching = asyncio.get_running_loop().create_task(watch.foreigns.run())
        try:
            while True:
                try:
                    foreign, config = await watch.read(RECHECK_SECONDS)
                    if problems := foreign_spec_problems(foreign["spec"]):
                        raise ForeignClusterError("InvalidSpec", "; ".join(problems))
                    break
                except ForeignClusterError as error:
                    log.error(
                        "foreign cluster unusable",
                        extra=fields(foreign_cluster=self.foreign_cluster, reason=error.reason, error=str(error)),
                    )
                    await self._report(error.reason, str(error), ready=False)
                    await watch.until_changed(RECHECK_SECONDS)
            provider = async_client(config, None, FIELD_MANAGER, cluster="provider")
            served = ServedPeering(
                self.local,
                provider,
                watch,
                foreign,
                consumer_id=self.consumer_id,
                events=self.events,
                node_ip=self.node_ip,
                listener=listener,
                channel=ProviderChannel(provider, config.get()),
                options=self.kubelet,
                report=self._report_soon,
                set_condition=self._set_condition_soon,
                report_nodes=self._report_nodes_soon,
                workers=self.workers,
            )
            await self._serve(served)
        finally:
            listener.close()
            watching.cancel()
            watch.stop_secret()

    async def _serve(self, served: ServedPeering) -> None:
        """Run every loop of the served peering until the ForeignCluster is deleted, then remove the virtual nodes."""
        peering = served.peering
        self.node_names = lambda: served.nodes.names
        await self._report("Connected", served.serving(), ready=True)
        log.info("virtual kubelet running", extra=fields(provider=peering.provider_id))
        try:
            async with asyncio.TaskGroup() as group:
                for task in served.tasks():
                    group.create_task(task)
        except* PeeringRemoved as group_error:
            removal = group_error.exceptions[0]
        else:
            raise RuntimeError("the virtual kubelet's loops ended on their own")
        # The group has cancelled and awaited every loop, so the node's loops can no longer recreate anything.
        log.info(
            "foreign cluster deleted; removing the virtual node",
            extra=fields(foreign_cluster=self.foreign_cluster, nodes=served.nodes.names),
        )
        await served.nodes.remove_all()
        await served.channel.close()
        await peering.provider.close()
        raise removal

    def _report_soon(self, reason: str, message: str, ready: bool) -> None:
        """_report, from a synchronous callback."""
        self._soon(self._report(reason, message, ready))

    def _set_condition_soon(self, kind: str, status: str, reason: str, message: str) -> None:
        """_set_condition, from a synchronous callback."""
        self._soon(self._set_condition(kind, status, reason, message))

    def _report_nodes_soon(self) -> None:
        """_set_condition's names of the virtual nodes alone, from a synchronous callback (a node joined or left)."""
        self._soon(self._set_condition(None, "", "", ""))

    def _soon(self, report) -> None:
        task = asyncio.get_running_loop().create_task(report)
        self._reports.add(task)
        task.add_done_callback(self._report_done)

    def _report_done(self, task: asyncio.Task) -> None:
        self._reports.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error(
                "cannot report the foreign cluster's status",
                exc_info=error,
                extra=fields(foreign_cluster=self.foreign_cluster),
            )

    async def _report(self, reason: str, message: str, ready: bool) -> None:
        """The Ready condition on the ForeignCluster's status."""
        await self._set_condition("Ready", "True" if ready else "False", reason, message)

    async def _set_condition(self, kind: str | None, status: str, reason: str, message: str) -> None:
        """A condition (None: none, only the nodes) and the virtual nodes' names on the ForeignCluster's status, and an
        Event when the condition's reason changes (a Warning when it turns False)."""

        def change(foreign: dict) -> dict | None:
            current = foreign.get("status") or {}
            conditions = current.get("conditions") or []
            if kind is not None:
                conditions = set_condition(conditions, kind, status, reason, message)
            nodes = ", ".join(self.node_names() or [virtual_node_name(foreign["spec"]["clusterID"])])
            if conditions == current.get("conditions") and nodes == current.get("virtualNode"):
                return None
            if kind is None:
                return {"virtualNode": nodes}
            return {
                "conditions": conditions,
                "observedGeneration": foreign["metadata"].get("generation"),
                "virtualNode": nodes,
            }

        try:
            foreign = await patch_status_if_unchanged(
                self.local, ForeignCluster, self.foreign_cluster, self.namespace, change
            )
        except ApiError as error:  # the next change reports again
            log.warning(
                "cannot report the foreign cluster's status",
                extra=fields(foreign_cluster=self.foreign_cluster, condition=kind, error=str(error)),
            )
            return
        if foreign is None or kind is None:
            return
        current = foreign.get("status") or {}
        previous = next((c for c in current.get("conditions") or [] if c["type"] == kind), None)
        if previous is None or previous.get("reason") != reason:
            await self.events.record(reference(foreign), "Warning" if status == "False" else "Normal", reason, message)
