"""NamespaceOffloading on the consumer: namespace label, finalizer, and the aggregated phase.

Each virtual kubelet (the only holder of its provider's credential) creates or removes its twin
namespace and reports its own entry in `status.clusters`; this controller turns those entries and
the set of matching virtual nodes into `offloadingPhase`, and finishes deletion once every twin is
gone. An entry of a provider that is no longer peered (neither its ForeignCluster nor its virtual
node is left) has nobody to clear it, so this controller removes it: otherwise deletion would wait
for it forever. It also binds the virtual kubelets' reflection role (Secrets, service-account tokens) in the
offloaded namespace, and only there, for as long as the namespace is offloaded.

A namespace whose remote name belongs to another namespace (twin_claims.py) is in phase `Conflict`, with a Warning
Event `TwinNamespaceTaken` on its own NamespaceOffloading; the virtual kubelets refuse it the same way.
"""

from __future__ import annotations

import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.resources.rbac_authorization_v1 import RoleBinding
from lightkube.types import PatchType

from ..constants import (
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TYPE,
    MANAGER_COMPONENT,
    SYSTEM_NAMESPACE,
    TERMINAL_PHASES,
    TYPE_VIRTUAL_NODE,
    VK_REFLECTION_ROLE,
)
from ..kube.events import EventRecorder
from ..kube.informer import Informer, call, enqueue
from ..kube.ops import tolerating
from ..kube.resources import ForeignCluster, NamespaceOffloading
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, now_iso, reference, same_conditions, set_condition
from ..steering import ENABLED_LABEL, OFFLOADING_NAME, STRATEGY_ANNOTATION, remote_namespace_name, selector_matches
from ..tenancy import role_binding
from ..twin_claims import TWIN_TAKEN, RemoteNames, claim_refusal, twin_holder

log = logging.getLogger(__name__)

FINALIZER = "catamaran.io/namespace-offloading"
FIELD_MANAGER = MANAGER_COMPONENT


def selected_clusters(spec: dict, virtual_nodes: dict) -> list[str]:
    return sorted(
        node["cluster"]
        for node in virtual_nodes.values()
        if selector_matches(spec.get("clusterSelector"), node["labels"], node["name"])
    )


def offloading_phase(
    deleting: bool, selected: list[str], entries: dict[str, dict], refusal: str | None = None
) -> tuple[str, str]:
    """(phase, message); `refusal` says why the namespace's remote name is another namespace's."""
    if deleting:
        return "Terminating", f"removing twin namespaces from {sorted(entries) or 'no cluster'}"
    if refusal:
        return "Conflict", refusal
    if not selected:
        return "NoClusterSelected", "no peered cluster matches the clusterSelector"
    phases = {cluster: (entries.get(cluster) or {}).get("phase", "Pending") for cluster in selected}
    failed = sorted(c for c, p in phases.items() if p == "Failed")
    if len(failed) == len(selected):
        return "AllFailed", "; ".join(f"{c}: {(entries[c] or {}).get('message', '')}" for c in failed)
    if failed:
        return "SomeFailed", "; ".join(f"{c}: {(entries[c] or {}).get('message', '')}" for c in failed)
    if all(p == "Ready" for p in phases.values()):
        return "Ready", f"twin namespaces ready on {', '.join(selected)}"
    return "InProgress", f"waiting for {', '.join(c for c, p in phases.items() if p != 'Ready')}"


def unpeered_entries(entries: list[dict], peered: set[str]) -> list[int]:
    """Indexes of `status.clusters` entries whose cluster is no longer peered."""
    return [index for index, entry in enumerate(entries) if entry.get("clusterID") not in peered]


def removal_patch(entries: list[dict], indexes: list[int]) -> list[dict]:
    """A JSON patch removing those entries, each guarded by a test of its clusterID (a concurrent change fails
    the patch instead of removing the wrong entry); highest index first so the others keep their place."""
    patch = []
    for index in sorted(indexes, reverse=True):
        path = f"/status/clusters/{index}"
        patch.append({"op": "test", "path": f"{path}/clusterID", "value": entries[index]["clusterID"]})
        patch.append({"op": "remove", "path": path})
    return patch


def summarize_virtual_node(node) -> dict:
    labels = node.metadata.labels or {}
    return {"name": node.metadata.name, "labels": labels, "cluster": labels.get(LABEL_REMOTE_CLUSTER_ID, "")}


def reflection_binding(namespace: str, controller_namespace: str) -> dict:
    """The virtual kubelets (every service account of the controller's namespace) may read this namespace's
    Secrets and request its service-account tokens, which reflection needs, and nowhere else."""
    group = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Group",
        "name": f"system:serviceaccounts:{controller_namespace}",
    }
    return role_binding(namespace, VK_REFLECTION_ROLE, group)


class NamespaceOffloadingController:
    name = "namespaceoffloadings"

    def __init__(
        self, client: AsyncClient, cluster_id: str, events: EventRecorder, controller_namespace: str = SYSTEM_NAMESPACE
    ):
        self.controller_namespace = controller_namespace  # its service accounts are the virtual kubelets'
        self.client = client
        self.cluster_id = cluster_id
        self.events = events
        self.offloadings = Informer(client, NamespaceOffloading, name="namespaceoffloadings", transform=as_dict)
        self.virtual_nodes = Informer(
            client, Node, name="virtual-nodes", labels={LABEL_TYPE: TYPE_VIRTUAL_NODE}, transform=summarize_virtual_node
        )
        # Only the cluster id of each ForeignCluster: an entry of a cluster with neither is stale.
        self.foreign_clusters = Informer(
            client,
            ForeignCluster,
            name="foreignclusters",
            transform=lambda foreign: (as_dict(foreign).get("spec") or {}).get("clusterID"),
        )
        self.queue = WorkQueue(self.name, self.reconcile, workers=4)
        self.offloadings.on_change(enqueue(self.queue))
        self.remote_names = RemoteNames(cluster_id)  # who claims each remote name
        self.offloadings.on_change(self._requeue_claimants)
        self.virtual_nodes.on_change(call(self._requeue_all))
        self.foreign_clusters.on_change(call(self._requeue_all))

    def _requeue_claimants(self, event, key, new, old) -> None:
        """A claim came, went or began its deletion: the other claimants of its remote name may be decided anew."""
        remotes = self.remote_names.changed(key[0], new)
        if event == "MODIFIED" and bool(new["metadata"].get("deletionTimestamp")) == bool(
            old["metadata"].get("deletionTimestamp")
        ):
            return
        for remote in remotes:
            for namespace in self.remote_names.namespaces(remote) - {key[0]}:
                self.queue.add((namespace, OFFLOADING_NAME))

    def twin_refusal(self, namespace: str, spec: dict | None = None) -> str | None:
        """Why this namespace may not have its remote name (another namespace's offloading came first), or None.
        `spec`: a policy's, for a namespace whose NamespaceOffloading it has not made yet (the youngest claim).

        This cluster sees no TwinNamespace: the older claim decides here, the holder on each provider's side
        (the virtual kubelets report that)."""
        offloading = self.offloadings.get(namespace, OFFLOADING_NAME)
        if (offloading is None and spec is None) or (offloading or {}).get("metadata", {}).get("deletionTimestamp"):
            return None  # no claim, or one being let go
        if offloading is None:
            offloading = {"metadata": {"name": OFFLOADING_NAME, "creationTimestamp": now_iso()}, "spec": spec}
        remote = remote_namespace_name(namespace, offloading["spec"], self.cluster_id)
        claims = [
            (other, found)
            for other in self.remote_names.namespaces(remote) - {namespace}
            if (found := self.offloadings.get(other, OFFLOADING_NAME)) is not None
        ]
        claims.append((namespace, offloading))
        return claim_refusal(namespace, remote, twin_holder(remote, None, claims, self.cluster_id))

    def _requeue_all(self) -> None:
        for key in list(self.offloadings.cache):
            self.queue.add(key)

    def tasks(self):
        return [self.offloadings.run(), self.virtual_nodes.run(), self.foreign_clusters.run(), self._run()]

    def peered_clusters(self) -> set[str]:
        return {node["cluster"] for node in self.virtual_nodes.cache.values()} | {
            cluster for cluster in self.foreign_clusters.cache.values() if cluster
        }

    async def _run(self):
        await self.offloadings.synced.wait()
        await self.virtual_nodes.synced.wait()
        await self.foreign_clusters.synced.wait()
        await self.queue.run()

    async def reconcile(self, key) -> float | None:
        namespace, name = key
        offloading = self.offloadings.get(namespace, name)
        if offloading is None:
            return None
        meta = offloading["metadata"]
        status = offloading.get("status") or {}
        deleting = bool(meta.get("deletionTimestamp"))
        stale = unpeered_entries(status.get("clusters") or [], self.peered_clusters())
        if stale:
            await self._forget_unpeered(offloading, stale)
            return None  # the status change comes back through the informer and requeues
        entries = {entry["clusterID"]: entry for entry in status.get("clusters") or []}
        if deleting and not entries:
            with tolerating(404):
                await self.client.delete(RoleBinding, VK_REFLECTION_ROLE, namespace=namespace)
            await self._set_namespace_label(namespace, None)
            await self._remove_finalizer(offloading)
            return None
        if not deleting:
            if FINALIZER not in (meta.get("finalizers") or []):
                await self.client.patch(
                    NamespaceOffloading,
                    name,
                    {"metadata": {"finalizers": [*(meta.get("finalizers") or []), FINALIZER]}},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                )
            await self._set_namespace_label(namespace, "true")
            await self._bind_reflection(namespace)
            if status.get("observedGeneration") is None:
                await self._report_preexisting_pods(offloading)
                status = offloading.get("status") or {}
        selected = selected_clusters(offloading["spec"], self.virtual_nodes.cache)
        phase, message = offloading_phase(deleting, selected, entries, self.twin_refusal(namespace))
        reason = TWIN_TAKEN if phase == "Conflict" else phase
        conditions = set_condition(
            status.get("conditions") or [], "Ready", "True" if phase == "Ready" else "False", reason, message
        )
        wanted = {
            "offloadingPhase": phase,
            "remoteNamespaceName": remote_namespace_name(namespace, offloading["spec"], self.cluster_id),
            "observedGeneration": meta.get("generation"),
        }
        if any(status.get(k) != v for k, v in wanted.items()) or not same_conditions(
            status.get("conditions"), conditions
        ):
            await self.client.patch(
                NamespaceOffloading.Status,
                name,
                {"status": {**wanted, "conditions": conditions}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
            if status.get("offloadingPhase") != phase:
                kind = "Warning" if phase in ("SomeFailed", "AllFailed", "Conflict") else "Normal"
                await self.events.record(reference(offloading), kind, reason, message)
        return None

    async def _forget_unpeered(self, offloading: dict, indexes: list[int]) -> None:
        meta = offloading["metadata"]
        entries = offloading["status"]["clusters"]
        clusters = sorted(entries[i]["clusterID"] for i in indexes)
        try:
            await self.client.patch(
                NamespaceOffloading.Status,
                meta["name"],
                removal_patch(entries, indexes),
                namespace=meta["namespace"],
                patch_type=PatchType.JSON,
            )
        except ApiError as error:
            if error.status.code in (404, 422):  # gone, or the entries moved meanwhile: the informer brings news
                return
            raise
        message = f"removed the status of {', '.join(clusters)}: no longer peered"
        log.info("unpeered clusters forgotten", extra=fields(namespace=meta["namespace"], clusters=clusters))
        await self.events.record(reference(offloading), "Normal", "ClusterUnpeered", message)

    async def _bind_reflection(self, namespace: str) -> None:
        body = reflection_binding(namespace, self.controller_namespace)
        await self.client.apply(RoleBinding.from_dict(body), field_manager=FIELD_MANAGER, force=True)

    async def _set_namespace_label(self, namespace: str, value: str | None) -> None:
        with tolerating(404):
            await self.client.patch(
                Namespace, namespace, {"metadata": {"labels": {ENABLED_LABEL: value}}}, patch_type=PatchType.MERGE
            )

    async def _remove_finalizer(self, offloading: dict) -> None:
        meta = offloading["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        with tolerating(404):
            await self.client.patch(
                NamespaceOffloading,
                meta["name"],
                {"metadata": {"finalizers": finalizers or None}},
                namespace=meta["namespace"],
                patch_type=PatchType.MERGE,
            )
        log.info("namespace offloading removed", extra=fields(namespace=meta["namespace"]))

    async def _report_preexisting_pods(self, offloading: dict) -> None:
        """Pods created before offloading keep their placement; say so, and how to apply the strategy."""
        namespace = offloading["metadata"]["namespace"]
        names = [
            pod.metadata.name
            async for pod in self.client.list(Pod, namespace=namespace)
            if STRATEGY_ANNOTATION not in (pod.metadata.annotations or {})
            and (pod.status is None or pod.status.phase not in TERMINAL_PHASES)
        ]
        if not names:
            return
        message = (
            f"{len(names)} pod(s) existed before offloading and keep their placement ({', '.join(names[:5])}"
            f"{', ...' if len(names) > 5 else ''}); recreate them, e.g. kubectl -n {namespace} rollout restart "
            "deployment, to apply the offloading strategy"
        )
        await self.events.record(reference(offloading), "Warning", "PreexistingPods", message)
        conditions = set_condition(
            (offloading.get("status") or {}).get("conditions") or [], "PreexistingPods", "True", "NotSteered", message
        )
        await self.client.patch(
            NamespaceOffloading.Status,
            offloading["metadata"]["name"],
            {"status": {"conditions": conditions}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
        offloading.setdefault("status", {})["conditions"] = conditions
