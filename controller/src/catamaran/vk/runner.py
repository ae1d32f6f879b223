"""Wire a virtual kubelet together from its ForeignCluster and credential Secret."""

from __future__ import annotations

import asyncio
import base64
import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from ..constants import RESOURCE_OFFER_NAME, tenant_namespace, virtual_node_name
from ..kube.clients import CredentialError, async_client, kubeconfig_from_text
from ..kube.events import EventRecorder
from ..kube.informer import Informer
from ..kube.resources import ForeignCluster, ResourceOffer
from ..logs import fields
from ..objects import as_dict, reference, set_condition
from .node import HealthSettings, NodeSettings, VirtualNode
from .pods import PodController

log = logging.getLogger(__name__)
FIELD_MANAGER = "catamaran-virtual-kubelet"


class ForeignClusterError(Exception):
    """The ForeignCluster or its credential cannot be used; reported on its status."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def settings_from(foreign: dict, consumer_id: str, node_ip: str, kubelet_port: int):
    spec = foreign["spec"]
    health = spec.get("healthCheck") or {}
    node = NodeSettings(
        provider_id=spec["clusterID"],
        consumer_id=consumer_id,
        node_ip=node_ip,
        sharing_percentage=int(spec.get("sharingPercentage", 90)),
        suggested_labels=dict(spec.get("nodeLabels") or {}),
        kubelet_port=kubelet_port,
    )
    checks = HealthSettings(
        period=float(health.get("periodSeconds", 10)),
        timeout=float(health.get("timeoutSeconds", 5)),
        failure_threshold=int(health.get("failureThreshold", 3)),
    )
    return node, checks


class VirtualKubelet:
    def __init__(
        self,
        local: AsyncClient,
        *,
        foreign_cluster: str,
        namespace: str,
        consumer_id: str,
        node_ip: str,
        kubelet_port: int = 0,
        workers: int = 16,
    ):
        self.local = local
        self.foreign_cluster = foreign_cluster
        self.namespace = namespace
        self.consumer_id = consumer_id
        self.node_ip = node_ip
        self.kubelet_port = kubelet_port
        self.workers = workers
        self.events = EventRecorder(local, FIELD_MANAGER)

    async def run(self) -> None:
        """Keep trying until the ForeignCluster and its credential are usable, then run."""
        while True:
            try:
                foreign, provider = await self._connect()
                break
            except ForeignClusterError as error:
                log.error(
                    "foreign cluster unusable",
                    extra=fields(foreign_cluster=self.foreign_cluster, reason=error.reason, error=str(error)),
                )
                await self._report(error.reason, str(error), ready=False)
                await asyncio.sleep(10)
        await self._serve(foreign, provider)

    async def _connect(self) -> tuple[dict, AsyncClient]:
        try:
            foreign = as_dict(await self.local.get(ForeignCluster, self.foreign_cluster, namespace=self.namespace))
        except ApiError as error:
            raise ForeignClusterError(
                "ForeignClusterMissing",
                f"ForeignCluster {self.namespace}/{self.foreign_cluster}: {error.status.message}",
            ) from None
        ref = foreign["spec"]["credentialsSecretRef"]
        origin = f"Secret {self.namespace}/{ref['name']}"
        try:
            secret = await self.local.get(Secret, ref["name"], namespace=self.namespace)
        except ApiError as error:
            raise ForeignClusterError("CredentialMissing", f"{origin}: {error.status.message}") from None
        encoded = (secret.data or {}).get(ref.get("key", "kubeconfig"))
        if not encoded:
            raise ForeignClusterError("CredentialInvalid", f"{origin} has no key {ref.get('key', 'kubeconfig')!r}")
        try:
            config = kubeconfig_from_text(base64.b64decode(encoded).decode(), origin)
        except (CredentialError, ValueError) as error:
            raise ForeignClusterError("CredentialInvalid", str(error)) from None
        provider = async_client(config, None, FIELD_MANAGER)
        return foreign, provider

    async def _serve(self, foreign: dict, provider: AsyncClient) -> None:
        node_settings, health = settings_from(foreign, self.consumer_id, self.node_ip, self.kubelet_port)
        provider_id = node_settings.provider_id
        node = VirtualNode(self.local, provider, node_settings, health, self.events)
        remap = ((foreign["spec"].get("networking") or {}).get("podCIDRRemap")) or None
        pods = PodController(
            self.local,
            provider,
            node,
            self.events,
            consumer_id=self.consumer_id,
            provider_id=provider_id,
            remap_cidr=remap,
            workers=self.workers,
        )
        offers = Informer(
            provider,
            ResourceOffer,
            name="resource-offer",
            namespace=tenant_namespace(self.consumer_id),
            fields={"metadata.name": RESOURCE_OFFER_NAME},
            transform=as_dict,
        )

        def offer_changed(event, key, new, old):
            status = (new or {}).get("status") if new else None
            node.update_offer(status)
            if status:
                pods.update_pod_cidrs(status.get("podCIDRs") or [])

        offers.on_change(offer_changed)
        foreigns = Informer(
            self.local,
            ForeignCluster,
            name="foreign-cluster",
            namespace=self.namespace,
            fields={"metadata.name": self.foreign_cluster},
            transform=as_dict,
        )

        def foreign_changed(event, key, new, old):
            if new is not None:
                settings, _ = settings_from(new, self.consumer_id, self.node_ip, self.kubelet_port)
                node.update_settings(settings)

        foreigns.on_change(foreign_changed)
        node.health_listeners.append(
            lambda healthy: asyncio.get_running_loop().create_task(
                self._report(
                    "ProviderReachable" if healthy else "ProviderUnreachable",
                    node.unhealthy_reason or f"virtual node {node.name} is serving",
                    ready=healthy,
                )
            )
        )
        await self._report("Connected", f"virtual node {virtual_node_name(provider_id)} is serving", ready=True)
        log.info("virtual kubelet running", extra=fields(provider=provider_id, node=node.name))
        async with asyncio.TaskGroup() as group:
            for task in [offers.run(), foreigns.run(), *node.tasks(), *pods.tasks()]:
                group.create_task(task)

    async def _report(self, reason: str, message: str, ready: bool) -> None:
        """Ready condition and virtual node name on the ForeignCluster's status, plus an Event."""
        try:
            foreign = as_dict(await self.local.get(ForeignCluster, self.foreign_cluster, namespace=self.namespace))
        except ApiError:
            return
        status = foreign.get("status") or {}
        conditions = set_condition(
            status.get("conditions") or [], "Ready", "True" if ready else "False", reason, message
        )
        if conditions == status.get("conditions"):
            return
        await self.local.patch(
            ForeignCluster.Status,
            self.foreign_cluster,
            {
                "status": {
                    "conditions": conditions,
                    "observedGeneration": foreign["metadata"].get("generation"),
                    "virtualNode": virtual_node_name(foreign["spec"]["clusterID"]),
                }
            },
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
        )
        previous = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
        if previous is None or previous.get("reason") != reason:
            await self.events.record(reference(foreign), "Normal" if ready else "Warning", reason, message)
