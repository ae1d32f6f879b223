"""ShadowPod enforcement: keep a Pod of the same name running, even with the consumer away.

Before it creates a Pod, the manager holds the ShadowPod to its tenant's terms: no pod while the provider cordons
the tenant, and the pod spec is rewritten and checked field by field (provider/terms.py), must meet the tenant's Pod
Security level, fit one node its placement admits and fit its quota (its requests after the terms' defaults). A
refusal is the ShadowPod's `PodCreated=False` condition (reason TenantCordoned, PoolNotOffered, PoolCordoned,
FieldNotAllowed, PodSecurityViolation, Infeasible or QuotaExceeded) and a Warning Event; the ShadowPod is tried again
when the tenant's terms or the nodes change or its pods free some of its quota. A ShadowPod
whose local pod is of another consumer namespace than its twin's origin gets no Pod either (reason ForeignNamespace).

A ShadowPod labelled LABEL_POOL is of one of the tenant's node pools: its pod gets the pool's placement instead of the
tenant's, carries the label (the pod is accounted in the pool's bucket by it) and is held to the pool's quota; a pool
the tenant is not lent, or one cordoned, gets no pod. A pod keeps the pool it was made for until it is made again.
"""

from __future__ import annotations

import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from .. import quantities
from ..constants import (
    ANNOTATION_LOCAL_NAMESPACE,
    ANNOTATION_ORIGIN_NAMESPACE,
    ANNOTATION_RECREATIONS,
    ANNOTATION_STATUS_SOURCE,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_POOL,
    MANAGED_BY_CATAMARAN,
    MAX_TERMINATION_GRACE_SECONDS,
    SHADOWPOD_RESIZE_CONDITION,
    STATUS_SOURCE_POD,
    TERMINAL_PHASES,
    tenant_namespace,
)
from ..kube.echoes import OwnWrites
from ..kube.events import EventRecorder
from ..kube.informer import Informer, enqueue
from ..kube.ops import patch_status, tolerating
from ..kube.resources import ShadowPod
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import (
    as_dict,
    changeable_pod_fields,
    condition,
    container_resources,
    deletion_grace,
    material_status,
    recreations_stamp,
    reference,
    set_condition,
    status_patch,
)
from . import podsecurity, quota
from . import terms as tenant_terms
from .offers import Placement, ResourceOfferController, TenantTerms

log = logging.getLogger(__name__)

# A refused ShadowPod is retried when its tenant's terms or usage change; this is only a safety net.
REFUSED_RETRY_S = 300
# ShadowPod workers: each mostly waits on API round trips (the Pod's POST, the status PATCH), not on CPU.
WORKERS = 32


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


def pool_of(shadow: dict) -> str | None:
    """The node pool a ShadowPod's pod is of (its label LABEL_POOL), None: the tenant's own."""
    return (shadow["metadata"].get("labels") or {}).get(LABEL_POOL) or None


def pod_from_shadow(
    shadow: dict,
    placement: Placement | None = None,
    consumer: str | None = None,
    terms: TenantTerms | None = None,
    pool: str | None = None,
) -> dict:
    """The Pod for a ShadowPod. With `consumer` (the tenant owning the twin), the labels that say whose pod
    it is and of which of its pools (`pool`, None: of none) come from the manager, not from the ShadowPod's pod, so
    a tenant cannot hide a pod from its quota; with `terms`, the spec is rewritten as they say (provider/terms.py)."""
    meta = shadow["metadata"]
    template = shadow["spec"]["pod"]
    spec = placement.apply(template["spec"]) if placement else template["spec"]
    if terms is not None:
        spec = tenant_terms.tenant_pod_spec(spec, terms)
    # A pod is created without ephemeral containers (the API refuses them on create); reconcile adds them after.
    spec = {key: value for key, value in spec.items() if key != "ephemeralContainers"}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if terms is not None:
        annotations = tenant_terms.tenant_pod_annotations(annotations, terms)
    # The recreations are the manager's alone to stamp (_create_pod): a ShadowPod's annotation of that name never
    # reaches its pod, made or updated.
    annotations = {key: value for key, value in annotations.items() if key != ANNOTATION_RECREATIONS}
    if consumer:
        labels.update({LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN, LABEL_ORIGIN_CLUSTER_ID: consumer})
        labels.pop(LABEL_POOL, None)
        if pool:
            labels[LABEL_POOL] = pool
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
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


def foreign_namespace(shadow: dict, twin_annotations: dict) -> str | None:
    """Why a ShadowPod is not its twin's to run: its local pod is in another consumer namespace than the one the
    twin extends (the manager recorded it when it made the twin). None when it is, or when either is unknown."""
    local = (shadow["metadata"].get("annotations") or {}).get(ANNOTATION_LOCAL_NAMESPACE)
    origin = twin_annotations.get(ANNOTATION_ORIGIN_NAMESPACE)
    if local is None or origin is None or local == origin:
        return None
    return (
        f"the ShadowPod's pod is of consumer namespace {local}, and twin {shadow['metadata']['namespace']} extends"
        " another namespace; a twin runs the pods of its own namespace only"
    )


def _managed(pod: dict) -> bool:
    return (pod["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY_CATAMARAN


def made_for_a_shadowpod(pod: dict) -> bool:
    """Did the manager make this pod (for this ShadowPod or an earlier one of its name)?"""
    labels = pod["metadata"].get("labels") or {}
    owners = pod["metadata"].get("ownerReferences") or []
    return labels.get(LABEL_MANAGED_BY) == MANAGED_BY_CATAMARAN and any(
        o.get("kind") == "ShadowPod" and o.get("controller") for o in owners
    )


def compact_pod(pod) -> dict:
    """What the manager reads of a pod it created: who owns it, whether it is going, what may still change of it,
    and its status."""
    data = as_dict(pod)
    meta = data["metadata"]
    kept = (
        "name",
        "namespace",
        "uid",
        "ownerReferences",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",  # which events are its own creations' (kube/echoes.py)
    )
    return {
        "metadata": {key: meta.get(key) for key in kept},
        "changeable": changeable_pod_fields(data),
        "resources": container_resources(data.get("spec") or {}),
        "ephemeralContainers": [c.get("name") for c in (data.get("spec") or {}).get("ephemeralContainers") or []],
        "status": data.get("status") or {},
    }


def changes_for(pod: dict, wanted: dict) -> dict | None:
    """The merge patch that brings a running pod to its ShadowPod's labels and annotations (added or changed, never
    removed: the provider's own admission and controllers add some, a mesh's for one) and activeDeadlineSeconds;
    None when it has them."""
    have, want = pod.get("changeable") or {}, changeable_pod_fields(wanted)
    labels = {k: v for k, v in want["labels"].items() if (have.get("labels") or {}).get(k) != v}
    annotations = {k: v for k, v in want["annotations"].items() if (have.get("annotations") or {}).get(k) != v}
    patch: dict = {}
    if labels:
        patch.setdefault("metadata", {})["labels"] = labels
    if annotations:
        patch.setdefault("metadata", {})["annotations"] = annotations
    if want["activeDeadlineSeconds"] != have.get("activeDeadlineSeconds"):
        patch["spec"] = {"activeDeadlineSeconds": want["activeDeadlineSeconds"]}
    return patch or None


def resize_for(pod: dict, wanted: dict) -> dict | None:
    """The `pods/resize` strategic merge patch bringing a running pod's containers to the resources of `wanted` (its
    ShadowPod's pod under the tenant's terms); None when they have them."""
    have, want = pod.get("resources") or {}, container_resources(wanted["spec"])
    patch: dict = {}
    for kind in ("containers", "initContainers"):
        changed = [
            {"name": c["name"], "resources": want[c["name"]]}
            for c in wanted["spec"].get(kind) or []
            if c["name"] in want
            and c["name"] in have
            and not quantities.same_resources(want[c["name"]], have[c["name"]])
        ]
        if changed:
            patch[kind] = changed
    return {"spec": patch} if patch else None


def pool_refusal(terms: TenantTerms, pool: str) -> tuple[str, str] | None:
    """(reason, message) when the tenant may have no new pod of `pool`: the provider does not lend it the pool
    (PoolNotOffered), or cordons it (PoolCordoned); None when it may."""
    lent = terms.pool(pool)
    if lent is None:
        pools = ", ".join(p.name for p in terms.pools) or "none"
        return "PoolNotOffered", f"the provider lends this tenant no pool {pool} (pools lent: {pools})"
    if lent.cordoned:
        return "PoolCordoned", f"the provider lends pool {pool} nothing new: " + (lent.cordon_reason or "cordoned")
    return None


def _whose(pool: str | None) -> str:
    """Whose pods a refusal speaks of: the tenant's, or its pool's."""
    return "the tenant's pods" if pool is None else f"the pods of pool {pool}"


def _bucket(consumer: str, pool: str | None) -> str:
    """The quota a refusal speaks of: the tenant's own, or its pool's."""
    whose = f"tenant {consumer}" if pool is None else f"pool {pool} of tenant {consumer}"
    return f"{whose} on this provider"


def _resize_said(status: dict) -> tuple[str, str] | None:
    """(reason, message) of the resize refusal a ShadowPod's status says (SHADOWPOD_RESIZE_CONDITION); None: none."""
    resize = condition(status, SHADOWPOD_RESIZE_CONDITION)
    return None if resize is None else (resize.get("reason"), resize.get("message"))


def _with_resize_refusal(conditions: list[dict], refused: tuple[str, str] | None) -> list[dict]:
    """A ShadowPod's conditions saying its resize is refused (reason, message), only while it is."""
    if refused is None:
        return [c for c in conditions if c["type"] != SHADOWPOD_RESIZE_CONDITION]
    return set_condition(conditions, SHADOWPOD_RESIZE_CONDITION, "False", *refused)


def recreations_count(recorded: object) -> int:
    """The recreations a ShadowPod's status records (the manager writes them; none: 0)."""
    return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0 else 0


def _owned_by(pod: dict, shadow: dict) -> bool:
    owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
    return owner is not None and owner.get("uid") == shadow["metadata"]["uid"]


def _evicted(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Failed" and status.get("reason") == "Evicted"


def _status_changed_or_others_added(old: dict, new: dict) -> bool:
    """Whether two versions of a pod (compact_pod's) differ only in their status and in labels or annotations added
    (the binding's topology labels, a mesh's annotations): none is the manager's to act on, as changes_for never
    removes what others add. A label or annotation changed or removed, or any other change, is."""

    def beyond(pod: dict) -> dict:
        return {**pod, "status": None, "changeable": None, "metadata": {**pod["metadata"], "resourceVersion": None}}

    def kept(before: dict, after: dict) -> bool:
        return all(key in after and after[key] == value for key, value in before.items())

    have, now = old.get("changeable") or {}, new.get("changeable") or {}
    return (
        beyond(old) == beyond(new)
        and have.get("activeDeadlineSeconds") == now.get("activeDeadlineSeconds")
        and all(kept(have.get(part) or {}, now.get(part) or {}) for part in ("labels", "annotations"))
    )


def _reads_pod_status(shadow: dict) -> bool:
    """Whether the ShadowPod's virtual kubelet reads its pod's status from the Pod (ANNOTATION_STATUS_SOURCE), so the
    manager writes only what it decides (_record_status), not a copy (_copy_status)."""
    return (shadow["metadata"].get("annotations") or {}).get(ANNOTATION_STATUS_SOURCE) == STATUS_SOURCE_POD


def status_asks_nothing(shadow: dict | None, pod: dict) -> bool:
    """Whether a change of the pod's status (and of labels others added) asks nothing of the manager: the pod runs on
    (no end, no eviction) and its ShadowPod's virtual kubelet reads the Pod's status itself (_record_status writes
    nothing for a running pod), with no recreation and no refusal recorded whose end is to be written."""
    if shadow is None or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES or not _reads_pod_status(shadow):
        return False
    status = shadow.get("status") or {}
    # A recreation to record (its own create's echo told nothing), or a refusal whose end is to be written.
    return not _recreation_unrecorded(status, pod) and not _refusal_recorded(status)


def _recreation_unrecorded(status: dict, pod: dict) -> bool:
    """Whether the pod's recreations stamp is ahead of what its ShadowPod's status records."""
    return _stamped_recreations(pod) > recreations_count(status.get("recreations"))


def _stamped_recreations(pod: dict) -> int:
    return recreations_stamp((pod.get("changeable") or {}).get("annotations")) or 0


def _refusal_recorded(status: dict) -> bool:
    """Whether the ShadowPod's status records a refusal (PodCreated not True), whose end is to be written."""
    created = condition(status, "PodCreated")
    return created is not None and created.get("status") != "True"


class ShadowPodController:
    name = "shadowpods"

    def __init__(
        self,
        client: AsyncClient,
        events: EventRecorder,
        offers: ResourceOfferController,
        twin_namespaces: Informer,
        workers: int = WORKERS,
        wait_for: tuple[Informer, ...] = (),
    ):
        self.client = client
        self.events = events
        # The tenants' terms and quotas, and the twin namespaces (as dicts; their labels name the consumer
        # and the enforced Pod Security level); these informers and `wait_for` must be synced first.
        self.offers = offers
        self.twin_namespaces = twin_namespaces
        self.wait_for = wait_for
        self._refused: dict[str | None, set] = {}  # consumer -> keys of its ShadowPods refused for now
        offers.on_admission_may_change(self._retry_refused)
        twin_namespaces.on_change(self._twin_namespace_changed)
        self.shadows = Informer(client, ShadowPod, name="shadowpods", transform=as_dict, packed=True, plain=True)
        # The pods it created: a view of the offers' pod informer (one pod watch per process).
        self.pods = offers.pods.view("shadowpod-pods", include=_managed, transform=compact_pod, packed=True)
        self.queue = WorkQueue(self.name, self.reconcile, workers=workers)
        # Neither the pods it creates nor the statuses it writes come back as reconciles (kube/echoes.py).
        self.created_pods = OwnWrites()
        self.written_statuses = OwnWrites()
        # ShadowPod -> the recreations stamped on its pod that is gone, until the pod is made again (_create_pod).
        self._gone: dict[tuple[str, str], int] = {}
        self.shadows.on_change(self.written_statuses.skipping(enqueue(self.queue)))
        self.pods.on_change(self._pod_gone)  # before the reconcile it queues
        self.pods.on_change(self.created_pods.skipping(enqueue(self.queue, when=self._pod_asks_something)))

    def tasks(self):
        return [self.shadows.run(), self._run_queue()]

    def _twin(self, namespace: str) -> tuple[str | None, str | None]:
        """The consumer owning a twin namespace and the level Pod Security Admission enforces there."""
        twin = self.twin_namespaces.get(None, namespace)
        labels = ((twin or {}).get("metadata") or {}).get("labels") or {}
        return labels.get(LABEL_ORIGIN_CLUSTER_ID), labels.get(podsecurity.ENFORCE_LABEL)

    def _twin_annotations(self, namespace: str) -> dict:
        twin = self.twin_namespaces.get(None, namespace)
        return ((twin or {}).get("metadata") or {}).get("annotations") or {}

    def _twin_namespace_changed(self, event, key, new, old) -> None:
        """A relabelled twin may now admit what it refused (the level is relaxed once the label is)."""
        labels = [((obj or {}).get("metadata") or {}).get("labels") for obj in (new, old)]
        if labels[0] == labels[1]:
            return
        for keys in self._refused.values():
            for refused in [k for k in keys if k[0] == key[1]]:
                keys.discard(refused)
                self.queue.add(refused)

    def _retry_refused(self, consumer: str | None) -> None:
        tenants = list(self._refused) if consumer is None else [consumer]
        for tenant in tenants:
            for key in self._refused.pop(tenant, ()):
                self.queue.add(key)

    def _forget(self, key) -> None:
        """The ShadowPod needs no pod now: drop its refusal and any quota it held for a pod never seen."""
        for keys in self._refused.values():
            keys.discard(key)
        self.offers.release(key)
        self._gone.pop(key, None)

    def _pod_asks_something(self, event, key, new, old) -> bool:
        """A running pod's reports (scheduled, started, ready) and the labels others add cost no reconcile of a
        ShadowPod whose virtual kubelet reads its status from the Pod: all a pod's start brought, each a no-op."""
        if event != "MODIFIED" or old is None or new is None or not _status_changed_or_others_added(old, new):
            return True
        return not status_asks_nothing(self.shadows.get(*key), new)  # the ShadowPod read only past the check above

    def _pod_gone(self, event, key, new, old) -> None:
        """A pod of a ShadowPod that stays is gone (deleted, evicted): the next one is its recreation. Remembered here
        for the virtual kubelets that read the Pod's status (they see its recreations on it); a pod gone while this
        process was down is counted only when the ShadowPod's status recorded a pod (_recreations)."""
        if event != "DELETED" or old is None:
            return
        shadow = self.shadows.get(*key)
        if shadow is not None and not shadow["metadata"].get("deletionTimestamp") and _owned_by(old, shadow):
            self._gone[key] = recreations_stamp((old.get("changeable") or {}).get("annotations")) or 0

    async def _run_queue(self):
        for informer in (self.shadows, self.pods, *self.wait_for):
            await informer.synced.wait()
        await self.queue.run()

    async def reconcile(self, key) -> float | None:
        namespace, name = key
        self.created_pods.forget(key)
        self.written_statuses.forget(key)
        shadow = self.shadows.get(namespace, name)
        pod = self.pods.get(namespace, name)
        if shadow is not None and shadow["metadata"].get("deletionTimestamp") and pod is not None:
            if _owned_by(pod, shadow):
                await self._pass_on_grace(shadow, pod)
                # Garbage collection removes the Pod (foreground): until then its way down, its containers' real
                # ends included, still reaches the consumer.
                await self._copy_status(shadow, pod)
            return None
        if shadow is None or shadow["metadata"].get("deletionTimestamp"):
            self._forget(key)
            return None  # garbage collection removes the Pod through its owner reference
        status = shadow.get("status") or {}
        if pod is None:
            if status.get("phase") in TERMINAL_PHASES:
                self._forget(key)
                return None
            return await self._create_pod(shadow)
        if not _owned_by(pod, shadow):
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
        wanted = (shadow["spec"]["pod"].get("spec") or {}).get("ephemeralContainers") or []
        if missing := [c for c in wanted if c.get("name") not in pod.get("ephemeralContainers", [])]:
            await self._add_ephemeral_containers(shadow, missing)
        # Only the pod's labels, annotations, deadline and resources change in place: the placement need not be applied.
        # The pod stays of the pool it was made for (its label, by which it is accounted) until it is made again.
        consumer, _, terms = self._tenant_terms(shadow)
        pool = ((pod.get("changeable") or {}).get("labels") or {}).get(LABEL_POOL) or None
        wanted_pod = pod_from_shadow(shadow, consumer=consumer, terms=terms if consumer else None, pool=pool)
        resize_refused = None
        if resize := resize_for(pod, wanted_pod):
            resize_refused = await self._resize(shadow, consumer, wanted_pod, resize, pool)
        await self._copy_status(shadow, pod, resize_refused)
        if changes := changes_for(pod, wanted_pod):
            try:
                await self.client.patch(Pod, name, changes, namespace=namespace, patch_type=PatchType.MERGE)
            except ApiError as error:  # e.g. a deadline raised: the API server allows only shortening it
                message = f"the pod's labels, annotations or deadline not updated: {error.status.message or error}"
                await self.events.record(reference(shadow), "Warning", "RemotePodUpdateRefused", message)
        return REFUSED_RETRY_S if resize_refused else None

    async def _resize(
        self, shadow: dict, consumer: str | None, wanted_pod: dict, body: dict, pool: str | None = None
    ) -> tuple[str, str] | None:
        """Resize the pod in place as its ShadowPod now asks (the consumer's `pods/resize`) once the new requests fit
        one node and the quota of the pod's bucket (the tenant's, or its pool's); else (reason, message) why not:
        Infeasible, or Deferred while other pods hold the quota (the kubelet's words). A refused resize is tried
        again when the tenant's usage or terms change, and a Warning Event says why when the reason is new."""
        meta = shadow["metadata"]
        key = (meta["namespace"], meta["name"])
        refusal = self._resize_refusal(key, consumer, wanted_pod, pool) if consumer else None
        if refusal is None:
            try:
                await self.client.patch(
                    Pod.Resize, meta["name"], body, namespace=meta["namespace"], patch_type=PatchType.STRATEGIC
                )
            except ApiError as error:  # the provider's own admission: its ResourceQuota, its LimitRange
                self.offers.release(key)
                if error.status.code in (404, 409):
                    return None  # the pod changed or went meanwhile: its watch brings it back
                refusal = "Infeasible", f"the provider's API server refused the resize: {error.status.message or error}"
            else:
                log.info("pod resized", extra=fields(pod=f"{meta['namespace']}/{meta['name']}"))
                return None
        self._refused.setdefault(consumer, set()).add(key)
        previous = condition(shadow.get("status"), SHADOWPOD_RESIZE_CONDITION) or {}
        if previous.get("reason") != refusal[0]:
            await self.events.record(reference(shadow), "Warning", "ResizeRefused", refusal[1])
        return refusal

    def _resize_refusal(self, key, consumer: str, wanted_pod: dict, pool: str | None = None) -> tuple[str, str] | None:
        """(reason, message) when the tenant may not have its pod (of `pool`, None: of none) at the resized requests,
        None once reserved."""
        namespace = tenant_namespace(consumer)
        requests = quantities.pod_requests(wanted_pod["spec"])
        if beyond := self.offers.beyond_every_node(namespace, requests, pool):
            return "Infeasible", f"no node of this provider {_whose(pool)} may use can hold it: {'; '.join(beyond)}"
        if beyond := quota.excess(self.offers.quota(namespace, pool), {}, quota.pod_usage(requests)):
            return "Infeasible", f"exceeds the whole quota of {_bucket(consumer, pool)}: {'; '.join(beyond)}"
        if exceeded := self.offers.admit(key, consumer, requests, pool):
            return "Deferred", f"exceeds the quota of {_bucket(consumer, pool)}: {'; '.join(exceeded)}"
        return None

    async def _pass_on_grace(self, shadow: dict, pod: dict) -> None:
        """A ShadowPod deleted with the local pod's own grace period (ANNOTATION_DELETION_GRACE) deletes its Pod with
        it: garbage collection alone would give the Pod its spec's whole terminationGracePeriodSeconds."""
        asked = deletion_grace(shadow["metadata"].get("annotations"))
        consumer, _, terms = self._tenant_terms(shadow)
        bound = (
            min(MAX_TERMINATION_GRACE_SECONDS, terms.max_termination_grace_seconds)
            if consumer
            else (MAX_TERMINATION_GRACE_SECONDS)
        )
        grace = min(asked, bound) if asked is not None else None
        going = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None or (pod["metadata"].get("deletionTimestamp") and going is not None and going <= grace):
            return
        meta = pod["metadata"]
        with tolerating(404):
            await self.client.delete(Pod, meta["name"], namespace=meta["namespace"], grace_period=grace)

    async def _add_ephemeral_containers(self, shadow: dict, containers: list[dict]) -> None:
        """`kubectl debug` on the consumer: the containers join the running Pod, held to the tenant's Pod Security
        level like the rest of it (a refusal is an Event on the ShadowPod, which the consumer mirrors)."""
        meta = shadow["metadata"]
        _, enforced, terms, _, pod = self._tenant_pod(shadow)
        level = podsecurity.stricter(terms.pod_security, enforced)
        found = podsecurity.violations(
            {**pod["spec"], "ephemeralContainers": containers}, level, pod["metadata"].get("annotations")
        )
        names = ", ".join(c.get("name", "?") for c in containers)
        if found:
            message = f'ephemeral containers {names} violate PodSecurity "{level}:latest": {", ".join(found)}'
            await self.events.record(reference(shadow), "Warning", "EphemeralContainersRefused", message)
            return
        body = {"spec": {"ephemeralContainers": containers}}
        try:
            await self.client.patch(
                Pod.Ephemeralcontainers, meta["name"], body, namespace=meta["namespace"], patch_type=PatchType.STRATEGIC
            )
        except ApiError as error:
            message = f"ephemeral containers {names} not added: {error.status.message or error}"
            await self.events.record(reference(shadow), "Warning", "EphemeralContainersRefused", message)
            return
        await self.events.record(reference(shadow), "Normal", "EphemeralContainersAdded", f"added {names}")

    async def _copy_status(self, shadow: dict, pod: dict, resize_refused: tuple[str, str] | None = None) -> None:
        """Copy the Pod's status when something the consumer shows changed, and say whether its resize is refused
        (SHADOWPOD_RESIZE_CONDITION, only while it is); skip intermediate noise. A virtual kubelet that reads the
        Pod itself gets only what the manager decides (_record_status)."""
        if _reads_pod_status(shadow):
            return await self._record_status(shadow, pod, resize_refused)
        status = shadow.get("status") or {}
        pod_status = pod.get("status") or {}
        uid = pod["metadata"]["uid"]
        replaced = bool(status.get("podUID")) and status["podUID"] != uid
        created = condition(status, "PodCreated")
        unchanged = material_status(status.get("pod") or {}) == material_status(pod_status)
        if (
            unchanged
            and not replaced
            and (created or {}).get("status") != "False"
            and _resize_said(status) == resize_refused
        ):
            return None
        conditions = set_condition(status.get("conditions") or [], "PodCreated", "True", "Created")
        wanted = {
            "phase": pod_status.get("phase", "Pending"),
            "podUID": uid,
            "pod": pod_status,
            "conditions": _with_resize_refusal(conditions, resize_refused),
        }
        if replaced:
            wanted["recreations"] = recreations_count(status.get("recreations")) + 1
            await self._say_recreated(shadow)
        await self._patch_status(shadow, wanted)
        return None

    async def _say_recreated(self, shadow: dict) -> None:
        await self.events.record(reference(shadow), "Normal", "PodRecreated", "the pod was gone and was recreated")

    async def _record_status(self, shadow: dict, pod: dict, resize_refused: tuple[str, str] | None) -> None:
        """The ShadowPod's status for a virtual kubelet that reads the Pod's: only what the manager decides, written
        when it changes. The pod's recreations (stamped on it) with its uid; the end of a refusal; a resize refused;
        the pod's final status once it ended, which outlives the pod and keeps it from being made again. A pod
        running as it should costs its ShadowPod no write."""
        status = shadow.get("status") or {}
        pod_status = pod.get("status") or {}
        uid = pod["metadata"]["uid"]
        recreations = _stamped_recreations(pod)
        recreated = _recreation_unrecorded(status, pod)
        ended = pod_status.get("phase") in TERMINAL_PHASES and (
            status.get("podUID") != uid or material_status(status.get("pod") or {}) != material_status(pod_status)
        )
        created = condition(status, "PodCreated")
        refusal_ended = _refusal_recorded(status)
        if not (recreated or ended or refusal_ended or _resize_said(status) != resize_refused):
            return
        conditions = status.get("conditions") or []
        if created is not None:
            conditions = set_condition(conditions, "PodCreated", "True", "Created")
        wanted: dict = {"conditions": _with_resize_refusal(conditions, resize_refused)}
        if refusal_ended and status.get("phase") not in TERMINAL_PHASES:
            wanted["phase"] = None  # the Pending a refusal recorded: the Pod says its phase now
        if recreated:
            wanted.update(recreations=recreations, podUID=uid)
            await self._say_recreated(shadow)
        if ended:
            wanted.update(phase=pod_status["phase"], podUID=uid, pod=pod_status)
        await self._patch_status(shadow, wanted)

    def _refusal(
        self, key, consumer: str | None, terms: TenantTerms, enforced: str | None, pod: dict, pool: str | None = None
    ) -> tuple[str, str] | None:
        """Why the tenant may not have this pod (of `pool`, None: of none) now (reason, message), or None once the
        quota of its bucket is reserved.

        The level is the tenant's, or the twin's label while that is stricter (not relabelled yet), so the
        pod is never sent to be refused by Pod Security Admission."""
        if consumer is not None and terms.cordoned:
            return "TenantCordoned", "the provider lends this tenant nothing new: " + (
                terms.cordon_reason or "cordoned"
            )
        if consumer is not None and pool is not None and (refusal := pool_refusal(terms, pool)) is not None:
            return refusal
        refused = tenant_terms.refused_fields(pod["spec"])
        if refused:
            return "FieldNotAllowed", f"the provider's terms refuse pod spec fields: {', '.join(refused)}"
        if tenant_terms.pod_affinity_reaches_out(pod["spec"]):
            return "FieldNotAllowed", "the provider's terms refuse pod affinity terms naming other namespaces"
        level = podsecurity.stricter(terms.pod_security, enforced)
        found = podsecurity.violations(pod["spec"], level, pod["metadata"].get("annotations"))
        if found:
            return "PodSecurityViolation", f'violates PodSecurity "{level}:latest": {", ".join(found)}'
        if consumer is None:
            return None
        requests = quantities.pod_requests(pod["spec"])
        # Before the quota: a pod no node can hold never runs, however much of the quota is free later.
        if beyond := self.offers.beyond_every_node(tenant_namespace(consumer), requests, pool):
            return "Infeasible", f"no node of this provider {_whose(pool)} may use can hold it: {'; '.join(beyond)}"
        exceeded = self.offers.admit(key, consumer, requests, pool)
        if exceeded:
            return "QuotaExceeded", f"exceeds the quota of {_bucket(consumer, pool)}: {'; '.join(exceeded)}"
        return None

    def _tenant_terms(self, shadow: dict) -> tuple[str | None, str | None, TenantTerms]:
        """(tenant, the twin's enforced level, the tenant's terms) of a ShadowPod."""
        consumer, enforced = self._twin(shadow["metadata"]["namespace"])
        terms = self.offers.terms(tenant_namespace(consumer)) if consumer else TenantTerms()
        return consumer, enforced, terms

    def _tenant_pod(self, shadow: dict) -> tuple[str | None, str | None, TenantTerms, str | None, dict]:
        """(tenant, the twin's enforced level, the tenant's terms, the pool of the ShadowPod's pod, the Pod its terms
        make of the ShadowPod: with the pool's placement, or the tenant's for a pod of no pool or of one not lent,
        which is refused)."""
        consumer, enforced, terms = self._tenant_terms(shadow)
        # A ShadowPod outside a twin is the provider admin's own: no tenant, no terms but the default level, no pool.
        pool = pool_of(shadow) if consumer else None
        lent = terms.lent(pool)
        placement = lent[0] if lent is not None else terms.placement  # a pool not lent is refused (_refusal)
        pod = pod_from_shadow(shadow, placement, consumer, terms if consumer else None, pool)
        return consumer, enforced, terms, pool, pod

    async def _create_pod(self, shadow: dict) -> float | None:
        meta = shadow["metadata"]
        key = (meta["namespace"], meta["name"])
        consumer, enforced, terms, pool, pod = self._tenant_pod(shadow)
        foreign = foreign_namespace(shadow, self._twin_annotations(meta["namespace"]))
        refusal = ("ForeignNamespace", foreign) if foreign else self._refusal(key, consumer, terms, enforced, pod, pool)
        if refusal is not None:
            self._refused.setdefault(consumer, set()).add(key)
            await self._report_refusal(shadow, *refusal)
            return REFUSED_RETRY_S
        if recreations := self._recreations(key, shadow):
            pod["metadata"]["annotations"] = {
                **pod["metadata"]["annotations"],
                ANNOTATION_RECREATIONS: str(recreations),
            }
        try:
            created = await self.client.create(Pod.from_dict(pod))
        except ApiError as error:
            self.offers.release(key)
            if error.status.code == 409:
                return await self._name_in_use(shadow)
            await self._report_refusal(shadow, *classify_create_error(error))
            return 15
        log.debug("pod created", extra=fields(pod=f"{meta['namespace']}/{meta['name']}", uid=created.metadata.uid))
        self._gone.pop(key, None)
        self.created_pods.wrote(key, created)
        return None

    def _recreations(self, key, shadow: dict) -> int:
        """How many pods of the ShadowPod were gone before the one about to be made: one more than the last one's,
        when a pod of it is gone (seen going, or recorded in its status by an earlier recreation or copy); 0 for
        its first."""
        status = shadow.get("status") or {}
        recorded = recreations_count(status.get("recreations"))
        gone = self._gone.get(key)
        if gone is not None:
            return max(gone, recorded) + 1
        return recorded + 1 if status.get("podUID") else 0

    async def _name_in_use(self, shadow: dict) -> float | None:
        """A pod of the ShadowPod's name exists: an earlier incarnation still terminating is waited out; a pod the
        manager did not make (the provider's own, or the tenant's) is never adopted, and the ShadowPod says so."""
        meta = shadow["metadata"]
        try:
            existing = as_dict(await self.client.get(Pod, meta["name"], namespace=meta["namespace"]))
        except ApiError as error:
            if error.status.code == 404:
                return 1  # gone meanwhile: create again
            raise
        if made_for_a_shadowpod(existing):
            return 1
        message = (
            f"pod {meta['name']} already exists in {meta['namespace']} and was not made for a ShadowPod: not adopted"
        )
        await self._report_refusal(shadow, "PodNameTaken", message)
        return REFUSED_RETRY_S

    async def _report_refusal(self, shadow: dict, reason: str, message: str) -> None:
        """PodCreated=False with the reason and message; a Warning Event when the reason is new (a quota message
        changes with the tenant's usage, which is no news)."""
        meta = shadow["metadata"]
        status = shadow.get("status") or {}
        previous = condition(status, "PodCreated") or {}
        conditions = set_condition(status.get("conditions") or [], "PodCreated", "False", reason, message)
        if (previous.get("status"), previous.get("reason"), previous.get("message")) == ("False", reason, message):
            return
        await self._patch_status(shadow, {"conditions": conditions, "phase": status.get("phase") or "Pending"})
        if (previous.get("status"), previous.get("reason")) != ("False", reason):
            await self.events.record(reference(shadow), "Warning", reason, message)
        log.warning("cannot create pod", extra=fields(pod=f"{meta['namespace']}/{meta['name']}", reason=reason))

    async def _patch_status(self, shadow: dict, wanted: dict) -> None:
        patch = status_patch(shadow.get("status") or {}, wanted)
        if not patch:
            return
        written = await patch_status(self.client, ShadowPod, shadow["metadata"], patch)
        if written is None:
            return
        # A patch made against a cache that lagged may leave other than wanted: then its echo is reconciled.
        status = as_dict(written).get("status") or {}
        if all(status.get(field) == value for field, value in wanted.items()):
            self.written_statuses.wrote((shadow["metadata"]["namespace"], shadow["metadata"]["name"]), written)
