"""Pods bound to the peering's virtual nodes become ShadowPods in the provider's twin namespaces.

Local pods are watched with a server-side field selector on each node's name (vk/virtual_nodes.py); a pod bound to a
node pool's node makes a ShadowPod labelled with the pool, which the provider places and holds to its quota. Each twin
namespace gets one ShadowPod watch and one watch of the Pods the provider made of them, whose status the local pods
show (the tenant credential may only list inside its own namespaces). The remote names
equal the local ones, so a restarted process rebuilds its state from the two clusters and neither duplicates nor loses
a pod. A namespace's pods go only to its own twin (`TwinManager.twin_of`),
and a ShadowPod is judged against the pods of its twin's origin namespace, whatever it says of itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from ..constants import (
    ANNOTATION_DELETION_GRACE,
    ANNOTATION_LOCAL_NAMESPACE,
    ANNOTATION_LOCAL_POD_UID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_CATAMARAN,
    ROOT_CA_CONFIGMAP,
    TERMINAL_PHASES,
)
from ..kube.echoes import OwnWrites
from ..kube.informer import Informer, InformerUnion, NamespacedInformers
from ..kube.ops import tolerating
from ..kube.resources import ShadowPod
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import (
    as_dict,
    changeable_pod_fields,
    container_resources,
    deletion_grace,
    material_status,
    recreations_stamp,
    reference,
)
from ..steering import is_daemonset_pod
from ..twin_claims import TWIN_TAKEN
from .context import PeeringContext
from .forge import (
    changed_template,
    missing_ephemeral_containers,
    offload_refusal,
    resized_containers,
    shadowpod_for,
)
from .namespaces import TwinManager
from .pod_status import REMOTE_FAILURE_EVENTS, PodStatus
from .reflection.reflector import Reflector
from .reflection.tokens import TokenReflector, account_secret_name, pod_account
from .status_back import NOTHING_SHOWN, seen_status
from .trust import sanitised_message

log = logging.getLogger(__name__)

# A pod waiting for its token Secret is looked at again after this long even if no one says it is written.
TOKEN_WAIT_RECHECK_S = 30.0
# Pod workers: each reconcile mostly waits on one round trip (the ShadowPod's POST, the local status PATCH). More
# only move the wait from this queue into the API servers' when they are busy (bench/results/vk-workers.txt).
WORKERS = 16


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
                "generation",
                "labels",
                "annotations",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "ownerReferences",
                "finalizers",
                "resourceVersion",
            )
        },
        "spec": data["spec"],
        "status": data.get("status") or {},
    }


def compact_shadow(shadow) -> dict:
    """A ShadowPod without its pod spec, which the virtual kubelet never reads back but for the names of its
    ephemeral containers, what a running pod may still change and its containers' resources (resized in place)."""
    meta = shadow["metadata"]
    pod_spec = ((shadow.get("spec") or {}).get("pod") or {}).get("spec") or {}
    return {
        "ephemeralContainers": [c.get("name") for c in pod_spec.get("ephemeralContainers") or []],
        "changeable": changeable_pod_fields((shadow.get("spec") or {}).get("pod") or {}),
        "resources": container_resources(pod_spec),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "annotations": meta.get("annotations") or {},
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "resourceVersion": meta.get("resourceVersion"),  # which events are its own creations' (kube/echoes.py)
        },
        "status": shadow.get("status") or {},
    }


def shadow_informer(peering: PeeringContext, twin: str) -> Informer:
    """The ShadowPods of one twin namespace, each kept compact (the tenant may list only inside its namespaces)."""
    return Informer(
        peering.provider,
        ShadowPod,
        name="shadowpods",
        namespace=twin,
        transform=compact_shadow,
        packed=True,
        plain=True,
    )


def compact_remote_pod(pod: dict) -> dict:
    """What the virtual kubelet reads of a remote Pod (plain, see remote_pod_informer): its ShadowPod (the controller
    owner's uid), the recreations the manager stamped on it, and its status."""
    meta = pod["metadata"]
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "owner": next((o.get("uid") for o in meta.get("ownerReferences") or [] if o.get("controller")), None),
        "recreations": recreations_stamp(meta.get("annotations")),
        "status": pod.get("status") or {},
    }


def remote_pod_informer(peering: PeeringContext, twin: str) -> Informer:
    """The Pods the provider's manager made of this consumer's ShadowPods in one twin namespace, each kept compact."""
    return Informer(
        peering.provider,
        Pod,
        name="remote-pods",
        namespace=twin,
        labels={LABEL_ORIGIN_CLUSTER_ID: peering.consumer_id, LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
        transform=compact_remote_pod,
        packed=True,
        plain=True,
    )


def shown_of(remote_pod: dict | None) -> tuple | None:
    """What of a remote Pod its local pod may show: a change of anything else is no reason to look at it."""
    if remote_pod is None:
        return None
    return remote_pod.get("owner"), remote_pod.get("recreations"), material_status(remote_pod.get("status") or {})


class PodController:
    """Local pods to ShadowPods and back. It receives its collaborators; vk/assembly.py builds them and wires the
    listeners below (local_changed, offloading_changed, twin_ready, shadow_changed, remote_pod_changed,
    health_changed) to them."""

    name = "pods"

    def __init__(
        self,
        peering: PeeringContext,
        *,
        local_pods: InformerUnion,
        twins: TwinManager,
        shadows: NamespacedInformers,
        remote_pods: NamespacedInformers,
        status: PodStatus,
        tokens: TokenReflector,
        config_maps: Reflector,
        node_labels: Callable[[str], dict],
        pool_of: Callable[[str], str | None],
        home_api_server: tuple[str, int] | None = None,
        workers: int = WORKERS,
    ):
        self.peering = peering
        self.local_pods = local_pods  # the pods bound to each virtual node of the peering (vk/virtual_nodes.py)
        self.node_labels = node_labels  # a virtual node's labels, which the namespace's clusterSelector must match
        self.pool_of = pool_of  # the node pool a virtual node stands for (None: the peering's one node)
        self.twins = twins
        self.shadow_informers = shadows  # one per twin, watched once the twin is Ready (twin_ready)
        self.remote_pod_informers = remote_pods  # the same, of the Pods made of the ShadowPods
        self.status = status
        self.tokens = tokens  # pods wait for their token Secret before their ShadowPod
        self.config_maps = config_maps  # ... and for the consumer's root CA reflected into the twin
        self.home_api_server = home_api_server
        self.queue = WorkQueue(self.name, self.reconcile, workers=workers)
        self.created_shadows = OwnWrites()  # by the local pod's key

    def local_changed(self, event, key, new, old) -> None:
        if self.status.writes.echo(event, key, new):
            return  # the status this controller wrote, as it wrote it (kube/echoes.py)
        self.queue.add(key)
        if event == "ADDED":
            self.twins.want(key[0])

    def offloading_changed(self, event, key, new, old) -> None:
        """A namespace's offloading appearing, changing or going changes what its waiting pods say. Its status,
        which every virtual node of the namespace writes, does not: requeuing every pod on each of those
        writes made 35 reconciles per pod with 5 providers."""
        if _placement(new) != _placement(old):
            self.requeue_namespace(key[0])

    def health_changed(self, healthy: bool) -> None:
        self.requeue_all()

    def twin_for(self, local_namespace: str) -> str | None:
        """The namespace's own twin, None when it has none here (or its remote name is another namespace's)."""
        return self.twins.twin_of(local_namespace)

    def tasks(self):
        return [self._run()]

    async def _run(self):
        await self.local_pods.synced.wait()
        for informer in (self.twins.requests, self.twins.offloadings, self.twins.nodes):
            await informer.synced.wait()
        await self.queue.run()

    def requeue_all(self) -> None:
        for key in list(self.local_pods.cache):
            self.queue.add(key)

    def requeue_namespace(self, namespace: str) -> None:
        for key in self.local_pods.keys_in(namespace):
            self.queue.add(key)

    def twin_ready(self, origin: str, twin: str) -> None:
        self.shadow_informers.watch(twin)
        self.remote_pod_informers.watch(twin)
        self.requeue_namespace(origin)

    def remote_pod_changed(self, event, key, new, old) -> None:
        """A remote Pod's status changed in what its local pod shows (a pod just made shows nothing yet). Only the
        pods of ShadowPods a virtual kubelet made are this controller's (_local_key): a pod of one the tenant wrote
        itself has no local pod, and its ShadowPod is no orphan to remove."""
        if event == "ADDED" and material_status(new.get("status") or {}) == NOTHING_SHOWN:
            return
        if event == "MODIFIED" and shown_of(new) == shown_of(old):
            return
        shadows = self.shadow_informers.get(key[0])
        shadow = shadows.get(*key) if shadows else None
        if shadow is not None and (local_key := self._local_key(key[0], shadow)) is not None:
            self.queue.add(local_key)

    def _local_key(self, twin: str, shadow: dict) -> tuple[str, str] | None:
        """The local pod of a ShadowPod in `twin`; None for one the tenant wrote itself.

        Only ShadowPods a virtual kubelet made (they name their pod's namespace) are this controller's: one the tenant
        wrote itself is left to the provider's terms. Judged in its twin's origin, not in the namespace it names: one
        naming another namespace is an orphan there, and removed as one."""
        named = (shadow["metadata"].get("annotations") or {}).get(ANNOTATION_LOCAL_NAMESPACE)
        return (self.twins.twin_origin(twin) or named, shadow["metadata"]["name"]) if named else None

    def shadow_changed(self, event, key, new, old) -> None:
        local_key = self._local_key(key[0], new or old)
        if local_key is None:
            return
        if self.created_shadows.echo(event, local_key, new):
            return  # the ShadowPod this controller created, as it created it (kube/echoes.py)
        self.queue.add(local_key)

    # -- reconciliation -----------------------------------------------------------------

    async def reconcile(self, key) -> float | None:
        namespace, name = key
        self.status.writes.forget(key)
        self.created_shadows.forget(key)
        pod = self.local_pods.get(namespace, name)
        twin = self.twin_for(namespace)
        shadows = self.shadow_informers.get(twin) if twin else None
        if shadows is not None and not shadows.synced.is_set():
            return 0.5
        shadow = shadows.get(twin, name) if shadows else None
        if shadow is not None:
            # Until its watch has listed, a Pod's status is as the ShadowPod says (nothing, from this release's
            # manager): its listing then brings every pod back here.
            remote_pods = self.remote_pod_informers.get(twin) if twin else None
            remote_pod = remote_pods.get(twin, name) if remote_pods else None
            status = seen_status(shadow.get("status"), remote_pod, shadow["metadata"]["uid"])
            shadow = {**shadow, "status": status or {}}

        if pod is None:
            if twin and shadow is not None and not shadow["metadata"].get("deletionTimestamp"):
                log.info("deleting orphaned ShadowPod", extra=fields(pod=f"{namespace}/{name}"))
                await self._delete_shadow(twin, name, grace=None)
            return None

        if pod["metadata"].get("deletionTimestamp"):
            return await self._terminate(pod, twin, shadow)

        node = pod["spec"].get("nodeName") or self.peering.node_name
        refusal = offload_refusal(
            pod, self.twins.offloading(namespace), self.node_labels(node), node, self.peering.provider_id
        )
        if refusal is not None:
            if not is_daemonset_pod(pod) and self.twins.has_twin(namespace):
                return None  # no longer offloaded here: the twin manager drains this pod
            if twin and shadow is not None and not shadow["metadata"].get("deletionTimestamp"):
                await self._delete_shadow(twin, name, grace=0)  # a DaemonSet pod sent before this rule
            await self.status.hold(pod, *refusal)
            return None
        if (taken := self.twins.claim_refusal(namespace)) is not None:
            await self.status.hold(pod, TWIN_TAKEN, f"{taken}; this pod stays Pending on {node}")
            return None
        if twin is None or shadows is None:
            self.twins.want(namespace)
            if self.status.held(pod):
                await self.status.update(pod, None)  # offloaded now: no longer waiting for that
            return None  # requeued when the twin turns Ready

        if (
            shadow is not None
            and (shadow["metadata"].get("annotations") or {}).get(ANNOTATION_LOCAL_POD_UID) != pod["metadata"]["uid"]
        ):
            # A previous pod of the same name (StatefulSet, restart of this process) left it behind.
            if not shadow["metadata"].get("deletionTimestamp"):
                await self._delete_shadow(twin, name, grace=0)
            return 1

        if shadow is None and pod["status"].get("phase") not in TERMINAL_PHASES:
            token_secret, wait = self._token_secret(pod, twin)
            if wait is not None:
                return wait
            await self._create_shadow(pod, twin, token_secret, self.pool_of(node))
        elif shadow is not None and (added := missing_ephemeral_containers(pod, shadow)) is not None:
            await self._add_ephemeral_containers(pod, twin, added)
        if shadow is not None and (
            changes := changed_template(pod, shadow, self.peering.consumer_id, self.peering.provider_id)
        ):
            await self.peering.provider.patch(ShadowPod, name, changes, namespace=twin, patch_type=PatchType.MERGE)
        if shadow is not None and (resize := resized_containers(pod, shadow)):
            await self._resize(pod, twin, resize)
        await self.status.update(pod, shadow)
        return None

    async def _add_ephemeral_containers(self, pod: dict, twin: str, containers: list[dict]) -> None:
        """Send `kubectl debug`'s containers to the provider, which adds them to the remote pod."""
        body = {"spec": {"pod": {"spec": {"ephemeralContainers": containers}}}}
        name = pod["metadata"]["name"]
        try:
            await self.peering.provider.patch(ShadowPod, name, body, namespace=twin, patch_type=PatchType.MERGE)
        except ApiError as error:
            message = sanitised_message(error.status.message or str(error))
            await self.peering.events.record(
                reference({"apiVersion": "v1", "kind": "Pod", **pod}), "Warning", "EphemeralContainersFailed", message
            )
            raise

    async def _resize(self, pod: dict, twin: str, operations: list[dict]) -> None:
        """Send a resize of the local pod to its ShadowPod; the provider's manager holds it to the tenant's quota."""
        name = pod["metadata"]["name"]
        try:
            await self.peering.provider.patch(ShadowPod, name, operations, namespace=twin, patch_type=PatchType.JSON)
        except ApiError as error:
            if error.status.code in (404, 409):
                return  # the ShadowPod changed meanwhile (its watch requeues the pod) or is gone
            if error.status.code >= 500 or error.status.code == 429:
                raise
            message = sanitised_message(error.status.message or str(error))
            await self.peering.events.record(
                reference({"apiVersion": "v1", "kind": "Pod", **pod}), "Warning", "ResizeNotSent", message
            )

    def _token_secret(self, pod: dict, twin: str) -> tuple[str | None, float | None]:
        """The Secret the remote pod reads its tokens from, once it and the consumer's CA are in the twin.

        The wait is short and one-off: without it the provider's kubelet would back off mounting for minutes.
        """
        tokens = self.tokens
        if not tokens.needed(pod):
            return None, None
        if not tokens.ready_for(pod):
            # The token reflector requeues the pod once the Secret is written. This delay only covers a lost
            # notification: a short one polled every waiting pod (26 reconciles per pod at 10 000 pods).
            return None, TOKEN_WAIT_RECHECK_S
        if self.config_maps.pending(pod["metadata"]["namespace"], ROOT_CA_CONFIGMAP):
            return None, 0.5
        return account_secret_name(pod_account(pod)), None

    async def _create_shadow(self, pod: dict, twin: str, token_secret: str | None, pool: str | None) -> None:
        body = shadowpod_for(
            pod,
            twin_namespace=twin,
            consumer_id=self.peering.consumer_id,
            provider_id=self.peering.provider_id,
            token_secret=token_secret,
            home_api_server=self.home_api_server,
            pool=pool,
        )
        try:
            created = await self.peering.provider.create(ShadowPod(**body))
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
                await self.status.hold(pod, reason, detail, event_reason=REMOTE_FAILURE_EVENTS.get(reason))
            raise
        # Its ADDED event would find no status to show yet: the provider's status brings the pod back.
        self.created_shadows.wrote((pod["metadata"]["namespace"], pod["metadata"]["name"]), created)

    async def _terminate(self, pod: dict, twin: str | None, shadow: dict | None) -> float | None:
        meta = pod["metadata"]
        if twin and shadow is not None:
            grace = meta.get("deletionGracePeriodSeconds")
            own = pod["spec"].get("terminationGracePeriodSeconds", 30)
            if grace is not None and grace != own and deletion_grace(shadow["metadata"].get("annotations")) != grace:
                # Not the pod's own grace period (deleted with another, or cut short by a second delete): the
                # provider's manager deletes the remote pod with it.
                annotation = {"metadata": {"annotations": {ANNOTATION_DELETION_GRACE: str(grace)}}}
                with tolerating(404):
                    await self.peering.provider.patch(
                        ShadowPod, meta["name"], annotation, namespace=twin, patch_type=PatchType.MERGE
                    )
            if not shadow["metadata"].get("deletionTimestamp"):
                await self._delete_shadow(twin, meta["name"], grace=grace)
            await self.status.update(pod, shadow)  # the remote pod's way down: readiness lost, containers ending
            return None  # the ShadowPod's DELETED event brings us back
        if twin is None or twin in self.shadow_informers:  # no twin of its own, or one whose ShadowPods are known
            if meta.get("finalizers"):
                await self.status.terminated(pod)  # it outlives its containers: show that they ended
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


def _placement(offloading: dict | None) -> tuple | None:
    """What of a NamespaceOffloading decides where its namespace's pods go (offload_refusal reads these)."""
    if offloading is None:
        return None
    return (bool(offloading["metadata"].get("deletionTimestamp")), offloading.get("spec"))
