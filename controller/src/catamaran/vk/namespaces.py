"""Twin namespaces on this virtual kubelet's provider, following the consumer's NamespaceOffloadings.

A namespace with a NamespaceOffloading gets a twin here while the offloading's clusterSelector
matches a virtual node of this peering (its one node, or a pool's); when it stops matching (or the
offloading is deleted) its pods on this provider are drained first, then the twin is removed.
This cluster's progress is reported as its own entry of the offloading's `status.clusters`
(server-side apply, one field manager per cluster).
A twin is removed only once no pod and no reflected object of Catamaran's is left in it.
A namespace without a NamespaceOffloading selecting this virtual node never gets a twin: its pods
bound here (by name, or tolerating every taint) stay Pending; the pod controller says why.

A twin belongs to one namespace, its TwinNamespace's origin (twin_claims.py): a namespace asking for a remote name
that extends another namespace is refused on its own entry (reason TwinNamespaceTaken), never creates, drains or
removes that twin, and the pod controller, reflection and kubelet API of the namespace see no twin (`twin_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from ..constants import (
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_ORIGIN_CLUSTER_ID,
    OFFLOADING_GROUP,
    VERSION,
    default_twin_namespace,
)
from ..kube.informer import Informer, call, changed
from ..kube.ops import tolerating
from ..kube.resources import NamespaceOffloading, TwinNamespace
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, now_iso, reference
from ..steering import OFFLOADING_NAME, remote_namespace_name
from ..twin_claims import TWIN_TAKEN, RemoteNames, claim_refusal, twin_holder
from .context import PeeringContext

log = logging.getLogger(__name__)

# The Warning Event on a NamespaceOffloading whose drain is about to delete the twin's claims, and their data.
TWIN_DATA_DELETED = "TwinDataDeleted"
CLAIMS_NAMED = 10  # at most, in that Event


class TwinManager:
    name = "twins"

    def __init__(
        self,
        peering: PeeringContext,
        *,
        pods_on_node: Callable[[str], list[dict]],
        shadows_left: Callable[[str], int],
        nodes: Informer,
        selects: Callable[[dict | None], bool],
    ):
        self.peering = peering
        self.pods_on_node = pods_on_node
        self.shadows_left = shadows_left
        self.nodes = nodes  # the peering's virtual nodes' labels (vk/virtual_nodes.py runs it)
        self.selects = selects  # does a NamespaceOffloading select one of them?
        self.field_manager = f"catamaran-vk-{peering.provider_id}"
        self.requests = Informer(
            peering.provider,
            TwinNamespace,
            name="twin-requests",
            namespace=peering.tenant_namespace,
            transform=as_dict,
        )
        self.offloadings = Informer(peering.local, NamespaceOffloading, name="namespaceoffloadings", transform=as_dict)
        self.remote_names = RemoteNames(peering.consumer_id)  # who claims each remote name
        self.queue = WorkQueue(self.name, self.reconcile, workers=4)
        self.ready_listeners: list[Callable[[str, str], None]] = []
        self.removed_listeners: list[Callable[[str], None]] = []
        # Each gets (origin, twin) when a twin is leaving, starts removing its copies there and says how many are left.
        self.drainers: list[Callable[[str, str], int]] = []
        # Each gives the copies in a twin that hold data (claims: their volumes), which a drain deletes.
        self.data_holders: list[Callable[[str], list[str]]] = []
        self._data_warned: set[str] = set()  # namespaces whose drain has said what becomes of their data
        self.requests.on_change(self._request_changed)
        self.offloadings.on_change(self._offloading_changed)
        # Only its labels matter here (clusterSelectors); status heartbeats change nothing.
        self.nodes.on_change(call(self._requeue_all, when=changed))

    def tasks(self):
        return [self.requests.run(), self.offloadings.run(), self._run()]

    async def _run(self):
        for informer in (self.requests, self.offloadings, self.nodes):
            await informer.synced.wait()
        self._requeue_all()
        await self.queue.run()

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.requests, self.offloadings, self.nodes))

    def _requeue_all(self) -> None:
        for namespace, _ in list(self.offloadings.cache):
            self.queue.add(namespace)
        for request in list(self.requests.cache.values()):
            self.queue.add(request["spec"]["originNamespace"])

    def _offloading_changed(self, event, key, new, old) -> None:
        namespace = key[0]
        self.queue.add(namespace)
        remotes = self.remote_names.changed(namespace, new)
        if event == "MODIFIED" and _deleting(new) == _deleting(old):
            return  # the claimants are the same (status writes are most changes)
        for remote in remotes:
            self._requeue_claimants(remote)

    def _requeue_claimants(self, remote: str) -> None:
        for namespace in self.remote_names.namespaces(remote):
            self.queue.add(namespace)

    def _request_changed(self, event, key, new, old) -> None:
        request = new or old
        origin = request["spec"]["originNamespace"]
        self.queue.add(origin)
        if event != "MODIFIED":
            self._requeue_claimants(request["metadata"]["name"])  # a name taken or let go
        if new is not None and (new.get("status") or {}).get("phase") == "Ready":
            for listener in self.ready_listeners:
                listener(origin, new["metadata"]["name"])
        elif event == "DELETED":
            for listener in self.removed_listeners:
                listener(request["metadata"]["name"])

    # -- what the pod controller asks ------------------------------------------------

    def mapped_name(self, namespace: str) -> str:
        """The twin's name for a local namespace, whether or not it is offloaded here right now."""
        offloading = self.offloadings.get(namespace, OFFLOADING_NAME)
        if offloading is None:
            return default_twin_namespace(namespace, self.peering.consumer_id)
        return remote_namespace_name(namespace, offloading["spec"], self.peering.consumer_id)

    def offloading(self, namespace: str) -> dict | None:
        return self.offloadings.get(namespace, OFFLOADING_NAME)

    def selected(self, namespace: str) -> bool:
        """May pods of this namespace run here? Only when its NamespaceOffloading selects a virtual node of this
        peering (its one node, or a pool's)."""
        return self.selects(self.offloading(namespace))

    def twin_origin(self, twin: str) -> str | None:
        """The namespace a twin here extends (its TwinNamespace's origin), None when there is no such twin."""
        request = self.requests.get(self.peering.tenant_namespace, twin)
        return request["spec"]["originNamespace"] if request is not None else None

    def twin_of(self, namespace: str) -> str | None:
        """This namespace's own twin here (ready or not, leaving or not); None when it has none, or when the twin
        of its remote name extends another namespace. Whatever acts in a twin for a namespace asks this."""
        remote = self.mapped_name(namespace)
        return remote if self.twin_origin(remote) == namespace else None

    def ready_twin(self, namespace: str) -> str | None:
        twin = self.twin_of(namespace)
        request = self.requests.get(self.peering.tenant_namespace, twin) if twin else None
        return twin if request is not None and (request.get("status") or {}).get("phase") == "Ready" else None

    def has_twin(self, namespace: str) -> bool:
        """Is there a twin here (ready or not, leaving or not) of this namespace's own?"""
        return self.twin_of(namespace) is not None

    def twin_ready(self, namespace: str) -> bool:
        return self.ready_twin(namespace) is not None

    def claim_refusal(self, namespace: str) -> str | None:
        """Why this namespace may not have its remote name here (another namespace holds or precedes it), or None."""
        remote = self.mapped_name(namespace)
        claims = [
            (other, offloading)
            for other in self.remote_names.namespaces(remote)
            if (offloading := self.offloadings.get(other, OFFLOADING_NAME)) is not None
        ]
        holder = twin_holder(remote, self.twin_origin(remote), claims, self.peering.consumer_id)
        return claim_refusal(namespace, remote, holder)

    def want(self, namespace: str) -> None:
        self.queue.add(namespace)

    # -- reconciliation ----------------------------------------------------------------

    async def reconcile(self, namespace: str) -> float | None:
        offloading = self.offloadings.get(namespace, OFFLOADING_NAME)
        remote = self.mapped_name(namespace)
        request = self.requests.get(self.peering.tenant_namespace, remote)
        foreign = request is not None and request["spec"]["originNamespace"] != namespace
        if self.selected(namespace):
            self._data_warned.discard(namespace)  # offloaded (again): a later drain says it anew
            refusal = self.claim_refusal(namespace)
            if refusal is not None:
                # Only this namespace's own entry says so; the holder's twin and offloading are left alone.
                await self._report(offloading, "Failed", remote, TWIN_TAKEN, refusal)
                return None
            if request is None:
                await self._create_request(namespace, remote)
                await self._report(offloading, "Pending", remote, "TwinRequested", f"requested twin {remote}")
                return None
            phase = (request.get("status") or {}).get("phase")
            message = (request.get("status") or {}).get("message", "")
            if phase == "Ready":
                await self._report(offloading, "Ready", remote, "TwinReady", message)
            elif phase in ("Conflict", "Failed"):
                await self._report(offloading, "Failed", remote, phase, message)
            else:
                await self._report(offloading, "Pending", remote, phase or "Requested", message)
            return None
        if foreign:
            await self._forget(offloading)  # another namespace's twin: never drained nor removed for this one
            return None
        if request is None and not self.shadows_left(remote):
            # Not offloaded here, and nothing left remotely to drain: pods bound here wait, Pending.
            await self._forget(offloading)
            return None
        return await self._drain(namespace, offloading, remote, request)

    async def _drain(self, namespace: str, offloading: dict | None, remote: str, request: dict | None):
        await self._warn_of_data_loss(namespace, offloading, remote)
        pods = self.pods_on_node(namespace)
        if pods:
            for pod in pods:
                if not pod["metadata"].get("deletionTimestamp"):
                    with tolerating(404):
                        await self.peering.local.delete(Pod, pod["metadata"]["name"], namespace=namespace)
            log.info("draining offloaded pods", extra=fields(namespace=namespace, pods=len(pods)))
            await self._report(offloading, "Draining", remote, "Draining", f"draining {len(pods)} pod(s)")
            return 2
        if self.shadows_left(remote):
            return 2
        copies = sum(drainer(namespace, remote) for drainer in self.drainers)
        if copies:
            await self._report(offloading, "Draining", remote, "Draining", f"removing {copies} reflected object(s)")
            return 1
        if request is not None:
            if not request["metadata"].get("deletionTimestamp"):
                with tolerating(404):
                    await self.peering.provider.delete(TwinNamespace, remote, namespace=self.peering.tenant_namespace)
            await self._report(offloading, "Draining", remote, "RemovingTwin", f"removing twin {remote}")
            return 2
        self._data_warned.discard(namespace)
        await self._forget(offloading)
        return None

    async def _warn_of_data_loss(self, namespace: str, offloading: dict | None, remote: str) -> None:
        """Before a drain deletes the twin's claims, a Warning Event on the namespace's NamespaceOffloading says which
        and what becomes of their data (once per drain): the provider's copies go, their volumes with them."""
        claims = sorted({name for holder in self.data_holders for name in holder(remote)})
        if not claims or namespace in self._data_warned or offloading is None:
            return
        self._data_warned.add(namespace)
        provider = self.peering.provider_id
        # The names come from the provider's twin: a few are named, so the message stays whole (Events keep 1024).
        named = ", ".join(claims[:CLAIMS_NAMED]) + (
            f" and {len(claims) - CLAIMS_NAMED} more" if len(claims) > CLAIMS_NAMED else ""
        )
        message = (
            f"no longer offloaded to cluster {provider}: once its pods there are gone, the provider's copies of claims"
            f" {named} in {remote} are deleted, and the data of their volumes on {provider} goes as the"
            " provider's reclaim policy says (Delete, the default, erases it)"
        )
        log.warning("twin claims to be deleted", extra=fields(namespace=namespace, claims=len(claims)))
        obj = {"apiVersion": f"{OFFLOADING_GROUP}/{VERSION}", "kind": "NamespaceOffloading", **offloading}
        await self.peering.events.record(reference(obj), "Warning", TWIN_DATA_DELETED, message)

    async def _create_request(self, namespace: str, remote: str) -> None:
        body = TwinNamespace(
            apiVersion=f"{OFFLOADING_GROUP}/{VERSION}",
            kind="TwinNamespace",
            metadata={
                "name": remote,
                "namespace": self.peering.tenant_namespace,
                "labels": {
                    LABEL_ORIGIN_CLUSTER_ID: self.peering.consumer_id,
                    LABEL_DESTINATION_CLUSTER_ID: self.peering.provider_id,
                },
            },
            spec={"originNamespace": namespace},
        )
        with tolerating(409):
            await self.peering.provider.create(body)
            log.info("requested twin namespace", extra=fields(namespace=namespace, twin=remote))

    async def _report(self, offloading: dict | None, phase: str, remote: str, reason: str, message: str) -> None:
        if offloading is None:
            return
        current = next(
            (
                e
                for e in (offloading.get("status") or {}).get("clusters") or []
                if e["clusterID"] == self.peering.provider_id
            ),
            None,
        )
        entry = {
            "clusterID": self.peering.provider_id,
            "phase": phase,
            "remoteNamespace": remote,
            "reason": reason,
            "message": message,
        }
        if current and all(current.get(k) == v for k, v in entry.items()):
            return
        entry["lastTransitionTime"] = (
            (current or {}).get("lastTransitionTime") if (current or {}).get("phase") == phase else now_iso()
        )
        await self._apply_entries(offloading, [entry])

    async def _forget(self, offloading: dict | None) -> None:
        if offloading is None:
            return
        if any(
            e["clusterID"] == self.peering.provider_id for e in (offloading.get("status") or {}).get("clusters") or []
        ):
            await self._apply_entries(offloading, [])

    async def _apply_entries(self, offloading: dict, entries: list[dict]) -> None:
        meta = offloading["metadata"]
        body = {
            "apiVersion": f"{OFFLOADING_GROUP}/{VERSION}",
            "kind": "NamespaceOffloading",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"clusters": entries},
        }
        with tolerating(404):
            await self.peering.local.patch(
                NamespaceOffloading.Status,
                meta["name"],
                body,
                namespace=meta["namespace"],
                patch_type=PatchType.APPLY,
                field_manager=self.field_manager,
                force=True,
            )


def _deleting(offloading: dict | None) -> bool:
    return bool(offloading and offloading["metadata"].get("deletionTimestamp"))
