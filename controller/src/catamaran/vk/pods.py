"""Pods bound to the virtual node become ShadowPods in the provider's twin namespaces.

Local pods are watched with a server-side field selector on the node name; each twin namespace
gets one ShadowPod watch (the tenant credential may only list inside its own namespaces). The
remote names equal the local ones, so a restarted process rebuilds its state from the two
clusters and neither duplicates nor loses a pod.
"""

from __future__ import annotations

import asyncio
import logging

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import CascadeType, PatchType

from ..constants import ANNOTATION_LOCAL_POD_UID, ROOT_CA_CONFIGMAP
from ..kube.informer import Informer, NamespacedInformers, call
from ..kube.ops import patch_status, tolerating
from ..kube.resources import ForeignCluster, ShadowPod
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, condition, now_iso, reference, set_condition, status_patch
from ..steering import is_daemonset_pod
from .context import PeeringContext
from .forge import (
    ANNOTATION_LOCAL_NAMESPACE,
    HELD_REASONS,
    POD_IP_CONDITION,
    REMOTE_CONDITION,
    IPTranslator,
    held_pod_status,
    local_pod_status,
    offload_refusal,
    shadowpod_for,
)
from .local_ranges import LocalRanges
from .namespaces import TwinManager
from .node import VirtualNode
from .reflection.policy import ReflectionSettings
from .reflection.reflection import Reflection
from .reflection.tokens import token_secret_name
from .remote_events import RemoteEventMirror
from .trust import sanitised_message

log = logging.getLogger(__name__)

REMOTE_FAILURE_EVENTS = {
    "QuotaExceeded": "RemoteQuotaExceeded",
    "AdmissionRejected": "RemoteAdmissionRejected",
    "NamespaceMissing": "RemoteNamespaceMissing",
}
# On a local pod, once for each pod IP its provider reports that the consumer refuses (POD_IP_CONDITION says why).
POD_IP_REFUSED = "PodIPRefused"
# On the virtual node and the ForeignCluster: True while some provider pod IPs cannot be remapped.
UNTRANSLATED_CONDITION = "catamaran.io/PodIPsUntranslated"
# On the virtual node and the ForeignCluster: True while every pod IP of the provider is refused, for an overlap
# with the consumer's own ranges (reasons in forge.py) or because it announces no pod range.
REFUSED_CONDITION = "catamaran.io/PodIPsRefused"
NO_PROVIDER_RANGES = "NoProviderRanges"
PROVIDER_RANGES_ACCEPTED = "ProviderRangesAccepted"
# A pod waiting for its token Secret is looked at again after this long even if no one says it is written.
TOKEN_WAIT_RECHECK_S = 30.0


def create_refusal(code: int, message: str, provider_id: str) -> tuple[str, str] | None:
    """(reason, message) for the local pod when the provider refuses the ShadowPod itself; None: retry quietly."""
    if code == 404:
        reason = "NamespaceMissing"
    elif code in (400, 403, 422):
        reason = "QuotaExceeded" if "exceeded quota" in message else "AdmissionRejected"
    else:
        return None  # conflicts, throttling and server errors are transient
    return reason, f"provider {provider_id} refused the ShadowPod: {message}"


def compact_local_pod(pod) -> dict:
    """What the reconciler needs of a local pod; the full object is not kept."""
    data = as_dict(pod)
    meta = data["metadata"]
    return {
        "metadata": {
            key: meta.get(key)
            for key in (
                "name",
                "namespace",
                "uid",
                "labels",
                "annotations",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "ownerReferences",
            )
        },
        "spec": data["spec"],
        "status": data.get("status") or {},
    }


def compact_shadow(shadow) -> dict:
    """A ShadowPod without its pod spec, which the virtual kubelet never reads back."""
    meta = shadow["metadata"]
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "annotations": meta.get("annotations") or {},
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "status": shadow.get("status") or {},
    }


def comparable_status(status: dict) -> dict:
    """The fields the virtual kubelet owns, without heartbeat-like noise."""
    return {
        "phase": status.get("phase"),
        "podIP": status.get("podIP"),
        "hostIP": status.get("hostIP"),
        "startTime": status.get("startTime"),
        "reason": status.get("reason"),
        "conditions": sorted(
            (c["type"], c["status"], c.get("reason") or "", c.get("message") or "")
            for c in status.get("conditions") or []
        ),
        "containers": [
            (c["name"], c.get("ready"), c.get("restartCount"), sorted((c.get("state") or {}).keys()))
            for c in status.get("containerStatuses") or []
        ],
    }


class PodController:
    name = "pods"

    def __init__(
        self,
        peering: PeeringContext,
        node: VirtualNode,
        reflection_settings: ReflectionSettings,
        *,
        remap_cidr: str | None,
        workers: int = 16,
    ):
        self.peering = peering
        self.node = node
        self.remap_cidr = remap_cidr
        # None until both the provider's announced pod ranges and the consumer's own are known: until then the
        # local pods keep the IPs they show, so a restart neither drops them nor shows unchecked ones.
        self.translate: IPTranslator | None = None
        self.provider_cidrs: list[str] | None = None  # as the ResourceOffer announces them; None: not seen yet
        self.local_ranges = LocalRanges(peering.local, node.settings.node_ip)
        self.local_ranges.listeners.append(self._retranslate)
        self._translation_changed = asyncio.Event()
        self.local_pods = Informer(
            peering.local,
            Pod,
            name="local-pods",
            fields={"spec.nodeName": peering.node_name},
            transform=compact_local_pod,
            packed=True,
        )
        self.twins = TwinManager(
            peering,
            # DaemonSet pods are never offloaded, so a leaving twin has none of them to drain.
            pods_on_node=lambda namespace: [
                p
                for key in self.local_pods.keys_in(namespace)
                if (p := self.local_pods.cache.get(key)) is not None and not is_daemonset_pod(p)
            ],
            shadows_left=lambda twin: len(informer.cache) if (informer := self.shadow_informers.get(twin)) else 0,
        )
        self.shadow_informers = NamespacedInformers(self._shadow_informer)
        self.remote_events = RemoteEventMirror(peering, self.local_pods)
        self.twins.ready_listeners += [self._twin_ready, self.remote_events.twin_ready]
        self.twins.removed_listeners += [self.shadow_informers.unwatch, self.remote_events.twin_removed]
        self.queue = WorkQueue(self.name, self.reconcile, workers=workers)
        self.local_pods.on_change(self._local_changed)
        # A namespace's offloading appearing, changing or going changes what its waiting pods say. Its status,
        # which every virtual node of the namespace writes, does not: requeuing every pod on each of those
        # writes made 35 reconciles per pod with 5 providers.
        self.twins.offloadings.on_change(
            call(
                self._requeue_namespace,
                key=lambda key: key[0],
                when=lambda event, key, new, old: _placement(new) != _placement(old),
            )
        )
        self.twins.node.on_change(call(self._translation_changed.set))
        node.health_listeners.append(lambda healthy: self._requeue_all())
        # Reflection works in the same twins, and issues the tokens of the same local pods.
        self.reflection = Reflection(peering, self.twins, self.local_pods, reflection_settings)
        # Events about reflected objects come back onto the local objects.
        self.remote_events.reflected = self.reflection.local_object
        # The cluster-wide Service and EndpointSlice watches also hold the `kubernetes` Service and API server.
        self.local_ranges.follow_kubernetes_service(
            self.reflection.reflectors["services"].local_objects.informer,
            self.reflection.reflectors["endpointSlices"].local_objects.informer,
        )
        # Pods wait for their token Secret before their ShadowPod.
        self.reflection.tokens.written_listeners.append(self.queue.add)
        self.local_pods.on_change(call(self.reflection.tokens.pod_changed, key=lambda key: key))

    def _local_changed(self, event, key, new, old) -> None:
        self.queue.add(key)
        if event == "ADDED":
            self.twins.want(key[0])

    def update_pod_cidrs(self, provider_cidrs: list[str]) -> None:
        self.provider_cidrs = list(provider_cidrs)
        self._retranslate()

    def _retranslate(self) -> None:
        """A new translator when the provider's ranges or the consumer's change; every pod is looked at again."""
        if self.provider_cidrs is None or not self.local_ranges.synced.is_set():
            return
        translator = IPTranslator(self.provider_cidrs, self.remap_cidr, self.local_ranges.ranges())
        if self.translate is not None and translator.same_as(self.translate):
            return
        if translator.ignored:
            log.warning("provider pod ranges ignored", extra=fields(ignored=", ".join(translator.ignored)))
        if translator.conflict:
            log.warning("provider pod IPs refused", extra=fields(problem=translator.conflict[1]))
        elif translator.problem:
            log.warning("pod IPs cannot all be translated", extra=fields(problem=translator.problem))
        self.translate = translator
        self._translation_changed.set()
        self._requeue_all()

    def twin_for(self, local_namespace: str) -> str:
        return self.twins.mapped_name(local_namespace)

    def tasks(self):
        return [
            self.local_pods.run(),
            *self.twins.tasks(),
            *self.remote_events.tasks(),
            *self.local_ranges.tasks(),
            self._run(),
            self._translation_loop(),
        ]

    async def _run(self):
        await self.local_pods.synced.wait()
        for informer in (self.twins.requests, self.twins.offloadings, self.twins.node):
            await informer.synced.wait()
        await self.queue.run()

    def _requeue_all(self) -> None:
        for key in list(self.local_pods.cache):
            self.queue.add(key)

    def _requeue_namespace(self, namespace: str) -> None:
        for key in self.local_pods.keys_in(namespace):
            self.queue.add(key)

    def _twin_ready(self, origin: str, twin: str) -> None:
        self.shadow_informers.watch(twin)
        self._requeue_namespace(origin)

    def _shadow_informer(self, twin: str) -> Informer:
        informer = Informer(
            self.peering.provider, ShadowPod, name="shadowpods", namespace=twin, transform=compact_shadow, packed=True
        )
        informer.on_change(self._shadow_changed)
        return informer

    def _shadow_changed(self, event, key, new, old) -> None:
        shadow = new or old
        local_namespace = (shadow["metadata"].get("annotations") or {}).get(ANNOTATION_LOCAL_NAMESPACE)
        if local_namespace:
            self.queue.add((local_namespace, shadow["metadata"]["name"]))

    # -- reconciliation -----------------------------------------------------------------

    async def reconcile(self, key) -> float | None:
        namespace, name = key
        pod = self.local_pods.get(namespace, name)
        twin = self.twin_for(namespace)
        shadows = self.shadow_informers.get(twin)
        if shadows is not None and not shadows.synced.is_set():
            return 0.5
        shadow = shadows.get(twin, name) if shadows else None

        if pod is None:
            if shadow is not None and not shadow["metadata"].get("deletionTimestamp"):
                log.info("deleting orphaned ShadowPod", extra=fields(pod=f"{namespace}/{name}"))
                await self._delete_shadow(twin, name, grace=None)
            return None

        if pod["metadata"].get("deletionTimestamp"):
            return await self._terminate(pod, twin, shadow)

        refusal = offload_refusal(
            pod,
            self.twins.offloading(namespace),
            self.twins.node_labels,
            self.peering.node_name,
            self.peering.provider_id,
        )
        if refusal is not None:
            if not is_daemonset_pod(pod) and self.twins.has_twin(namespace):
                return None  # no longer offloaded here: the twin manager drains this pod
            if shadow is not None and not shadow["metadata"].get("deletionTimestamp"):
                await self._delete_shadow(twin, name, grace=0)  # a DaemonSet pod sent before this rule
            await self._hold(pod, *refusal)
            return None
        if shadows is None:
            self.twins.want(namespace)
            if self._held(pod):
                await self._update_local_status(pod, None)  # offloaded now: no longer waiting for that
            return None  # requeued when the twin turns Ready

        if (
            shadow is not None
            and (shadow["metadata"].get("annotations") or {}).get(ANNOTATION_LOCAL_POD_UID) != pod["metadata"]["uid"]
        ):
            # A previous pod of the same name (StatefulSet, restart of this process) left it behind.
            if not shadow["metadata"].get("deletionTimestamp"):
                await self._delete_shadow(twin, name, grace=0)
            return 1

        if shadow is None and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            token_secret, wait = self._token_secret(pod, twin)
            if wait is not None:
                return wait
            await self._create_shadow(pod, twin, token_secret)
        await self._update_local_status(pod, shadow)
        return None

    def _token_secret(self, pod: dict, twin: str) -> tuple[str | None, float | None]:
        """The Secret the remote pod reads its tokens from, once it and the consumer's CA are in the twin.

        The wait is short and one-off: without it the provider's kubelet would back off mounting for minutes.
        """
        tokens = self.reflection.tokens
        if not tokens.needed(pod):
            return None, None
        if not tokens.ready_for(pod, twin):
            tokens.pod_changed((pod["metadata"]["namespace"], pod["metadata"]["name"]))
            # The token reflector requeues the pod once the Secret is written. This delay only covers a lost
            # notification: a short one polled every waiting pod (26 reconciles per pod at 10 000 pods).
            return None, TOKEN_WAIT_RECHECK_S
        if self.reflection.reflectors["configMaps"].pending(pod["metadata"]["namespace"], ROOT_CA_CONFIGMAP):
            return None, 0.5
        return token_secret_name(pod["metadata"]["name"]), None

    async def _create_shadow(self, pod: dict, twin: str, token_secret: str | None) -> None:
        body = shadowpod_for(
            pod,
            twin_namespace=twin,
            consumer_id=self.peering.consumer_id,
            provider_id=self.peering.provider_id,
            token_secret=token_secret,
        )
        try:
            await self.peering.provider.create(ShadowPod(**body))
        except ApiError as error:
            if error.status.code == 409:
                return
            message = sanitised_message(error.status.message or str(error))
            refusal = create_refusal(error.status.code, message, self.peering.provider_id)
            if refusal is None:
                await self.peering.events.record(
                    reference({"apiVersion": "v1", "kind": "Pod", **pod}), "Warning", "RemoteCreateFailed", message
                )
            else:
                # On the pod, not only in an Event; retried with backoff, as admission or quota may change.
                reason, detail = refusal
                await self._hold(pod, reason, detail, event_reason=REMOTE_FAILURE_EVENTS.get(reason))
            raise

    def _held(self, pod: dict) -> bool:
        """Does the pod show a reason it is not offloaded, or that the provider refused its ShadowPod?"""
        return (
            any(
                c["type"] == REMOTE_CONDITION and c["status"] == "False" and c.get("reason") in HELD_REASONS
                for c in pod["status"].get("conditions") or []
            )
            or pod["status"].get("reason") in HELD_REASONS
        )

    async def _hold(self, pod: dict, reason: str, message: str, event_reason: str | None = None) -> None:
        """Keep the pod Pending with the reason; one Warning Event when the reason first appears."""
        wanted = held_pod_status(
            pod["status"],
            reason,
            message,
            now=now_iso(),
            containers=[(c["name"], c.get("image", "")) for c in pod["spec"].get("containers") or []],
        )
        if comparable_status(wanted) == comparable_status(pod["status"]):
            return
        previous = next((c for c in pod["status"].get("conditions") or [] if c["type"] == REMOTE_CONDITION), None)
        if (previous or {}).get("reason") != reason:
            log.info(
                "pod not offloaded",
                extra=fields(pod=f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", reason=reason),
            )
            await self.peering.events.record(
                reference({"apiVersion": "v1", "kind": "Pod", **pod}),
                "Warning",
                event_reason or reason,
                wanted["message"],
            )
        await patch_status(self.peering.local, Pod, pod["metadata"], status_patch(pod["status"], wanted))

    async def _terminate(self, pod: dict, twin: str, shadow: dict | None) -> float | None:
        meta = pod["metadata"]
        if shadow is not None:
            if not shadow["metadata"].get("deletionTimestamp"):
                await self._delete_shadow(twin, meta["name"], grace=meta.get("deletionGracePeriodSeconds"))
            return None  # the ShadowPod's DELETED event brings us back
        if twin in self.shadow_informers or self.twins.requests.get(self.peering.tenant_namespace, twin) is None:
            with tolerating(404):
                await self.peering.local.delete(Pod, meta["name"], namespace=meta["namespace"], grace_period=0)
                log.info("released local pod", extra=fields(pod=f"{meta['namespace']}/{meta['name']}"))
            return None
        return 1

    async def _delete_shadow(self, twin: str, name: str, grace: int | None) -> None:
        with tolerating(404):
            await self.peering.provider.delete(
                ShadowPod, name, namespace=twin, grace_period=grace, cascade=CascadeType.FOREGROUND
            )

    async def _update_local_status(self, pod: dict, shadow: dict | None) -> None:
        meta = pod["metadata"]
        shadow_status = (shadow or {}).get("status")
        refused = any(
            c["type"] == "PodCreated" and c["status"] == "False" for c in (shadow_status or {}).get("conditions") or []
        )
        if not (shadow_status or {}).get("pod") and not refused and self.node.healthy and not self._held(pod):
            return  # nothing to report yet: the remote pod has not been created or observed
        wanted = local_pod_status(
            pod["status"],
            shadow_status,
            node_ip=self.node.settings.node_ip,
            translate=self.translate,
            provider_reachable=self.node.healthy,
            now=now_iso(),
            containers=[(c["name"], c.get("image", "")) for c in pod["spec"].get("containers") or []],
        )
        if comparable_status(wanted) == comparable_status(pod["status"]):
            return
        involved = reference({"apiVersion": "v1", "kind": "Pod", **pod})
        failure = condition(wanted, REMOTE_CONDITION)
        if (
            failure is not None
            and (condition(pod["status"], REMOTE_CONDITION) or {}).get("reason") != failure["reason"]
        ):
            await self.peering.events.record(
                involved,
                "Warning",
                REMOTE_FAILURE_EVENTS.get(failure["reason"], f"Remote{failure['reason']}"),
                f"provider {self.peering.provider_id} refused the pod: {failure.get('message', '')}",
            )
        # Its message names the refused IP: a new IP, or new ranges, is worth a new Event.
        refused = condition(wanted, POD_IP_CONDITION)
        if (
            refused is not None
            and (condition(pod["status"], POD_IP_CONDITION) or {}).get("message") != refused["message"]
        ):
            await self.peering.events.record(involved, "Warning", POD_IP_REFUSED, refused["message"])
        await patch_status(self.peering.local, Pod, meta, status_patch(pod["status"], wanted))

    # -- provider pod IPs refused or untranslated --------------------------------------

    async def _translation_loop(self) -> None:
        """What the translator refuses, as conditions on the virtual node and the ForeignCluster (and Events).

        The node's own status loop keeps conditions it does not know, but may overwrite one written
        meanwhile; the node watch wakes this loop again, so the condition is put back.
        """
        reported: dict[str, dict] = {}  # on the ForeignCluster, by type
        while True:
            await self._translation_changed.wait()
            self._translation_changed.clear()
            if self.translate is None:
                continue
            wanted = translation_conditions(self.translate, self.local_ranges.unread)
            try:
                await self._node_translation_conditions(wanted)
                changed = [c for c in wanted if reported.get(c["type"]) != c]
                if changed:
                    await self._foreign_translation_conditions(changed)
                    reported.update((c["type"], c) for c in changed)
            except ApiError as error:
                log.warning("cannot report pod IP translation", extra=fields(error=str(error)[:300]))
                await asyncio.sleep(2)
                self._translation_changed.set()

    async def _node_translation_conditions(self, wanted: list[dict]) -> None:
        node = self.twins.node.get(None, self.peering.node_name)
        if node is None:
            return  # not created yet: its creation wakes this loop
        current = await self.peering.local.get(Node, self.peering.node_name)
        conditions = [c.to_dict() for c in (current.status.conditions or [])] if current.status else []
        existing = {c["type"]: c for c in conditions}
        now = now_iso()
        stale = []
        for wanted_condition in wanted:
            previous = existing.get(wanted_condition["type"]) or {}
            if all(previous.get(k) == wanted_condition[k] for k in ("status", "reason", "message")):
                continue
            same_status = previous.get("status") == wanted_condition["status"]
            since = previous.get("lastTransitionTime") if same_status else None
            stale.append({**wanted_condition, "lastTransitionTime": since or now, "lastHeartbeatTime": now})
        if stale:
            # Strategic merge: conditions merge by type, so the node's other conditions stay as they are.
            await self.peering.local.patch(
                Node.Status, self.peering.node_name, {"status": {"conditions": stale}}, patch_type=PatchType.STRATEGIC
            )

    async def _foreign_translation_conditions(self, changed: list[dict]) -> None:
        namespace, name = self.peering.foreign_cluster
        foreign = as_dict(await self.peering.local.get(ForeignCluster, name, namespace=namespace))
        status = foreign.get("status") or {}
        conditions = status.get("conditions") or []
        for wanted in changed:
            conditions = set_condition(
                conditions, wanted["type"], wanted["status"], wanted["reason"], wanted["message"]
            )
        if conditions != status.get("conditions"):
            await self.peering.local.patch(
                ForeignCluster.Status,
                name,
                {"status": {"conditions": conditions}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        for wanted in changed:
            if wanted["status"] == "True":
                await self.peering.events.record(reference(foreign), "Warning", wanted["reason"], wanted["message"])


def _placement(offloading: dict | None) -> tuple | None:
    """What of a NamespaceOffloading decides where its namespace's pods go (offload_refusal reads these)."""
    if offloading is None:
        return None
    return (bool(offloading["metadata"].get("deletionTimestamp")), offloading.get("spec"))


def translation_conditions(translate: IPTranslator, unread: list[str]) -> list[dict]:
    """The conditions saying what of the provider's pod IPs the consumer refuses or cannot translate.

    `unread`: the consumer's own ranges this virtual kubelet may not read, so the overlap check went without."""
    conditions = []
    if translate.target is not None and translate.sources:
        conditions.append(_untranslated_condition(translate.problem))
    if translate.conflict is not None:
        reason, message = translate.conflict
        conditions.append({"type": REFUSED_CONDITION, "status": "True", "reason": reason, "message": message})
    elif not translate.sources:
        message = (
            "the provider announces no pod range (its ResourceOffer's status.podCIDRs), so no pod IP it reports is"
            " shown on the consumer's pods"
        )
        conditions.append(
            {"type": REFUSED_CONDITION, "status": "True", "reason": NO_PROVIDER_RANGES, "message": message}
        )
    else:
        shown = f" as {translate.target}" if translate.target is not None else ""
        message = f"pod IPs inside the provider's pod ranges {', '.join(map(str, translate.sources))} are shown{shown}"
        if unread:
            message += f"; checked without the consumer's {', '.join(unread)}"
        conditions.append(
            {"type": REFUSED_CONDITION, "status": "False", "reason": PROVIDER_RANGES_ACCEPTED, "message": message}
        )
    if translate.ignored:
        ignored = f"; ignored announced ranges: {', '.join(translate.ignored)}"
        conditions[-1]["message"] += ignored
    return conditions


def _untranslated_condition(problem: str) -> dict:
    if problem:
        return {"type": UNTRANSLATED_CONDITION, "status": "True", "reason": "RemapRangeTooSmall", "message": problem}
    return {
        "type": UNTRANSLATED_CONDITION,
        "status": "False",
        "reason": "RemapRangeFits",
        "message": "every provider pod IP is translated into the remap range",
    }
