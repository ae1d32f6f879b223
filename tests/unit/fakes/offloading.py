"""The two hearts of offloading built as production builds them, on fake clusters (fakes/kube.py).

`Consumer`: one virtual kubelet's PodController (vk/pods.py) and its collaborators, built by the composition root's
OffloadingParts (vk/assembly.py) as in production, between a consumer and a provider FakeCluster. `Provider`: the
manager's ShadowPodController (provider/shadowpods.py) as provider/manager.py builds it, with its
ResourceOfferController and TwinNamespaceController. Both start the informers their reconciler reads, which list and
watch the fakes as in production (FakeListWatch stands in for LightkubeListWatch, see `informers_use_fakes`); their
work queues do not run: a test calls `reconcile(name)` as a worker would, then reads what it left in the clusters.
Every object here is in the one offloaded namespace `shop` of consumer `c1`, twin `shop-c1` on provider `p1`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace, Node, Pod, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from catamaran.constants import (
    ANNOTATION_DELETION_GRACE,
    ANNOTATION_LOCAL_NAMESPACE,
    ANNOTATION_ORIGIN_NAMESPACE,
    ANNOTATION_RECREATIONS,
    ANNOTATION_STATUS_SOURCE,
    ANNOTATION_TWIN_OF,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TENANT,
    LABEL_TYPE,
    MANAGED_BY_CATAMARAN,
    MANAGER_COMPONENT,
    RESOURCE_OFFER_NAME,
    TYPE_VIRTUAL_NODE,
    default_twin_namespace,
    tenant_namespace,
    virtual_node_name,
)
from catamaran.kube import informer
from catamaran.kube.events import EventRecorder
from catamaran.kube.resources import NamespaceOffloading, ResourceOffer, ShadowPod, TwinNamespace
from catamaran.provider.offers import ResourceOfferController, TenantTerms
from catamaran.provider.shadowpods import ShadowPodController, pod_from_shadow
from catamaran.provider.twins import TwinNamespaceController, pod_security_labels
from catamaran.steering import OFFLOADING_NAME
from catamaran.vk.assembly import OffloadingParts
from catamaran.vk.context import PeeringContext
from catamaran.vk.forge import shadowpod_for
from catamaran.vk.node import HealthSettings, NodeSettings
from catamaran.vk.pools import PeeringNode
from catamaran.vk.reflection.policy import settings_from_spec
from catamaran.vk.virtual_nodes import VirtualNodes

from .kube import FOREGROUND, FakeCluster, FakeListWatch, settle

CONSUMER, PROVIDER = "c1", "p1"
NAMESPACE = "shop"
TWIN = default_twin_namespace(NAMESPACE, CONSUMER)
TENANT = tenant_namespace(CONSUMER)
NODE = virtual_node_name(PROVIDER)
NODE_IP = "10.0.0.1"
IMAGE = "nginx:1.27"
# The consumer's own: a node's pod range and address, the service range's `kubernetes` Service, the API server.
CONSUMER_POD_RANGE = "10.244.0.0/24"
CONSUMER_NODE_ADDRESS = "172.18.0.2"
KUBERNETES_SERVICE_IP = "10.96.0.1"
# The provider's: its worker's pod range (announced to the consumer) and what the worker can hold.
PROVIDER_POD_RANGE = "10.245.0.0/24"
WORKER_ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"}
# What Pod Security's restricted level (a twin's by default) asks of a pod and of each of its containers.
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@contextlib.contextmanager
def informers_use_fakes() -> Iterator[None]:
    """Every Informer built meanwhile lists and watches a FakeCluster through its FakeClient."""
    original = informer.LightkubeListWatch
    informer.LightkubeListWatch = FakeListWatch
    try:
        yield
    finally:
        informer.LightkubeListWatch = original


def run(scenario) -> Any:
    """Run one async scenario on a fresh loop, its informers (and the watch fakes) gone afterwards."""
    with informers_use_fakes():
        return asyncio.run(scenario())


async def outcome(call) -> Any:
    """What an awaited reconcile returned, or the ApiError it raised (the work queue retries it with backoff)."""
    try:
        return await call
    except ApiError as error:
        return error


def _start(informers, coroutines=()) -> list[asyncio.Task]:
    loop = asyncio.get_running_loop()
    return [loop.create_task(i.run()) for i in informers] + [loop.create_task(c) for c in coroutines]


# -- objects ----------------------------------------------------------------------------------------------------------


def local_pod(
    name: str = "web",
    *,
    uid: str | None = None,
    phase: str = "Pending",
    labels: dict | None = None,
    owner_kind: str | None = None,
    finalizers: list | None = None,
    status: dict | None = None,
    **spec,
) -> dict:
    """A consumer pod the scheduler bound to the virtual node (`spec`: more of its spec)."""
    meta: dict = {"name": name, "namespace": NAMESPACE, "uid": uid or f"local-uid-{name}", "labels": labels or {}}
    if owner_kind:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner_kind, "name": "owner", "uid": "owner-uid", "controller": True}
        ]
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "metadata": meta,
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "app", "image": IMAGE, "securityContext": RESTRICTED_CONTAINER}],
            "securityContext": RESTRICTED_POD,
            "terminationGracePeriodSeconds": 30,
            **spec,
        },
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}], "phase": phase, **(status or {})},
    }


def shadow_of(pod: dict, *, uid: str | None = None, local_uid: str | None = None, status: dict | None = None) -> dict:
    """The ShadowPod the virtual kubelet makes of `pod` (vk/forge.py), as it would have been written earlier."""
    shadow = shadowpod_for(pod, twin_namespace=TWIN, consumer_id=CONSUMER, provider_id=PROVIDER)
    if local_uid is not None:
        shadow["metadata"]["annotations"]["catamaran.io/local-pod-uid"] = local_uid
    if uid is not None:
        shadow["metadata"]["uid"] = uid
    if status is not None:
        shadow["status"] = status
    return shadow


def provider_shadow(
    name: str = "web",
    *,
    uid: str | None = None,
    status: dict | None = None,
    deleting: bool = False,
    grace: int | None = None,
    local_namespace: str | None = None,
    labels: dict | None = None,
    ephemeral_containers: list | None = None,
    copies_status: bool = False,
    **spec,
) -> dict:
    """A ShadowPod in the twin as the provider sees it: made of a local pod with `spec` (its uid `shadow-uid-<name>`),
    `deleting` in the foreground (with the local pod's grace period as an annotation, if `grace`); with
    `ephemeral_containers` as the virtual kubelet adds them after `kubectl debug`; `copies_status`: made by an earlier
    virtual kubelet, which reads the Pod's status from the ShadowPod's (no ANNOTATION_STATUS_SOURCE)."""
    shadow = shadow_of(local_pod(name, labels=labels, **spec), uid=uid or f"shadow-uid-{name}", status=status)
    if copies_status:
        del shadow["metadata"]["annotations"][ANNOTATION_STATUS_SOURCE]
    if ephemeral_containers is not None:
        shadow["spec"]["pod"]["spec"]["ephemeralContainers"] = ephemeral_containers
    meta = shadow["metadata"]
    if local_namespace is not None:
        meta["annotations"][ANNOTATION_LOCAL_NAMESPACE] = local_namespace
    if grace is not None:
        meta["annotations"][ANNOTATION_DELETION_GRACE] = str(grace)
    if deleting:
        meta.update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=0, finalizers=[FOREGROUND])
    return shadow


def made_pod(
    shadow: dict,
    *,
    uid: str | None = None,
    status: dict | None = None,
    deleting: bool = False,
    recreations: int | None = None,
) -> dict:
    """The Pod the provider's manager made of `shadow` (provider/shadowpods.py), scheduled, with `status`
    (default: running), `deleting` with its 30 s grace period, stamped with its `recreations`."""
    pod = pod_from_shadow(shadow, consumer=CONSUMER, terms=TenantTerms())
    if recreations is not None:
        pod["metadata"]["annotations"] = {**pod["metadata"]["annotations"], ANNOTATION_RECREATIONS: str(recreations)}
    pod["metadata"]["uid"] = uid or f"remote-uid-{shadow['metadata']['name']}"
    pod["spec"]["nodeName"] = "provider-worker"
    pod["status"] = status or remote_running()
    if deleting:
        pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    return pod


def remote_running(ip: str = "10.245.0.7", *, ready: bool = True, restarts: int = 0) -> dict:
    """A provider pod's status as its kubelet writes it: running, its one container started."""
    flag = "True" if ready else "False"
    return {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": "192.168.50.3",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            {"type": "Ready", "status": flag},
        ],
        "containerStatuses": [
            {
                "name": "app",
                "ready": ready,
                "started": True,
                "restartCount": restarts,
                "image": IMAGE,
                "imageID": f"docker.io/library/{IMAGE}@sha256:0",
                "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}},
            }
        ],
    }


def shadow_status(pod_status: dict, *, pod_uid: str = "remote-uid-web", recreations: int | None = None) -> dict:
    """A ShadowPod's status as the provider's manager writes it for a pod it runs."""
    status = {
        "phase": pod_status.get("phase", "Pending"),
        "podUID": pod_uid,
        "pod": pod_status,
        "conditions": [
            {
                "type": "PodCreated",
                "status": "True",
                "reason": "Created",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    if recreations is not None:
        status["recreations"] = recreations
    return status


# -- the consumer's side ----------------------------------------------------------------------------------------------


class KubeletPort:
    """The virtual node's kubelet port as a listening socket shows it; nothing listens (no kubelet API here)."""

    def getsockname(self) -> tuple[str, int]:
        return NODE_IP, 10250

    def close(self) -> None:
        pass


class NoKubelet:
    def tasks(self) -> list:
        return []


def unserved_nodes(peering: PeeringContext, node_ip: str = NODE_IP) -> VirtualNodes:
    """The peering's virtual nodes as vk/virtual_nodes.py holds them, none of their loops run (no kubelet API)."""
    return VirtualNodes(
        peering,
        NodeSettings(provider_id=peering.provider_id, node_ip=node_ip),
        HealthSettings(),
        listener=KubeletPort(),  # type: ignore[arg-type]
        bind_address=node_ip,
        make_kubelet=lambda *_: NoKubelet(),
    )


class Consumer:
    """A virtual kubelet serving provider p1 to consumer c1: namespace shop offloaded (unless `offloaded=False`), its
    twin requested and Ready on the provider (unless `twin=False`), the twin namespace there (unless
    `twin_namespace=False`). `provider_cidrs`: the pod ranges the provider announces (None: not yet)."""

    def __init__(
        self,
        *,
        provider: FakeCluster | None = None,
        offloaded: bool = True,
        twin: bool = True,
        twin_namespace: bool = True,
        remap: str | None = None,
        provider_cidrs: list[str] | None = None,
    ):
        self.local = FakeCluster("consumer")
        self.provider = provider or FakeCluster("provider")
        self.provider_cidrs = provider_cidrs
        self._seed(offloaded, twin, twin_namespace)
        client = self.local.client()
        self.peering = PeeringContext(
            consumer_id=CONSUMER,
            provider_id=PROVIDER,
            local=client,
            provider=self.provider.client(),
            events=EventRecorder(client, "catamaran-vk"),
            foreign_cluster=("catamaran-system", PROVIDER),
        )
        self.nodes = unserved_nodes(self.peering)
        self.parts = OffloadingParts(self.peering, self.nodes, settings_from_spec(None), remap_cidr=remap)
        self.pods = self.parts.pods
        self.tasks: list[asyncio.Task] = []

    def _seed(self, offloaded: bool, twin: bool, twin_namespace: bool) -> None:
        local, provider = self.local, self.provider
        local.add(Namespace, {"metadata": {"name": NAMESPACE}})
        local.add(
            Node,
            {"metadata": {"name": NODE, "labels": {LABEL_TYPE: TYPE_VIRTUAL_NODE, LABEL_REMOTE_CLUSTER_ID: PROVIDER}}},
        )
        local.add(
            Node,
            {
                "metadata": {"name": "worker"},
                "spec": {"podCIDR": CONSUMER_POD_RANGE, "podCIDRs": [CONSUMER_POD_RANGE]},
                "status": {"addresses": [{"type": "InternalIP", "address": CONSUMER_NODE_ADDRESS}]},
            },
        )
        local.add(
            Service,
            {
                "metadata": {"name": "kubernetes", "namespace": "default"},
                "spec": {"clusterIP": KUBERNETES_SERVICE_IP, "clusterIPs": [KUBERNETES_SERVICE_IP]},
            },
        )
        local.add(
            EndpointSlice,
            {
                "metadata": {"name": "kubernetes", "namespace": "default"},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [CONSUMER_NODE_ADDRESS]}],
            },
        )
        if offloaded:
            local.add(NamespaceOffloading, {"metadata": {"name": OFFLOADING_NAME, "namespace": NAMESPACE}, "spec": {}})
        if provider.read(Namespace, TENANT) is None:
            provider.add(Namespace, {"metadata": {"name": TENANT, "labels": {LABEL_TENANT: "true"}}})
        if twin_namespace and provider.read(Namespace, TWIN) is None:
            provider.add(Namespace, twin_namespace_object())
        if twin:
            provider.add(
                TwinNamespace,
                {
                    "metadata": {"name": TWIN, "namespace": TENANT},
                    "spec": {"originNamespace": NAMESPACE},
                    "status": {"phase": "Ready"},
                },
            )

    async def start(self) -> Consumer:
        parts = self.parts
        reflection = parts.reflection
        self.nodes.add_node(PeeringNode(NODE))  # its pods watched; the Node's own loops are not run here
        informers = [
            self.nodes.local_pods,
            self.nodes.informer,
            parts.twins.requests,
            parts.twins.offloadings,
            reflection.services.local_objects.informer,
            reflection.endpoint_slices.local_objects.informer,
        ]
        self.tasks = _start(informers, parts.ips.local_ranges.tasks())
        if self.provider_cidrs is not None:
            parts.ips.update_pod_cidrs(self.provider_cidrs)  # from the provider's ResourceOffer, in production
        await self.settle()
        await self.nodes.local_pods.sync()  # as VirtualNodes does once its nodes are known
        return self

    async def settle(self) -> None:
        await settle(self.local, self.provider)

    async def reconcile(self, name: str = "web") -> Any:
        """One reconcile of the local pod `name`: what it returned (or raised), once the informers caught up."""
        result = await outcome(self.pods.reconcile((NAMESPACE, name)))
        await self.settle()
        return result

    def pod(self, name: str = "web") -> dict | None:
        return self.local.read(Pod, name, NAMESPACE)

    def shadow(self, name: str = "web") -> dict | None:
        return self.provider.read(ShadowPod, name, TWIN)

    def events(self) -> set[tuple[str, str]]:
        """(type, reason) of the Events recorded on the consumer's pods."""
        return {(e["type"], e["reason"]) for e in self.local.events(NAMESPACE)}


def twin_namespace_object(level: str = "restricted") -> dict:
    """The twin namespace as the provider's TwinNamespaceController makes it."""
    return {
        "metadata": {
            "name": TWIN,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN,
                LABEL_ORIGIN_CLUSTER_ID: CONSUMER,
                LABEL_DESTINATION_CLUSTER_ID: PROVIDER,
                **pod_security_labels(level),
            },
            "annotations": {ANNOTATION_TWIN_OF: f"{TENANT}/{TWIN}", ANNOTATION_ORIGIN_NAMESPACE: NAMESPACE},
        }
    }


# -- the provider's side ----------------------------------------------------------------------------------------------


class Provider:
    """The provider's manager for tenant c1: its twin shop-c1 and tenant namespace, one worker node (4 CPUs)."""

    def __init__(self, cluster: FakeCluster | None = None, *, offer_spec: dict | None = None):
        self.cluster = cluster or FakeCluster("provider")
        self._seed(offer_spec)
        client = self.cluster.client()
        self.recorder = EventRecorder(client, MANAGER_COMPONENT)
        self.offers = ResourceOfferController(client, PROVIDER)
        self.twins = TwinNamespaceController(
            client,
            PROVIDER,
            self.offers.tenants,
            self.recorder,
            terms=self.offers.offers,
            provider_pod_cidrs=self.offers.pod_cidrs,
            wait_for=(self.offers.nodes,),
        )
        self.shadowpods = ShadowPodController(
            client,
            self.recorder,
            offers=self.offers,
            twin_namespaces=self.twins.namespaces,
            wait_for=(self.offers.offers, self.offers.nodes, self.offers.pods, self.twins.namespaces),
        )
        self.tasks: list[asyncio.Task] = []

    def _seed(self, offer_spec: dict | None) -> None:
        cluster = self.cluster
        if cluster.read(Namespace, TENANT) is None:
            labels = {LABEL_TENANT: "true", LABEL_ORIGIN_CLUSTER_ID: CONSUMER}
            cluster.add(Namespace, {"metadata": {"name": TENANT, "labels": labels}})
        if cluster.read(Namespace, TWIN) is None:
            cluster.add(Namespace, twin_namespace_object())
        cluster.add(
            Node,
            {
                "metadata": {"name": "provider-worker", "labels": {"kubernetes.io/hostname": "provider-worker"}},
                "spec": {"podCIDR": PROVIDER_POD_RANGE, "podCIDRs": [PROVIDER_POD_RANGE]},
                "status": {
                    "allocatable": WORKER_ALLOCATABLE,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        if offer_spec is not None:
            cluster.add(
                ResourceOffer, {"metadata": {"name": RESOURCE_OFFER_NAME, "namespace": TENANT}, "spec": offer_spec}
            )

    async def start(self) -> Provider:
        offers = self.offers
        informers = [offers.nodes, offers.pods, offers.tenants, offers.offers, self.twins.namespaces]
        self.tasks = _start([*informers, self.shadowpods.shadows])
        await self.settle()
        return self

    async def settle(self, *others: FakeCluster) -> None:
        await settle(self.cluster, *others)

    async def reconcile(self, name: str = "web") -> Any:
        """One reconcile of the ShadowPod `name` in the twin: what it returned (or raised), once caught up."""
        result = await outcome(self.shadowpods.reconcile((TWIN, name)))
        await self.settle()
        return result

    def shadow(self, name: str = "web") -> dict | None:
        return self.cluster.read(ShadowPod, name, TWIN)

    def pod(self, name: str = "web") -> dict | None:
        return self.cluster.read(Pod, name, TWIN)

    def events(self) -> set[tuple[str, str]]:
        """(type, reason) of the Events recorded on the twin's ShadowPods."""
        return {(e["type"], e["reason"]) for e in self.cluster.events(TWIN)}

    def run_pod(self, name: str = "web", status: dict | None = None) -> dict:
        """The provider's scheduler and kubelet: the pod bound to the worker and its status written."""

        def running(pod: dict) -> None:
            pod["spec"]["nodeName"] = "provider-worker"
            pod["status"] = status or remote_running()

        return self.cluster.update(Pod, name, TWIN, running)
