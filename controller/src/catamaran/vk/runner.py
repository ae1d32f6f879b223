"""Wire a virtual kubelet together from its ForeignCluster and credential Secret."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from ..constants import (
    DEFAULT_SHARING_PERCENTAGE,
    NETWORK_READY_CONDITION,
    RESOURCE_OFFER_NAME,
    virtual_node_name,
)
from ..kube.clients import async_client, bearer_token
from ..kube.events import EventRecorder
from ..kube.informer import Informer
from ..kube.resources import ForeignCluster, ResourceOffer
from ..logs import fields
from ..networks import remap_pairs
from ..objects import as_dict, reference, set_condition
from ..tenancy import lent_service_types
from .context import PeeringContext
from .forge import consented_pod_cidrs
from .gateway_lease import GatewayLease
from .kubelet.certificate import ServingCertificate
from .kubelet.channel import ProviderChannel
from .kubelet.server import KubeletServer, listen
from .node import HealthSettings, NodeSettings, VirtualNode
from .peering import CredentialFollower, ForeignClusterError, PeeringWatch
from .pods import PodController
from .reflection.policy import settings_from_spec
from .validation import foreign_spec_problems, home_api_server

log = logging.getLogger(__name__)
FIELD_MANAGER = "catamaran-virtual-kubelet"
# Watches wake the virtual kubelet as soon as its peering appears; this bounds the wait when one
# breaks or misses something, and is the only retry when there is nothing to watch.
RECHECK_SECONDS = 10.0
# How soon a gateway's lapsed Lease is noticed after it lapses (a local check, no API call).
GATEWAY_RECHECK_SECONDS = 1.0


def reflection_terms(offer: dict) -> tuple[tuple, tuple | None]:
    """From the provider's ResourceOffer: the Service types it lets its tenant write, and the ranges EndpointSlice
    addresses may lie in (None while it publishes none)."""
    allowed = ((offer.get("spec") or {}).get("services") or {}).get("allowedTypes")
    ranges = (offer.get("status") or {}).get("endpointRanges")
    return lent_service_types(allowed), (tuple(ranges) if ranges is not None else None)


def network_problem(foreign: dict, gateway_problem: str | None = None) -> str | None:
    """Why the network fabric's tunnel to the provider is down (this cluster's gateway gone, or its NetworkReady=False),
    else None."""
    if ((foreign["spec"].get("networking") or {}).get("mode")) != "Fabric":
        return None
    if gateway_problem:
        return f"the network fabric's tunnel to the provider is down ({gateway_problem})"
    ready = next(
        (c for c in (foreign.get("status") or {}).get("conditions") or [] if c["type"] == NETWORK_READY_CONDITION),
        None,
    )
    if ready is None or ready.get("status") != "False":
        return None
    return f"the network fabric's tunnel to the provider is down ({ready.get('reason')}: {ready.get('message', '')})"


def local_remap(foreign: dict) -> tuple:
    """The consumer's pod ranges as the provider sees them (the fabric's remapping), from the ForeignCluster."""
    return remap_pairs((foreign["spec"].get("networking") or {}).get("localPodCIDRRemap"))


def consent(foreign: dict) -> list[str] | None:
    """The provider's pod ranges this peering consents to (forge.consented_pod_cidrs)."""
    return consented_pod_cidrs(foreign["spec"].get("networking") or {})


@dataclass
class KubeletOptions:
    """The kubelet API: where it listens and publishes itself, and its serving certificate."""

    bind_address: str | None = None  # None: the node address
    port: int = 10250  # 0: any free port, published in the node's daemon endpoint
    self_signed: bool = False
    cert_dir: Path | None = None
    certificate_seconds: int | None = None
    renew_fraction: float = 0.8
    client_ca_file: Path | None = None


class PeeringRemoved(Exception):
    """The served ForeignCluster was deleted; the virtual node is gone and the process should end cleanly."""


def settings_from(foreign: dict, node_ip: str, kubelet_port: int):
    spec = foreign["spec"]
    health = spec.get("healthCheck") or {}
    node = NodeSettings(
        provider_id=spec["clusterID"],
        node_ip=node_ip,
        sharing_percentage=int(spec.get("sharingPercentage", DEFAULT_SHARING_PERCENTAGE)),
        suggested_labels=dict(spec.get("nodeLabels") or {}),
        taints=[dict(t) for t in spec.get("nodeTaints") or []],
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
        kubelet: KubeletOptions | None = None,
        workers: int = 16,
    ):
        self.local = local
        self.foreign_cluster = foreign_cluster
        self.namespace = namespace
        self.consumer_id = consumer_id
        self.node_ip = node_ip
        self.kubelet = kubelet or KubeletOptions()
        self.kubelet_port = 0
        self.workers = workers
        self.events = EventRecorder(local, FIELD_MANAGER)
        # Status reports started from callbacks: held until done, so none is collected mid-flight or fails unseen.
        self._reports: set[asyncio.Task] = set()

    async def run(self) -> None:
        """Wait until the ForeignCluster and its credential are usable, then serve until the peering is removed.

        Raises PeeringRemoved once the ForeignCluster is deleted and the virtual node cleaned up.
        """
        listener = listen(self.kubelet.bind_address or self.node_ip, self.kubelet.port)
        self.kubelet_port = listener.getsockname()[1]
        watch = PeeringWatch(self.local, self.namespace, self.foreign_cluster)
        watching = asyncio.get_running_loop().create_task(watch.foreigns.run())
        try:
            while True:
                try:
                    foreign, config = await watch.read(RECHECK_SECONDS)
                    if problems := foreign_spec_problems(foreign["spec"]):
                        raise ForeignClusterError("InvalidSpec", "; ".join(problems))
                    break
                except ForeignClusterError as error:
                    log.error(
                        "foreign cluster unusable",
                        extra=fields(foreign_cluster=self.foreign_cluster, reason=error.reason, error=str(error)),
                    )
                    await self._report(error.reason, str(error), ready=False)
                    await watch.until_changed(RECHECK_SECONDS)
            provider = async_client(config, None, FIELD_MANAGER, cluster="provider")
            channel = ProviderChannel(provider, config.get())
            await self._serve(watch, foreign, provider, channel, listener)
        finally:
            listener.close()
            watching.cancel()
            watch.stop_secret()

    async def _serve(self, watch: PeeringWatch, foreign: dict, provider: AsyncClient, channel, listener) -> None:
        node_settings, health = settings_from(foreign, self.node_ip, self.kubelet_port)
        peering = PeeringContext(
            consumer_id=self.consumer_id,
            provider_id=node_settings.provider_id,
            local=self.local,
            provider=provider,
            events=self.events,
            foreign_cluster=(self.namespace, self.foreign_cluster),
        )
        node = VirtualNode(peering, node_settings, health)
        remap = ((foreign["spec"].get("networking") or {}).get("podCIDRRemap")) or None
        pods = PodController(
            peering,
            node,
            settings_from_spec(foreign["spec"].get("reflection")),
            remap_cidr=remap,
            home_api_server=home_api_server(foreign["spec"]),
            workers=self.workers,
        )
        reflection = pods.reflection
        reflection.update_local_remap(local_remap(foreign))
        pods.ips.consented = consent(foreign)
        reflection.update_network(network_problem(foreign) is not None)
        pods.ips.network_down = network_problem(foreign)
        gateway = GatewayLease(self.local)
        certificate = ServingCertificate(
            self.local,
            peering.node_name,
            [self.node_ip],
            self_signed=self.kubelet.self_signed,
            cert_dir=self.kubelet.cert_dir,
            expiration_seconds=self.kubelet.certificate_seconds,
            renew_fraction=self.kubelet.renew_fraction,
            client_ca_file=self.kubelet.client_ca_file,
        )
        kubelet = KubeletServer(
            peering,
            listener,
            certificate,
            channel,
            local_pod=pods.local_pods.get,
            pods_on_node=lambda: list(pods.local_pods.cache.values()),
            twin_of=pods.twins.ready_twin,  # the namespace's own twin only, never another namespace's
            node_published=node.published,
            provider_allocatable=lambda: (node.offer or {}).get("allocatable") or {},
        )
        offers = Informer(
            provider,
            ResourceOffer,
            name="resource-offer",
            namespace=peering.tenant_namespace,
            fields={"metadata.name": RESOURCE_OFFER_NAME},
            transform=as_dict,
        )

        def offer_changed(event, key, new, old):
            status = (new or {}).get("status") if new else None
            node.update_offer(status)
            if status:
                pods.ips.update_pod_cidrs(status.get("podCIDRs") or [])
            if new:
                reflection.update_terms(*reflection_terms(new))

        offers.on_change(offer_changed)
        node.offer_synced = offers.synced
        foreigns = watch.foreigns  # running since run() began

        removed = asyncio.Event()
        invalid_spec = [False]  # InvalidSpec is on the ForeignCluster's status

        def foreign_changed(event, key, new, old):
            if new is None:
                removed.set()
                return
            if problems := foreign_spec_problems(new["spec"]):
                invalid_spec[0] = True  # keep serving with the last valid settings until it is fixed
                self._report_soon("InvalidSpec", "; ".join(problems), ready=False)
                return
            if invalid_spec[0] and node.healthy:
                invalid_spec[0] = False
                self._report_soon("Connected", f"virtual node {peering.node_name} is serving", ready=True)
            settings, _ = settings_from(new, self.node_ip, self.kubelet_port)
            node.update_settings(settings)
            reflection.update(settings_from_spec(new["spec"].get("reflection")))
            reflection.update_local_remap(local_remap(new))
            pods.ips.update_consent(consent(new))
            pods.home_api_server = home_api_server(new["spec"])  # for pods offloaded from now on
            network_changed()

        def network_changed() -> None:
            foreign = foreigns.get(self.namespace, self.foreign_cluster)
            if foreign is None:
                return
            problem = network_problem(foreign, gateway.problem())
            reflection.update_network(problem is not None)
            pods.ips.update_network(problem)

        async def follow_gateway() -> None:
            """A lapsed Lease changes nothing on the API server: its silence is noticed here, on a local clock."""
            while True:
                network_changed()
                await asyncio.sleep(GATEWAY_RECHECK_SECONDS)

        foreigns.on_change(foreign_changed)
        gateway.informer.on_change(lambda *_: network_changed())

        async def until_removed() -> None:
            await foreigns.synced.wait()
            # Deleted between connecting and the first list: the informer never saw it, so no DELETED comes.
            if foreigns.get(self.namespace, self.foreign_cluster) is None:
                removed.set()
            await removed.wait()
            # Raised inside the group so that every other loop is cancelled, and has ended, before cleanup.
            raise PeeringRemoved(f"ForeignCluster {self.namespace}/{self.foreign_cluster} was deleted")

        node.health_listeners.append(
            lambda healthy: self._report_soon(
                "ProviderReachable" if healthy else (node.not_ready or ("ProviderUnreachable",))[0],
                (node.not_ready or ("", f"virtual node {peering.node_name} is serving"))[1],
                ready=healthy,
            )
        )
        # A token credential is followed and swapped in place as the provider renews it or the peering replaces it.
        token = bearer_token(provider)
        credential = CredentialFollower(self.local, provider, token, watch, self.consumer_id) if token else None
        await self._report("Connected", f"virtual node {peering.node_name} is serving", ready=True)
        log.info("virtual kubelet running", extra=fields(provider=peering.provider_id, node=peering.node_name))
        try:
            async with asyncio.TaskGroup() as group:
                loops = [offers.run(), until_removed(), gateway.informer.run(), follow_gateway(), *node.tasks()]
                loops += pods.tasks()
                loops += credential.tasks() if credential else []
                for task in loops + reflection.tasks() + kubelet.tasks():
                    group.create_task(task)
        except* PeeringRemoved as group_error:
            removal = group_error.exceptions[0]
        else:
            raise RuntimeError("the virtual kubelet's loops ended on their own")
        # The group has cancelled and awaited every loop, so the node's loops can no longer recreate anything.
        log.info(
            "foreign cluster deleted; removing the virtual node",
            extra=fields(foreign_cluster=self.foreign_cluster, node=peering.node_name),
        )
        await node.remove()
        await provider.close()
        raise removal

    def _report_soon(self, reason: str, message: str, ready: bool) -> None:
        """_report, from a synchronous callback."""
        task = asyncio.get_running_loop().create_task(self._report(reason, message, ready))
        self._reports.add(task)
        task.add_done_callback(self._report_done)

    def _report_done(self, task: asyncio.Task) -> None:
        self._reports.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error(
                "cannot report the foreign cluster's status",
                exc_info=error,
                extra=fields(foreign_cluster=self.foreign_cluster),
            )

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
