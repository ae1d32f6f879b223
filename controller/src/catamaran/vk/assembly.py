"""The virtual kubelet's composition root: every part serving one peering, built once and in dependency order, and
the listeners between the parts as named methods.

`OffloadingParts` offloads the pods bound to the peering's virtual nodes (their ShadowPods, IPs, status, Events) and
reflects what they read; `ServedPeering` adds the nodes (one, or one per node pool, each with its kubelet API and
drain: vk/virtual_nodes.py), the provider's ResourceOffer, the gateway's Lease and the credential, and follows the
ForeignCluster. vk/runner.py builds a `ServedPeering` once the peering is usable and
runs its `tasks()`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lightkube import AsyncClient

from ..constants import (
    DEFAULT_SHARING_PERCENTAGE,
    KUBELET_PORT,
    NETWORK_POLICY_CONDITION,
    NETWORK_READY_CONDITION,
    RESOURCE_OFFER_NAME,
)
from ..kube.clients import bearer_token
from ..kube.events import EventRecorder
from ..kube.informer import Informer, NamespacedInformers, call
from ..kube.resources import ResourceOffer
from ..networks import remap_pairs
from ..objects import as_dict, condition
from ..steering import is_daemonset_pod
from ..tenancy import lent_service_types
from .context import PeeringContext
from .gateway_lease import GatewayLease
from .ip_translation import consented_pod_cidrs
from .kubelet.certificate import ServingCertificate
from .kubelet.channel import ProviderChannel
from .kubelet.server import KubeletServer
from .namespaces import TwinManager
from .node import HealthSettings, NodeSettings, VirtualNode
from .peering import CredentialFollower, PeeringWatch
from .pod_ips import PodIPs
from .pod_status import PodStatus
from .pods import WORKERS as POD_WORKERS
from .pods import PodController, remote_pod_informer, shadow_informer
from .reflection.peering_reflection import PeeringReflection
from .reflection.policy import ReflectionSettings, settings_from_spec
from .remote_events import RemoteEventMirror
from .trust import bounded_text
from .validation import foreign_spec_problems, home_api_server
from .virtual_nodes import VirtualNodes

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
    """The provider's pod ranges this peering consents to (ip_translation.consented_pod_cidrs)."""
    return consented_pod_cidrs(foreign["spec"].get("networking") or {})


def settings_from(foreign: dict, node_ip: str, kubelet_port: int) -> tuple[NodeSettings, HealthSettings]:
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


@dataclass
class KubeletOptions:
    """The kubelet API: where it listens and publishes itself, and its serving certificate."""

    bind_address: str | None = None  # None: the node address
    port: int = KUBELET_PORT  # 0: any free port, published in the node's daemon endpoint
    self_signed: bool = False
    cert_dir: Path | None = None
    certificate_seconds: int | None = None
    renew_fraction: float = 0.8
    client_ca_file: Path | None = None


class PeeringRemoved(Exception):
    """The served ForeignCluster was deleted; the virtual node is gone and the process should end cleanly."""


class OffloadingParts:
    """The pods bound to the peering's virtual nodes offloaded as ShadowPods, their IPs and status shown, their twins'
    Events mirrored, and what they read reflected: built once, in dependency order, then wired (`_wire`)."""

    def __init__(
        self,
        peering: PeeringContext,
        nodes: VirtualNodes,
        reflection_settings: ReflectionSettings,
        *,
        remap_cidr: str | None,
        home_api_server: tuple[str, int] | None = None,
        workers: int = POD_WORKERS,
    ):
        self.peering = peering
        self.local_pods = nodes.local_pods  # each node's pods, watched as its node comes and goes
        self.shadows = NamespacedInformers(self._shadow_informer)
        self.remote_pods = NamespacedInformers(self._remote_pod_informer)
        self.twins = TwinManager(
            peering,
            pods_on_node=self._drainable_pods,
            shadows_left=self._shadows_left,
            nodes=nodes.informer,
            selects=nodes.selects,
        )
        # Pod IPs (checked and translated) and the status written back, one module each.
        node_ip = nodes.settings.node_ip
        self.ips = PodIPs(peering, node_ip, remap_cidr, nodes.informer, self._requeue_pods)
        self.status = PodStatus(peering, nodes.health, node_ip, self.ips)
        # Reflection works in the same twins, and issues the tokens of the same local pods.
        self.reflection = PeeringReflection(peering, self.twins, self.local_pods, reflection_settings)
        # Events about reflected objects come back onto the local objects.
        self.remote_events = RemoteEventMirror(peering, self.local_pods, reflected=self.reflection.local_object)
        self.pods = PodController(
            peering,
            local_pods=self.local_pods,
            twins=self.twins,
            shadows=self.shadows,
            remote_pods=self.remote_pods,
            status=self.status,
            tokens=self.reflection.tokens,
            config_maps=self.reflection.config_maps,
            node_labels=nodes.labels_of,
            pool_of=nodes.pool_of,
            home_api_server=home_api_server,
            workers=workers,
        )
        self._wire(nodes)

    def _wire(self, nodes: VirtualNodes) -> None:
        """Who hears what. Where several hear one source they are told in this order."""
        pods, twins, reflection = self.pods, self.twins, self.reflection
        # Reflection hears of twins after the pods and their Events do.
        twins.ready_listeners += [pods.twin_ready, self.remote_events.twin_ready, reflection.twin_ready]
        twins.removed_listeners += [
            self.shadows.unwatch,
            self.remote_pods.unwatch,
            self.remote_events.twin_removed,
            reflection.twin_removed,
        ]
        twins.drainers.append(reflection.drain)
        twins.data_holders.append(reflection.claims.copies_in)
        self.local_pods.on_change(pods.local_changed)
        twins.offloadings.on_change(pods.offloading_changed)
        nodes.health.health_listeners.append(pods.health_changed)
        nodes.changed_listeners.append(reflection.nodes_changed)  # endpoints on the peering's nodes are not copied
        # The cluster-wide Service and EndpointSlice watches also hold the `kubernetes` Service and API server.
        self.ips.local_ranges.follow_kubernetes_service(
            reflection.services.local_objects.informer, reflection.endpoint_slices.local_objects.informer
        )
        # Pods wait for their token Secret before their ShadowPod.
        reflection.tokens.written_listeners.append(pods.queue.add)
        self.local_pods.on_change(lambda event, key, new, old: reflection.tokens.pod_changed(key, new))

    def tasks(self) -> list:
        loops = [*self.twins.tasks(), *self.remote_events.tasks(), *self.ips.tasks()]
        return loops + self.pods.tasks() + self.reflection.tasks()

    def pods_on_node(self) -> list[dict]:
        return list(self.local_pods.cache.values())

    def _drainable_pods(self, namespace: str) -> list[dict]:
        """The namespace's pods here that a leaving twin drains: DaemonSet pods are never offloaded."""
        return [
            p
            for key in self.local_pods.keys_in(namespace)
            if (p := self.local_pods.cache.get(key)) is not None and not is_daemonset_pod(p)
        ]

    def _shadows_left(self, twin: str) -> int:
        informer = self.shadows.get(twin)
        return len(informer.cache) if informer else 0

    # Called only once serving (a twin turned Ready; new ranges or network), when every part exists.

    def _shadow_informer(self, twin: str) -> Informer:
        informer = shadow_informer(self.peering, twin)
        informer.on_change(self.pods.shadow_changed)
        return informer

    def _remote_pod_informer(self, twin: str) -> Informer:
        informer = remote_pod_informer(self.peering, twin)
        informer.on_change(self.pods.remote_pod_changed)
        return informer

    def _requeue_pods(self) -> None:
        self.pods.requeue_all()


class ServedPeering:
    """Every part of the virtual kubelet serving one peering, from the ForeignCluster it was started with, and how
    they follow the ForeignCluster, the provider's ResourceOffer and this cluster's gateway afterwards."""

    def __init__(
        self,
        local: AsyncClient,
        provider: AsyncClient,
        watch: PeeringWatch,
        foreign: dict,
        *,
        consumer_id: str,
        events: EventRecorder,
        node_ip: str,
        listener: socket.socket,
        channel: ProviderChannel,
        options: KubeletOptions,
        report: Callable[..., None],
        set_condition: Callable[[str, str, str, str], None] = lambda *_: None,
        report_nodes: Callable[[], None] = lambda: None,
        workers: int = POD_WORKERS,
    ):
        self.node_ip = node_ip
        self.kubelet_port = listener.getsockname()[1]
        self.report = report  # (reason, message, ready=): the Ready condition on the ForeignCluster, from a callback
        self.set_condition = set_condition  # (type, status, reason, message): another condition on it
        self.report_nodes = report_nodes  # the names of the peering's virtual nodes on it, as they change
        self.foreigns = watch.foreigns  # running since the runner began
        node_settings, health = settings_from(foreign, node_ip, self.kubelet_port)
        self.peering = PeeringContext(
            consumer_id=consumer_id,
            provider_id=node_settings.provider_id,
            local=local,
            provider=provider,
            events=events,
            foreign_cluster=(watch.namespace, watch.name),
        )
        self.channel = channel
        self.options = options
        self.nodes = VirtualNodes(
            self.peering,
            node_settings,
            health,
            listener=listener,
            bind_address=options.bind_address or node_ip,
            make_kubelet=self._kubelet_server,
        )
        spec = foreign["spec"]
        self.nodes.foreign_spec = spec
        self.offloading = OffloadingParts(
            self.peering,
            self.nodes,
            settings_from_spec(spec.get("reflection")),
            remap_cidr=((spec.get("networking") or {}).get("podCIDRRemap")) or None,
            home_api_server=home_api_server(spec),
            workers=workers,
        )
        self._start_network(foreign)
        self.gateway = GatewayLease(local)
        self.offers = Informer(
            provider,
            ResourceOffer,
            name="resource-offer",
            namespace=self.peering.tenant_namespace,
            fields={"metadata.name": RESOURCE_OFFER_NAME},
            transform=as_dict,
        )
        self.removed = asyncio.Event()
        self.invalid_spec = False  # InvalidSpec is on the ForeignCluster's status
        self._wire()
        # A token credential is followed and swapped in place as the provider renews it or the peering replaces it.
        token = bearer_token(provider)
        self.credential = CredentialFollower(local, provider, token, watch, consumer_id) if token else None

    def _start_network(self, foreign: dict) -> None:
        """The ForeignCluster's networking as serving starts; nothing is queued yet, so no pod is requeued."""
        reflection, ips = self.offloading.reflection, self.offloading.ips
        reflection.update_local_remap(local_remap(foreign))
        ips.consented = consent(foreign)
        reflection.update_network(network_problem(foreign) is not None)
        ips.network_down = network_problem(foreign)

    def _kubelet_server(
        self,
        node_name: str,
        listener: socket.socket,
        node: VirtualNode,
        pods_on_node: Callable[[], list[dict]],
        local_pod: Callable[[str, str], dict | None],
    ) -> KubeletServer:
        """The kubelet API of one virtual node (vk/virtual_nodes.py builds one per node), with its own certificate."""
        options = self.options
        pool_node = node_name != self.peering.node_name
        certificate = ServingCertificate(
            self.peering.local,
            node_name,
            [self.node_ip],
            self_signed=options.self_signed,
            # The peering's node keeps the directory it always had; a pool's node a directory of its own within.
            cert_dir=(options.cert_dir / node_name) if options.cert_dir and pool_node else options.cert_dir,
            expiration_seconds=options.certificate_seconds,
            renew_fraction=options.renew_fraction,
            client_ca_file=options.client_ca_file,
        )
        return KubeletServer(
            self.peering,
            listener,
            certificate,
            self.channel,
            local_pod=local_pod,
            pods_on_node=pods_on_node,
            twin_of=self.offloading.twins.ready_twin,  # the namespace's own twin only, never another namespace's
            node_published=node.published,
            provider_allocatable=lambda: (node.offer or {}).get("allocatable") or {},
            node_name=node_name,
        )

    def _wire(self) -> None:
        self.offers.on_change(self.offer_changed)
        self.nodes.offer_synced = self.offers.synced
        self.foreigns.on_change(self.foreign_changed)
        self.gateway.informer.on_change(call(self.network_changed))
        self.nodes.health.health_listeners.append(self.health_changed)  # after the pods' requeue
        self.nodes.changed_listeners.append(self.report_nodes)

    def tasks(self) -> list:
        loops = [self.offers.run(), self.until_removed(), self.gateway.informer.run(), self.follow_gateway()]
        loops += self.nodes.tasks() + self.offloading.tasks()
        return loops + (self.credential.tasks() if self.credential else [])

    # -- listeners ----------------------------------------------------------------------

    def offer_changed(self, event, key, new, old) -> None:
        status = (new or {}).get("status") if new else None
        # Its spec says which pools there are and the cordons (no new pod here, and with drain, none left).
        self.nodes.update_offer(new)
        if status:
            self.offloading.ips.update_pod_cidrs(status.get("podCIDRs") or [])
        if new:
            self.offloading.reflection.update_terms(*reflection_terms(new))
        self._copy_network_policy_condition(status)

    def _copy_network_policy_condition(self, offer_status: dict | None) -> None:
        """Whether the provider confines this tenant's pods by NetworkPolicies, onto the ForeignCluster whenever the
        two differ (level-triggered: a write that failed or was undone is made again on the next event of either)."""
        # The provider writes it: its reason and message bounded, its status one a condition may have.
        found = bounded_text(condition(offer_status, NETWORK_POLICY_CONDITION))
        if not found:
            return
        wanted = (
            found.get("status") if found.get("status") in ("True", "False") else "Unknown",
            found.get("reason") or "Unknown",
            f"provider {self.peering.provider_id}: {found.get('message') or ''}",
        )
        foreign = self.foreigns.get(*self.peering.foreign_cluster)
        current = condition((foreign or {}).get("status"), NETWORK_POLICY_CONDITION) or {}
        if (current.get("status"), current.get("reason"), current.get("message")) != wanted:
            self.set_condition(NETWORK_POLICY_CONDITION, *wanted)

    def foreign_changed(self, event, key, new, old) -> None:
        if new is None:
            self.removed.set()
            return
        offer = self.offers.get(self.peering.tenant_namespace, RESOURCE_OFFER_NAME)
        self._copy_network_policy_condition((offer or {}).get("status"))
        if problems := foreign_spec_problems(new["spec"]):
            self.invalid_spec = True  # keep serving with the last valid settings until it is fixed
            self.report("InvalidSpec", "; ".join(problems), ready=False)
            return
        if self.invalid_spec and self.nodes.health.healthy:
            self.invalid_spec = False
            self.report("Connected", self.serving(), ready=True)
        settings, _ = settings_from(new, self.node_ip, self.kubelet_port)
        self.nodes.update_settings(settings, new["spec"])
        offloading = self.offloading
        offloading.reflection.update(settings_from_spec(new["spec"].get("reflection")))
        offloading.reflection.update_local_remap(local_remap(new))
        offloading.ips.update_consent(consent(new))
        offloading.pods.home_api_server = home_api_server(new["spec"])  # for pods offloaded from now on
        self.network_changed()

    def network_changed(self) -> None:
        foreign = self.foreigns.get(*self.peering.foreign_cluster)
        if foreign is None:
            return
        problem = network_problem(foreign, self.gateway.problem())
        self.offloading.reflection.update_network(problem is not None)
        self.offloading.ips.update_network(problem)

    def health_changed(self, healthy: bool) -> None:
        not_ready = self.nodes.health.not_ready
        reason = "ProviderReachable" if healthy else (not_ready or ("ProviderUnreachable",))[0]
        message = (not_ready or ("", self.serving()))[1]
        self.report(reason, message, ready=healthy)

    def serving(self) -> str:
        names = self.nodes.names or [self.peering.node_name]
        if len(names) == 1:
            return f"virtual node {names[0]} is serving"
        return f"virtual nodes {', '.join(names)} are serving"

    # -- loops --------------------------------------------------------------------------

    async def follow_gateway(self) -> None:
        """A lapsed Lease changes nothing on the API server: its silence is noticed here, on a local clock."""
        while True:
            self.network_changed()
            await asyncio.sleep(GATEWAY_RECHECK_SECONDS)

    async def until_removed(self) -> None:
        await self.foreigns.synced.wait()
        # Deleted between connecting and the first list: the informer never saw it, so no DELETED comes.
        if self.foreigns.get(*self.peering.foreign_cluster) is None:
            self.removed.set()
        await self.removed.wait()
        namespace, name = self.peering.foreign_cluster
        # Raised inside the group so that every other loop is cancelled, and has ended, before cleanup.
        raise PeeringRemoved(f"ForeignCluster {namespace}/{name} was deleted")
