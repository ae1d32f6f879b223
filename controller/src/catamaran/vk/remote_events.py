"""Events in twin namespaces, mirrored onto the local objects: a person runs `kubectl describe pod` on the
consumer and sees why the provider's kubelet cannot start it (a missing ConfigMap, a failing probe, a kill).
Events about remote pods and their ShadowPods land on the local pod; events about reflected objects
(a Service whose load balancer failed, say) land on the local object they reflect.

Each twin namespace gets one Event watch. The provider scheduler's `Scheduled` events are left out by the watch's
field selector, on the server: the consumer's own scheduler already recorded the pod's binding to the virtual node,
and one more write per offloaded pod on the consumer (the most frequent remote event) told a tenant only which of the
provider's nodes took it. Its `FailedScheduling` events, which say why a pod stays Pending, are mirrored. A mirrored
Event keeps the remote reason, type and message, names the provider as its source, and follows the remote count and
last timestamp. Writes go through a token bucket, so an event storm on a provider cannot flood the consumer. Reasons
and messages are bounded as everything else the provider reports (vk/trust.py).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from lightkube import operators
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event

from .. import metrics
from ..kube.informer import Informer, NamespacedInformers, changed, enqueue, present
from ..kube.ratelimit import TokenBucket
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict
from .context import PeeringContext
from .trust import sanitised_message, sanitised_reason

log = logging.getLogger(__name__)

REPORTING_COMPONENT = "catamaran.io/virtual-kubelet"
# Remembered per mirrored event, so an unchanged remote event is not written again; bounded.
MEMORY = 10_000
# Remote Events never mirrored, left out on the provider's side (see above).
UNMIRRORED_REASONS = ("Scheduled",)


def compact_event(event) -> dict:
    """What is mirrored of a remote Event; its reason and message bounded, as the provider writes them."""
    data = as_dict(event)
    series = data.get("series") or {}
    return {
        "kind": (data.get("involvedObject") or {}).get("kind"),
        "name": (data.get("involvedObject") or {}).get("name"),
        "type": data.get("type") or "Normal",
        "reason": sanitised_reason(data.get("reason")),
        "message": sanitised_message(data.get("message")),
        "count": series.get("count") or data.get("count") or 1,
        "first": data.get("firstTimestamp") or data.get("eventTime"),
        "last": series.get("lastObservedTime") or data.get("lastTimestamp") or data.get("eventTime"),
        "host": (data.get("source") or {}).get("host") or data.get("reportingInstance") or "",
    }


def mirrored_event(remote_name: str, remote: dict, target: dict, provider_id: str, node_name: str) -> dict:
    """The local Event for a remote one: same reason, type, message and count; the provider as source.

    `target` is the local object: apiVersion, kind and metadata (name, namespace, uid)."""
    meta = target["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{remote_name}.{provider_id}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": target["apiVersion"],
            "kind": target["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": remote["type"],
        "reason": remote["reason"],
        "message": remote["message"],
        "count": remote["count"],
        "firstTimestamp": remote["first"],
        "lastTimestamp": remote["last"],
        "source": {"component": f"{provider_id} (remote)", "host": remote["host"] or node_name},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": node_name,
    }


class RemoteEventMirror:
    name = "remote-events"

    def __init__(
        self,
        peering: PeeringContext,
        local_pods: Informer,
        *,
        reflected: Callable[[str, str, str], dict | None] = lambda kind, namespace, name: None,
        rate: float = 10,
        burst: int = 50,
    ):
        self.peering = peering
        self.local_pods = local_pods  # pods bound to this virtual node only
        self.reflected = reflected  # (kind, namespace, copy name) -> the local object a copy reflects
        self.limiter = TokenBucket(rate, burst)
        self.queue = WorkQueue(self.name, self.reconcile, workers=2)
        self.informers = NamespacedInformers(self._informer)
        self.origins: dict[str, str] = {}  # twin namespace -> local namespace
        self._written: OrderedDict[tuple, tuple] = OrderedDict()
        self._due: dict[tuple, float] = {}  # key -> when its reserved write slot comes

    def _informer(self, twin: str) -> Informer:
        informer = Informer(
            self.peering.provider,
            Event,
            name="remote-pod-events",
            namespace=twin,
            fields={"reason": operators.not_in(UNMIRRORED_REASONS)},
            transform=compact_event,
        )
        informer.on_change(enqueue(self.queue, when=lambda *change: present(*change) and changed(*change)))
        return informer

    def twin_ready(self, origin: str, twin: str) -> None:
        self.origins[twin] = origin
        self.informers.watch(twin)

    def twin_removed(self, twin: str) -> None:
        self.informers.unwatch(twin)
        self.origins.pop(twin, None)

    def tasks(self):
        return [self.queue.run()]

    async def reconcile(self, key) -> float | None:
        twin, name = key
        due = self._due.pop(key, None)
        if due is not None and due > time.monotonic():
            self._due[key] = due
            return due - time.monotonic()
        informer = self.informers.get(twin)
        remote = informer.get(twin, name) if informer else None
        origin = self.origins.get(twin)
        if remote is None or origin is None or not remote["name"]:
            return None
        target = self._target(remote["kind"], origin, remote["name"])
        if target is None:
            return None  # not (or no longer) an object of this virtual node
        written = (target["metadata"]["uid"], remote["count"], remote["last"], remote["message"])
        if self._written.get(key) == written:
            return None
        if due is None:
            wait = self.limiter.reserve()
            if wait > 0:
                self._due[key] = time.monotonic() + wait
                metrics.REMOTE_EVENTS_DELAYED.inc()
                return wait
        await self._write(mirrored_event(name, remote, target, self.peering.provider_id, self.peering.node_name))
        self._written[key] = written
        self._written.move_to_end(key)
        while len(self._written) > MEMORY:
            self._written.popitem(last=False)
        metrics.REMOTE_EVENTS_MIRRORED.inc()
        return None

    def _target(self, kind: str | None, origin: str, name: str) -> dict | None:
        if kind in ("Pod", "ShadowPod"):  # a ShadowPod and its pod share the local pod's name
            pod = self.local_pods.get(origin, name)
            return {"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"]} if pod else None
        return self.reflected(kind or "", origin, name)

    async def _write(self, body: dict) -> None:
        meta = body["metadata"]
        try:
            await self.peering.local.create(Event.from_dict(body))
            return
        except ApiError as error:
            if error.status.code != 409:
                raise
        patch = {key: body[key] for key in ("count", "lastTimestamp", "message", "type")}
        try:
            await self.peering.local.patch(Event, meta["name"], patch, namespace=meta["namespace"])
        except ApiError as error:
            if error.status.code != 404:  # expired between the two calls; the next change recreates it
                raise
            log.debug("mirrored event expired", extra=fields(event=meta["name"]))
