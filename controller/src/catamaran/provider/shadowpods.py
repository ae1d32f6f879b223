"""ShadowPod enforcement: keep a Pod of the same name running, even with the consumer away."""

from __future__ import annotations

import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from ..constants import LABEL_MANAGED_BY, MANAGED_BY_CATAMARAN
from ..kube.events import EventRecorder
from ..kube.informer import Informer
from ..kube.ops import patch_status
from ..kube.resources import ShadowPod
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, condition, reference, same_conditions, set_condition, status_patch
from .offers import Placement

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


def classify_create_error(error: ApiError) -> tuple[str, str]:
    """A reason a person can act on, from the API server's refusal."""
    status = error.status
    message = status.message or str(error)
    lowered = message.lower()
    if "exceeded quota" in lowered or "forbidden: exceeded" in lowered:
        return "QuotaExceeded", message
    if status.code == 404 or ("namespace" in lowered and "not found" in lowered):
        return "NamespaceMissing", message
    if "is being terminated" in lowered:
        return "NamespaceTerminating", message
    if status.code in (400, 403, 422) or "admission webhook" in lowered or "denied" in lowered:
        return "AdmissionRejected", message
    return "CreateFailed", message


def pod_from_shadow(shadow: dict, placement: Placement | None = None) -> dict:
    meta = shadow["metadata"]
    template = shadow["spec"]["pod"]
    spec = placement.apply(template["spec"]) if placement else template["spec"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": (template.get("metadata") or {}).get("labels") or {},
            "annotations": (template.get("metadata") or {}).get("annotations") or {},
            "ownerReferences": [
                {
                    "apiVersion": shadow["apiVersion"],
                    "kind": "ShadowPod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def material_status(status: dict) -> tuple:
    """What the consumer shows of a pod's status; a scheduled-but-pending pod adds nothing to it."""
    conditions = tuple(
        sorted(
            (c["type"], c["status"], c.get("reason") or "")
            for c in status.get("conditions") or []
            if not (c["type"] == "PodScheduled" and c["status"] == "True")
        )
    )
    containers = tuple(
        (c.get("name"), c.get("ready"), c.get("restartCount"), tuple(sorted((c.get("state") or {}).items(), key=str)))
        for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    )
    return (status.get("phase") or "Pending", status.get("podIP"), status.get("reason"), conditions, containers)


def _evicted(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Failed" and status.get("reason") == "Evicted"


class ShadowPodController:
    name = "shadowpods"

    def __init__(
        self,
        client: AsyncClient,
        events: EventRecorder,
        workers: int = 8,
        placement: Callable[[str], Placement] | None = None,
        wait_for: tuple[Informer, ...] = (),
    ):
        self.client = client
        self.events = events
        # The tenant's placement for a twin namespace; the informers behind it must be synced first.
        self.placement = placement or (lambda namespace: Placement())
        self.wait_for = wait_for
        self.shadows = Informer(client, ShadowPod, name="shadowpods", transform=as_dict)
        self.pods = Informer(
            client, Pod, name="shadowpod-pods", labels={LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}, transform=as_dict
        )
        self.queue = WorkQueue(self.name, self.reconcile, workers=workers)
        self.shadows.on_change(lambda event, key, new, old: self.queue.add(key))
        self.pods.on_change(lambda event, key, new, old: self.queue.add(key))

    def tasks(self):
        return [self.shadows.run(), self.pods.run(), self._run_queue()]

    async def _run_queue(self):
        for informer in (self.shadows, self.pods, *self.wait_for):
            await informer.synced.wait()
        await self.queue.run()

    async def reconcile(self, key) -> float | None:
        namespace, name = key
        shadow = self.shadows.get(namespace, name)
        if shadow is None or shadow["metadata"].get("deletionTimestamp"):
            return None  # garbage collection removes the Pod through its owner reference
        pod = self.pods.get(namespace, name)
        status = shadow.get("status") or {}
        if pod is None:
            if status.get("phase") in TERMINAL_PHASES:
                return None
            return await self._create_pod(shadow)
        owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        if owner is None or owner.get("uid") != shadow["metadata"]["uid"]:
            await self._patch_status(
                shadow,
                {
                    "conditions": set_condition(
                        status.get("conditions") or [],
                        "PodCreated",
                        "False",
                        "Conflict",
                        f"pod {namespace}/{name} exists and is not owned by this ShadowPod",
                    )
                },
            )
            return 30
        if pod["metadata"].get("deletionTimestamp"):
            return None  # recreated when the DELETED event arrives
        if _evicted(pod) and status.get("phase") not in TERMINAL_PHASES:
            log.info("recreating evicted pod", extra=fields(pod=f"{namespace}/{name}"))
            await self.client.delete(Pod, name, namespace=namespace, grace_period=0)
            return None
        return await self._copy_status(shadow, pod)

    async def _copy_status(self, shadow: dict, pod: dict) -> None:
        """Copy the Pod's status when something the consumer shows changed; skip intermediate noise."""
        status = shadow.get("status") or {}
        pod_status = pod.get("status") or {}
        uid = pod["metadata"]["uid"]
        replaced = bool(status.get("podUID")) and status["podUID"] != uid
        created = condition(status, "PodCreated")
        unchanged = material_status(status.get("pod") or {}) == material_status(pod_status)
        if unchanged and not replaced and (created or {}).get("status") != "False":
            return None
        wanted = {
            "phase": pod_status.get("phase", "Pending"),
            "podUID": uid,
            "pod": pod_status,
            "conditions": set_condition(status.get("conditions") or [], "PodCreated", "True", "Created"),
        }
        if replaced:
            wanted["recreations"] = int(status.get("recreations") or 0) + 1
            await self.events.record(reference(shadow), "Normal", "PodRecreated", "the pod was gone and was recreated")
        await self._patch_status(shadow, wanted)
        return None

    async def _create_pod(self, shadow: dict) -> float | None:
        meta = shadow["metadata"]
        status = shadow.get("status") or {}
        try:
            placement = self.placement(meta["namespace"])
            created = await self.client.create(Pod.from_dict(pod_from_shadow(shadow, placement)))
        except ApiError as error:
            if error.status.code == 409:
                return 1  # an old incarnation is still terminating
            reason, message = classify_create_error(error)
            previous = condition(status, "PodCreated")
            conditions = set_condition(status.get("conditions") or [], "PodCreated", "False", reason, message)
            if not same_conditions(
                [previous] if previous else [], [c for c in conditions if c["type"] == "PodCreated"]
            ):
                await self._patch_status(shadow, {"conditions": conditions, "phase": status.get("phase") or "Pending"})
                await self.events.record(reference(shadow), "Warning", reason, message)
            log.warning("cannot create pod", extra=fields(pod=f"{meta['namespace']}/{meta['name']}", reason=reason))
            return 15
        log.debug("pod created", extra=fields(pod=f"{meta['namespace']}/{meta['name']}", uid=created.metadata.uid))
        return None

    async def _patch_status(self, shadow: dict, wanted: dict) -> None:
        patch = status_patch(shadow.get("status") or {}, wanted)
        if not patch:
            return
        await patch_status(self.client, ShadowPod, shadow["metadata"], patch)
