"""One reflector per kind: local objects of offloaded namespaces kept as copies in their twin namespaces.

The local side is one cluster-wide watch per kind; the provider side is one watch per twin namespace
(the tenant credential may list only there). Both feed one work queue keyed by the local object, whose
reconciliation compares the local object's reflected fields with a digest of the copy's and writes only
on difference. The local object wins: drift and deletions on the provider are repaired, and a local
deletion removes the copy with a UID precondition. An object in the twin that Catamaran did not write is
never changed or deleted; the local object gets a Warning Event instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lightkube.core.exceptions import ApiError

from ... import metrics
from ...constants import (
    ANNOTATION_LOCAL_UID,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_REFLECTION,
)
from ...kube.informer import Handler, Informer, NamespacedInformers
from ...kube.ops import delete_with_uid, tolerating
from ...kube.workqueue import WorkQueue
from ...logs import fields
from ...objects import as_dict, reference
from ..context import PeeringContext
from ..namespaces import TwinManager
from .kind import Context, ReflectedKind, digest
from .policy import KindPolicy
from .secrets import is_token_secret

log = logging.getLogger(__name__)

OWNER_REFLECTION = "reflection"  # a copy this reflector wrote
OWNER_OTHER_CATAMARAN = "catamaran"  # written by another part of Catamaran (token Secrets)
# Big and useless on a copy; dropped before caching.
UNCACHED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def identity_labels(consumer_id: str, provider_id: str) -> dict:
    """The labels every copy carries: written by reflection, for this peering."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY_REFLECTION,
        LABEL_ORIGIN_CLUSTER_ID: consumer_id,
        LABEL_DESTINATION_CLUSTER_ID: provider_id,
    }


def compact_local(obj) -> dict:
    """A local object without status and bookkeeping metadata: what `content` reads, nothing more."""
    data = as_dict(obj)
    meta = data.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in UNCACHED_ANNOTATIONS}
    data["metadata"] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "labels": meta.get("labels") or {},
        "annotations": annotations,
    }
    data.pop("status", None)
    return data


class ClusterWideObjects:
    """Local objects of a kind through one cluster-wide watch."""

    def __init__(self, informer: Informer):
        self.informer = informer

    def tasks(self):
        return [self.informer.run()]

    async def wait_synced(self) -> None:
        await self.informer.synced.wait()

    def watch(self, namespace: str) -> None:
        pass

    def unwatch(self, namespace: str) -> None:
        pass

    def synced(self, namespace: str) -> bool:
        return self.informer.synced.is_set()

    def get(self, namespace: str, name: str) -> dict | None:
        return self.informer.get(namespace, name)

    def keys_in(self, namespace: str) -> list:
        return self.informer.keys_in(namespace)


class PerNamespaceObjects:
    """Local objects of a kind through one watch per offloaded namespace: for Secrets, which a virtual
    kubelet may read only where a namespace is offloaded (the manager binds that right there)."""

    def __init__(self, informers: NamespacedInformers):
        self.informers = informers

    def tasks(self):
        return []

    async def wait_synced(self) -> None:
        pass

    def watch(self, namespace: str) -> None:
        self.informers.watch(namespace)

    def unwatch(self, namespace: str) -> None:
        self.informers.unwatch(namespace)

    def synced(self, namespace: str) -> bool:
        informer = self.informers.get(namespace)
        return informer is not None and informer.synced.is_set()

    def get(self, namespace: str, name: str) -> dict | None:
        informer = self.informers.get(namespace)
        return informer.get(namespace, name) if informer else None

    def keys_in(self, namespace: str) -> list:
        informer = self.informers.get(namespace)
        return list(informer.cache) if informer else []


def immutable_change(error: ApiError) -> bool:
    message = (error.status.message or "").lower()
    return error.status.code == 422 and ("immutable" in message or "may not change" in message)


class Reflector:
    def __init__(
        self,
        kind: ReflectedKind,
        peering: PeeringContext,
        twins: TwinManager,
        *,
        policy: KindPolicy,
        context: Context,
    ):
        self.kind = kind
        self.peering = peering
        self.twins = twins
        self.policy = policy
        self.context = context
        self.name = f"reflect-{kind.setting}"
        if kind.watched_per_namespace:
            self.local_objects = PerNamespaceObjects(NamespacedInformers(self._local_informer))
        else:
            self.local_objects = ClusterWideObjects(self._local_informer(None))
        self.copies = NamespacedInformers(self._copy_informer)
        self.queue = WorkQueue(self.name, self.reconcile, workers=max(1, policy.workers))
        self.origins: dict[str, str] = {}  # twin namespace -> local namespace
        self.copy_listeners: list[Callable[[str, str, dict | None], None]] = []  # (origin, copy name, copy)
        self.local_listeners: list[Handler] = []  # told of every local change, as the informer tells it
        self._changed_at: dict[tuple, float] = {}  # local changes not yet written: latency
        self._conflicts: dict[tuple, str] = {}  # reported conflicts: key -> uid of the foreign object
        # (twin, copy name) -> resourceVersion this process wrote: the watch's echo of our own write needs no
        # reconcile, and skipping it halves the queue's work on a burst. Popped by the echo or the copy's deletion.
        self._own_writes: dict[tuple[str, str], str] = {}

    def tasks(self):
        return [*self.local_objects.tasks(), self._run()]

    async def _run(self):
        await self.local_objects.wait_synced()
        await self.queue.run()

    # -- informers -------------------------------------------------------------------

    def _local_informer(self, namespace: str | None) -> Informer:
        informer = Informer(
            self.peering.local,
            self.kind.resource,
            name=f"local-{self.kind.setting}",
            namespace=namespace,
            transform=compact_local,
        )
        informer.on_change(self._local_changed)
        return informer

    def _copy_informer(self, twin: str) -> Informer:
        informer = Informer(
            self.peering.provider,
            self.kind.resource,
            name=f"remote-{self.kind.setting}",
            namespace=twin,
            transform=self._compact_copy,
        )
        informer.on_change(lambda event, key, new, old: self._copy_changed(twin, key[1], new))
        return informer

    def _compact_copy(self, obj) -> dict:
        data = as_dict(obj)
        meta = data.get("metadata") or {}
        labels = meta.get("labels") or {}
        owner = None
        # Labels alone do not make a copy: the provider's EndpointSlice controller gives a reflected Service's
        # labels to the slices it makes. The local uid annotation is written by Catamaran only.
        if (
            labels.get(LABEL_MANAGED_BY) == MANAGED_BY_REFLECTION
            and labels.get(LABEL_ORIGIN_CLUSTER_ID) == self.peering.consumer_id
            and ANNOTATION_LOCAL_UID in (meta.get("annotations") or {})
        ):
            owner = OWNER_OTHER_CATAMARAN if is_token_secret(data) else OWNER_REFLECTION
        compact = {
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "owner": owner,
            "localUID": (meta.get("annotations") or {}).get(ANNOTATION_LOCAL_UID),
            "digest": digest(self.kind.content(data, self.context, local=False)),
        }
        if owner == OWNER_OTHER_CATAMARAN:
            compact["annotations"] = meta.get("annotations") or {}
        return compact

    def _local_changed(self, event, key, new, old) -> None:
        for listener in self.local_listeners:
            listener(event, key, new, old)
        namespace, _ = key
        if namespace in self.origins.values():
            self._changed_at.setdefault(key, time.monotonic())
            self.queue.add(key)

    def _copy_changed(self, twin: str, copy_name: str, copy: dict | None) -> None:
        origin = self.origins.get(twin)
        if origin is None:
            return
        written = self._own_writes.pop((twin, copy_name), None)
        echo = copy is not None and written is not None and copy["resourceVersion"] == written
        local_name = self.kind.local_name(copy_name)
        if local_name is not None and not echo:
            self.queue.add((origin, local_name))
        for listener in self.copy_listeners:
            listener(origin, copy_name, copy)

    # -- the twin's lifecycle ----------------------------------------------------------

    def twin_ready(self, origin: str, twin: str) -> None:
        if self.origins.get(twin) != origin:
            self.origins[twin] = origin
            self.copies.watch(twin)
            self.local_objects.watch(origin)
        self._requeue_namespace(origin, twin)

    def twin_removed(self, twin: str) -> None:
        self.copies.unwatch(twin)
        for written in [written for written in self._own_writes if written[0] == twin]:
            del self._own_writes[written]
        origin = self.origins.pop(twin, None)
        if origin is not None:
            self.local_objects.unwatch(origin)

    def copies_in(self, twin: str, owner: str = OWNER_REFLECTION) -> list[str]:
        """The names of `owner`'s copies in the twin."""
        informer = self.copies.get(twin)
        if informer is None:
            return []
        return sorted(key[1] for key, copy in list(informer.cache.items()) if copy["owner"] == owner)

    def left_in(self, twin: str, owner: str = OWNER_REFLECTION) -> int:
        """Copies of `owner` still in the twin; the twin is removed only once none is."""
        return len(self.copies_in(twin, owner))

    def drain(self, origin: str, twin: str) -> int:
        self._requeue_namespace(origin, twin)
        return self.left_in(twin)

    def _requeue_namespace(self, origin: str, twin: str) -> None:
        for key in self.local_objects.keys_in(origin):
            self.queue.add(key)
        informer = self.copies.get(twin)
        for _, copy_name in list(informer.cache) if informer else []:
            local_name = self.kind.local_name(copy_name)
            if local_name is not None:
                self.queue.add((origin, local_name))

    def update(self, policy: KindPolicy, context: Context) -> None:
        """New settings from the ForeignCluster: every object again; copies re-read if what is compared changed."""
        compared_changed = context != self.context
        self.policy, self.context = policy, context
        self.queue.resize(max(1, policy.workers))
        for twin, origin in list(self.origins.items()):
            if compared_changed:
                self.copies.unwatch(twin)
                self.copies.watch(twin)
            self._requeue_namespace(origin, twin)

    def pending(self, namespace: str, name: str) -> bool:
        """Is this local object to be reflected while its copy is not in the twin yet?"""
        copy_name = self.kind.remote_name(name)
        twin = self.twins.twin_of(namespace)
        return (
            twin is not None
            and self._wanted(namespace, self.local_objects.get(namespace, name))
            and self.copy_of(twin, copy_name) is None
        )

    def copy_of(self, twin: str, copy_name: str) -> dict | None:
        informer = self.copies.get(twin)
        return informer.get(twin, copy_name) if informer else None

    def local_of(self, namespace: str, name: str) -> dict | None:
        return self.local_objects.get(namespace, name)

    # -- reconciliation -----------------------------------------------------------------

    def _wanted(self, namespace: str, local: dict | None) -> bool:
        return (
            local is not None
            and self.policy.enabled
            and self.twins.selected(namespace)
            and self.twins.twin_ready(namespace)
            and not self.kind.skipped(local, self.context)
            and self.policy.allows(local["metadata"].get("annotations"))
        )

    async def reconcile(self, key) -> float | None:
        namespace, name = key
        twin = self.twins.twin_of(namespace)  # never a twin of another namespace, even one of the same name
        copies = self.copies.get(twin) if twin else None
        if twin is None or copies is None:
            self._changed_at.pop(key, None)
            return None  # no twin here: its readiness requeues the namespace
        if not copies.synced.is_set() or not self.local_objects.synced(namespace):
            return 0.5
        local = self.local_objects.get(namespace, name)
        copy_name = self.kind.remote_name(name)
        copy = copies.get(twin, copy_name)
        try:
            if not self._wanted(namespace, local):
                self._changed_at.pop(key, None)
                self._conflicts.pop(key, None)
                kept = self.kind.keeps_copies_on_policy_change and local is not None and self.twins.selected(namespace)
                if copy is not None and copy["owner"] == OWNER_REFLECTION and not kept:
                    await self._delete(twin, copy_name, copy["uid"])
                return None
            if copy is not None and copy["owner"] != OWNER_REFLECTION:
                await self._report_conflict(key, local, twin, copy_name, copy)
                return None
            self._conflicts.pop(key, None)
            await self._reflect(key, local, twin, copy_name, copy)
        except ApiError as error:
            metrics.REFLECTION_ERRORS.labels(self.kind.setting).inc()
            if local is not None and error.status.code != 409:
                await self._record(local, "Warning", "ReflectionFailed", self._where(twin, copy_name, error))
            raise
        return None

    async def _reflect(self, key, local: dict, twin: str, copy_name: str, copy: dict | None) -> None:
        content = self.kind.content(local, self.context, local=True)
        if copy is not None and copy["digest"] == digest(content) and copy["localUID"] == local["metadata"]["uid"]:
            self._changed_at.pop(key, None)
            return
        body = self._body(content, local, twin, copy_name)
        for adjustment in self.kind.adjustments(local, self.context):
            self.peering.events.later(self._involved(local), "Warning", "AdjustedToProviderTerms", adjustment)
        if copy is None:
            written = await self.peering.provider.create(self.kind.resource.from_dict(body))
            metrics.REFLECTED.labels(self.kind.setting, "created").inc()
            self.peering.events.later(
                self._involved(local),
                "Normal",
                "Reflected",
                f"reflected to {self.peering.provider_id} as {twin}/{copy_name}",
            )
        else:
            body["metadata"]["resourceVersion"] = copy["resourceVersion"]
            written = await self._replace(body, twin, copy_name, copy)
            metrics.REFLECTED.labels(self.kind.setting, "updated").inc()
            log.info(
                "reflected copy corrected",
                extra=fields(kind=self.kind.kind, object=f"{key[0]}/{key[1]}", twin=twin),
            )
        self._remember_write(twin, copy_name, written)
        changed_at = self._changed_at.pop(key, None)
        if changed_at is not None:
            metrics.REFLECTION_SECONDS.labels(self.kind.setting).observe(time.monotonic() - changed_at)

    def _remember_write(self, twin: str, copy_name: str, written) -> None:
        version = getattr(getattr(written, "metadata", None), "resourceVersion", None)
        if version:
            self._own_writes[(twin, copy_name)] = version

    async def _replace(self, body: dict, twin: str, copy_name: str, copy: dict):
        if self.kind.keeps_allocations:
            current = await self.peering.provider.get(self.kind.resource, copy_name, namespace=twin)
            body = self.kind.with_allocations(body, current.to_dict())
        try:
            return await self.peering.provider.replace(self.kind.resource.from_dict(body), copy_name, namespace=twin)
        except ApiError as error:
            if not immutable_change(error) or not self.kind.recreates_on_immutable:
                raise
            # Immutable data or type: the copy can only be replaced by deleting it first.
            await self._delete(twin, copy_name, copy["uid"])
            body["metadata"].pop("resourceVersion", None)
            return await self.peering.provider.create(self.kind.resource.from_dict(body))

    def _body(self, content: dict, local: dict, twin: str, copy_name: str) -> dict:
        metadata = content.get("metadata") or {}
        body = {key: value for key, value in content.items() if key != "metadata"}
        body["apiVersion"] = self.kind.api_version
        body["kind"] = self.kind.kind
        body["metadata"] = {
            "name": copy_name,
            "namespace": twin,
            "labels": {
                **metadata.get("labels", {}),
                **identity_labels(self.peering.consumer_id, self.peering.provider_id),
            },
            "annotations": {**metadata.get("annotations", {}), ANNOTATION_LOCAL_UID: local["metadata"]["uid"]},
        }
        return body

    async def _delete(self, twin: str, copy_name: str, uid: str) -> None:
        with tolerating(404, 409):  # gone already, or replaced by an object that is not this copy
            await delete_with_uid(self.peering.provider, self.kind.resource, copy_name, twin, uid)
            metrics.REFLECTED.labels(self.kind.setting, "deleted").inc()

    async def _report_conflict(self, key, local: dict, twin: str, copy_name: str, copy: dict) -> None:
        if self._conflicts.get(key) == copy["uid"]:
            return
        self._conflicts[key] = copy["uid"]
        self._changed_at.pop(key, None)
        metrics.REFLECTION_CONFLICTS.labels(self.kind.setting).inc()
        message = (
            f"{self.kind.kind} {twin}/{copy_name} on {self.peering.provider_id} was not created by Catamaran; "
            "it is left untouched and this object is not reflected there"
        )
        log.warning("reflection conflict", extra=fields(kind=self.kind.kind, object=f"{key[0]}/{key[1]}", twin=twin))
        await self._record(local, "Warning", "ReflectionConflict", message)

    def _involved(self, local: dict) -> dict:
        return reference({"apiVersion": self.kind.api_version, "kind": self.kind.kind, **local})

    async def _record(self, local: dict, kind_type: str, reason: str, message: str) -> None:
        await self.peering.events.record(self._involved(local), kind_type, reason, message)

    def _where(self, twin: str, copy_name: str, error: ApiError) -> str:
        return f"cannot reflect to {self.peering.provider_id} as {twin}/{copy_name}: {error.status.message or error}"
