"""The gateway: one process per cluster, on the node whose network carries the cluster's tunnels.

It reads what the peering wrote on this cluster and keeps the host's tunnels equal to it:
- as a consumer, one tunnel per ForeignCluster in mode Fabric: this side's key (Secret
  `catamaran-fabric/catamaran-fabric-to-<provider>`), the provider's gateway and public key (`spec.networking.gateway`),
  the provider's pod ranges as this cluster sees them (`status.network.remotePodCIDRs`, written by the
  virtual kubelet from the provider's announced ranges);
- as a provider, one tunnel per tenant whose ResourceOffer is in mode Fabric: this side's key (Secret
  `catamaran-fabric-from-<consumer>`), the port to listen on and the consumer's public key
  (`spec.network.gateway`), the consumer's announced pod ranges (`spec.consumerPodCIDRs`), and the
  tenant's pods here, the only ones its tunnel may open connections to.

Both ways a tunnel opens connections only to what the peering shares. Through a tenant's tunnel: the pods of
that tenant here. Through a provider's tunnel: the pods of this cluster's namespaces extended to that provider
(where its offloaded pods and reflected Services lead, the *service offloading* case included), and the other
providers' pods this consumer relays to. Replies to connections opened from this side always pass.

Every change lands on one work-queue key, so the host is converged by one worker from the caches. The
health of each consumer-side tunnel (the provider's keepalives arriving) is the ForeignCluster's
NetworkReady condition. A gateway that is gone writes no condition: its Lease (GATEWAY_LEASE), renewed while
it runs, tells the virtual kubelets so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import logging
import socket
import time
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod, Secret

from ..constants import (
    FABRIC_KEY_FROM_CONSUMER_PREFIX,
    FABRIC_KEY_LABEL,
    FABRIC_KEY_TO_PROVIDER_PREFIX,
    FABRIC_NAMESPACE,
    FABRIC_PRIVATE_KEY,
    GATEWAY_LEASE,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_CATAMARAN,
    NETWORK_READY_CONDITION,
    SYSTEM_NAMESPACE,
    TERMINAL_PHASES,
)
from ..kube.informer import Informer, changed, enqueue
from ..kube.ops import patch_status
from ..kube.resources import ForeignCluster, NamespaceOffloading, ResourceOffer
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..networks import remap_pairs
from ..objects import as_dict, condition, set_condition
from . import keys
from .dataplane import Dataplane, DataplaneError
from .peerings import consumer_behind, provider_behind, routed_ranges
from .plan import KEEPALIVE_SECONDS, Tunnel, check_remap, interface_name

log = logging.getLogger(__name__)

DATAPLANE = "dataplane"
# A tunnel is up while the peer's keepalives (every KEEPALIVE_SECONDS when idle) keep arriving.
HEALTH_WINDOW_SECONDS = 3 * KEEPALIVE_SECONDS
# The gateway's Lease: renewed every KEEPALIVE_SECONDS, lapsed after the same window as a silent tunnel.
LEASE_DURATION_SECONDS = HEALTH_WINDOW_SECONDS


def _pod_address(pod) -> tuple[str | None, str | None]:
    """(the tenant a provider's pod runs for, or None; its own IP, or None: none yet, finished, or the node's)."""
    labels = pod.metadata.labels or {}
    tenant = labels.get(LABEL_ORIGIN_CLUSTER_ID) if labels.get(LABEL_MANAGED_BY) == MANAGED_BY_CATAMARAN else None
    own_network = not (pod.spec and pod.spec.hostNetwork)
    # A finished pod keeps its IP in its status while the object stays: the address may be another pod's by now.
    running = pod.status is not None and pod.status.phase not in TERMINAL_PHASES
    return tenant, (pod.status.podIP if running and own_network else None)


def _extended_to(offloading) -> frozenset[str]:
    """The providers a namespace's twins are on: Ready, or Draining (its offloaded pods still going)."""
    clusters = ((offloading.get("status") or {}).get("clusters")) or []
    return frozenset(c.get("clusterID") for c in clusters if c.get("phase") in ("Ready", "Draining"))


def _remapped(network: dict) -> tuple[tuple[str, str], ...]:
    """This cluster's pod ranges the peer sees elsewhere (`localPodCIDRRemap`, written at peering)."""
    pairs = remap_pairs(network.get("localPodCIDRRemap"))
    for real, seen in pairs:
        check_remap(real, seen)
    return pairs


def _private_key(secret) -> str | None:
    encoded = (secret.data or {}).get(FABRIC_PRIVATE_KEY)
    return base64.b64decode(encoded).decode().strip() if encoded else None


class Gateway:
    def __init__(self, client: AsyncClient, dataplane: Dataplane, namespace: str = SYSTEM_NAMESPACE):
        self.client = client
        self.dataplane = dataplane
        self.namespace = namespace
        self.foreigns = Informer(
            client, ForeignCluster, name="foreign-clusters", namespace=namespace, transform=as_dict
        )
        self.offers = Informer(client, ResourceOffer, name="resource-offers", transform=as_dict)
        key_secrets = {FABRIC_KEY_LABEL: "true"}
        self.keys = Informer(
            client, Secret, name="fabric-keys", namespace=FABRIC_NAMESPACE, labels=key_secrets, transform=_private_key
        )
        # Every pod: a provider's tenant pods and a consumer's own, the destinations each side's tunnels open to.
        self.pods = Informer(client, Pod, name="pods", transform=_pod_address)
        self.offloadings = Informer(
            client, NamespaceOffloading, name="namespace-offloadings", transform=lambda o: _extended_to(as_dict(o))
        )
        self.queue = WorkQueue("fabric", self._reconcile, workers=1)
        for informer in self._informers:
            informer.on_change(enqueue(self.queue, key=lambda _: DATAPLANE, when=changed))
        self.problems: dict[str, str] = {}  # consumer-side peering -> why its tunnel is not configured
        self.unrouted: dict[str, tuple[str, ...]] = {}  # provider -> its ranges left out of its tunnel, and why
        self._last_rx: dict[str, tuple[int, float]] = {}  # interface -> (bytes received, when they last grew)

    @property
    def _informers(self) -> tuple[Informer, ...]:
        return (self.foreigns, self.offers, self.keys, self.pods, self.offloadings)

    def tasks(self):
        loops = [self.queue.run(), self._health_loop(), self._lease_loop(), self._until_stopped()]
        return [*(informer.run() for informer in self._informers), *loops]

    async def _until_stopped(self) -> None:
        """A gateway stopped on purpose (SIGTERM: teardown, uninstall) leaves nothing of the fabric on its host, nor
        its Lease; one that dies loses its userspace tunnels with it, its Lease lapses, and its restart builds them
        again."""
        try:
            await asyncio.Event().wait()
        finally:
            log.info("stopping: removing the tunnels, routes and rules")
            await self.dataplane.remove_all()
            with contextlib.suppress(ApiError, OSError, TimeoutError):
                await asyncio.wait_for(self.client.delete(Lease, GATEWAY_LEASE, namespace=FABRIC_NAMESPACE), 5)

    async def _lease_loop(self) -> None:
        holder = socket.gethostname()
        while True:
            lease = Lease(
                metadata=ObjectMeta(name=GATEWAY_LEASE, namespace=FABRIC_NAMESPACE),
                spec=LeaseSpec(
                    holderIdentity=holder,
                    leaseDurationSeconds=LEASE_DURATION_SECONDS,
                    renewTime=datetime.datetime.now(datetime.UTC),
                ),
            )
            try:
                await self.client.apply(lease, force=True)
            except (ApiError, OSError) as error:
                log.warning("cannot renew the gateway's Lease", extra=fields(error=str(error)[:300]))
            await asyncio.sleep(KEEPALIVE_SECONDS)

    # -- what the peerings ask for ---------------------------------------------------------------

    def _key(self, name: str) -> str | None:
        return self.keys.cache.get((FABRIC_NAMESPACE, name))

    def _tunnel(
        self, peer: str, direction: str, private_key: str, network: dict, remote: tuple[str, ...], **ends: Any
    ) -> Tunnel:
        """The tunnel `to-<provider>` or `from-<consumer>`: this side's key, the peer's public key and this cluster's
        remapped ranges from the peering's network section (a ForeignCluster's `spec.networking`, a ResourceOffer's
        `spec.network`), the peer's ranges; `ends` adds the endpoint or listening port. ValueError on bad input."""
        return Tunnel(
            peering=peer,
            interface=interface_name(self.dataplane.prefix, f"{direction}-{peer}"),
            private_key=keys.checked_private_key(private_key),
            peer_public_key=keys.check_public_key(network["gateway"]["publicKey"]),
            remote_cidrs=remote,
            remapped=_remapped(network),
            **ends,
        )

    def consumer_tunnels(self) -> list[Tunnel]:
        tunnels = []
        self.problems = {}
        foreigns = list(self.foreigns.cache.values())
        routed, unrouted = routed_ranges(provider_behind(foreign) for foreign in foreigns)
        if unrouted != self.unrouted:
            for provider, refused in unrouted.items():
                why = "; ".join(refused)
                log.warning("provider pod ranges not routed", extra=fields(provider=provider, refused=why))
            self.unrouted = unrouted
        for foreign in foreigns:
            if (behind := provider_behind(foreign)) is None:
                continue
            provider, remote = behind.provider, routed[behind.provider]
            networking = foreign["spec"]["networking"]
            gateway = networking.get("gateway") or {}
            secret = FABRIC_KEY_TO_PROVIDER_PREFIX + provider
            private_key = self._key(secret)
            if not private_key:
                self.problems[provider] = f"Secret {FABRIC_NAMESPACE}/{secret} (this side's key) is missing"
                continue
            if not gateway.get("endpoint") or not gateway.get("publicKey"):
                self.problems[provider] = "spec.networking.gateway names no endpoint or public key of the provider"
                continue
            try:
                tunnels.append(
                    self._tunnel(provider, "to", private_key, networking, remote, peer_endpoint=gateway["endpoint"])
                )
            except ValueError as error:  # one peering's bad input leaves the others' tunnels alone
                self.problems[provider] = str(error)
        return [
            dataclasses.replace(tunnel, allowed_destinations=self._shared_with(tunnel.peering)) for tunnel in tunnels
        ]

    def _shared_with(self, provider: str) -> tuple[str, ...]:
        """This cluster's pods in the namespaces extended to `provider`, wherever they run: here, or offloaded to
        another provider (their IP as this cluster shows it, which is where that provider's pods send). Never another
        provider's whole range: a pod there of a namespace not extended to `provider` is none of its business."""
        extended = {namespace for (namespace, _), providers in self.offloadings.cache.items() if provider in providers}
        return tuple(
            sorted(
                address for (namespace, _), (_, address) in self.pods.cache.items() if address and namespace in extended
            )
        )

    def provider_tunnels(self) -> list[Tunnel]:
        pods_by_tenant: dict[str, list[str]] = {}
        for origin, address in self.pods.cache.values():
            if origin and address:
                pods_by_tenant.setdefault(origin, []).append(address)
        tunnels = []
        for offer in self.offers.cache.values():
            if (behind := consumer_behind(offer)) is None:
                continue
            consumer, remote = behind
            network = offer["spec"]["network"]
            gateway = network.get("gateway") or {}
            secret = FABRIC_KEY_FROM_CONSUMER_PREFIX + consumer
            private_key = self._key(secret)
            if not private_key or not gateway.get("publicKey") or not gateway.get("listenPort"):
                log.warning(
                    "tenant tunnel not configured",
                    extra=fields(consumer=consumer, key_secret=secret, has_key=bool(private_key)),
                )
                continue
            try:
                tunnels.append(
                    self._tunnel(
                        consumer,
                        "from",
                        private_key,
                        network,
                        remote,
                        listen_port=int(gateway["listenPort"]),
                        allowed_destinations=tuple(sorted(pods_by_tenant.get(consumer, []))),
                    )
                )
            except ValueError as error:
                log.warning("tenant tunnel not configured", extra=fields(consumer=consumer, problem=str(error)))
        return tunnels

    async def _reconcile(self, key: str) -> None:
        for informer in self._informers:
            await informer.synced.wait()
        tunnels = self.consumer_tunnels() + self.provider_tunnels()
        try:
            await self.dataplane.apply(tunnels)
        except (DataplaneError, ValueError) as error:
            log.error("cannot converge the tunnels", extra=fields(error=str(error)[:500]))
            raise

    # -- health --------------------------------------------------------------------------------

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_SECONDS)
            if not self.foreigns.synced.is_set():
                continue
            try:
                await self._report_health()
            except (ApiError, DataplaneError) as error:
                log.warning("cannot report tunnel health", extra=fields(error=str(error)[:300]))

    async def _report_health(self) -> None:
        present = await self.dataplane.interfaces()
        tunnels = {tunnel.peering: tunnel for tunnel in self.consumer_tunnels()}
        if any(tunnel.interface not in present for tunnel in tunnels.values()):
            self.queue.add(DATAPLANE)  # a userspace tunnel died with its process: build it again
        for foreign in list(self.foreigns.cache.values()):
            if (behind := provider_behind(foreign)) is None:
                continue
            provider = behind[0]
            tunnel = tunnels.get(provider)
            if tunnel is None:
                wanted = ("False", "TunnelNotConfigured", self.problems.get(provider, "no tunnel configured"))
            elif tunnel.interface not in present:
                wanted = ("False", "TunnelDown", f"interface {tunnel.interface} is not up")
            else:
                wanted = await self._tunnel_state(tunnel)
            await self._set_condition(foreign, *wanted)

    async def _tunnel_state(self, tunnel: Tunnel) -> tuple[str, str, str]:
        traffic = (await self.dataplane.traffic(tunnel.interface)).get(tunnel.peer_public_key)
        now = time.monotonic()
        received = traffic.received_bytes if traffic else 0
        last, since = self._last_rx.get(tunnel.interface, (-1, now))
        if received != last:
            since = now if received > 0 else since
            self._last_rx[tunnel.interface] = (received, since)
        if traffic is None or traffic.latest_handshake == 0:
            return "False", "NoHandshake", f"no handshake with the provider's gateway {tunnel.peer_endpoint} yet"
        if received == 0 or now - since > HEALTH_WINDOW_SECONDS:
            return (
                "False",
                "TunnelSilent",
                f"nothing received from the provider's gateway {tunnel.peer_endpoint} for"
                f" {HEALTH_WINDOW_SECONDS} s (its keepalives come every {KEEPALIVE_SECONDS} s)",
            )
        return "True", "TunnelUp", f"tunnel {tunnel.interface} to {tunnel.peer_endpoint} carries traffic"

    async def _set_condition(self, foreign: dict, status: str, reason: str, message: str) -> None:
        current = foreign.get("status") or {}
        previous = condition(current, NETWORK_READY_CONDITION)
        if previous and (previous["status"], previous.get("reason"), previous.get("message")) == (
            status,
            reason,
            message,
        ):
            return
        conditions = set_condition(current.get("conditions") or [], NETWORK_READY_CONDITION, status, reason, message)
        await patch_status(self.client, ForeignCluster, foreign["metadata"], {"conditions": conditions})
        name = foreign["metadata"]["name"]
        log.info("tunnel health", extra=fields(foreign_cluster=name, status=status, reason=reason))


def gateway_tasks(
    client: AsyncClient, interface_prefix: str, namespace: str = SYSTEM_NAMESPACE, wireguard_go: str = "wireguard-go"
):
    gateway = Gateway(client, Dataplane(interface_prefix, wireguard_go), namespace)
    return gateway.tasks()
