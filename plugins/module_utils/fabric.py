# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What a peering exchanges for the network fabric: a WireGuard key per side and where the provider listens.

Each side's private key stays in a Secret of its own cluster, in catamaran-fabric (the provider's out of
the tenant's reach; on both sides out of reach of the processes that need no key); only public keys
cross. A key is made once and kept, unless rotation is asked for. Each tenant of a provider gets its
own UDP port on the provider's gateway, the lowest free one from the configured first port, and keeps it.

The consumer's gateway reaches the provider's at the address the peering gives, or through a Service of the provider
(NodePort or LoadBalancer, one per tenant in catamaran-fabric, in front of the gateway pod of deployment mode): then
the address and port are read from the Service and its gateway pod's node, and published to the consumer.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import ipaddress

from ansible_collections.catamaran.federation.plugins.module_utils import fabric_keys, networks, validation
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    CORE_GROUP,
    FABRIC_KEY_FROM_CONSUMER_PREFIX,
    FABRIC_KEY_LABEL,
    FABRIC_KEY_TO_PROVIDER_PREFIX,
    FABRIC_NAMESPACE,
    FABRIC_PRIVATE_KEY,
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TYPE,
    OFFLOADING_GROUP,
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    TYPE_VIRTUAL_NODE,
    VERSION,
)
from ansible_collections.catamaran.federation.plugins.module_utils.kube import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ClusterError,
)

MODES = {"fabric": "Fabric", "flat": "Flat"}
DEFAULT_MODE = "flat"
DEFAULT_GATEWAY_PORT = 51820
# The gateway pod of deployment mode, as the controller role labels it (roles/controller/vars/deployment.yml).
GATEWAY_POD_SELECTOR = {"app.kubernetes.io/name": "catamaran", "app.kubernetes.io/component": "gateway"}
GATEWAY_SERVICE_PREFIX = "catamaran-gw-"
OFFLOADING_API = "%s/%s" % (OFFLOADING_GROUP, VERSION)
FOREIGN_CLUSTER_API = "%s/%s" % (CORE_GROUP, VERSION)


def check(params):
    """Bad input names the option, before anything changes."""
    network = params.get("network") or {}
    if network.get("mode", DEFAULT_MODE) != "fabric":
        return
    if not fabric_keys.HAS_CRYPTOGRAPHY:
        raise InvalidInput("network.mode=fabric makes WireGuard keys with the Python package cryptography; install it")
    service = network.get("gateway_service") or {}
    if not network.get("gateway_address") and not service:
        raise InvalidInput(
            "network.gateway_address (or network.gateway_service) is required with network.mode=fabric: where the "
            "consumer's gateway reaches the provider's"
        )
    port = network.get("gateway_port", DEFAULT_GATEWAY_PORT)
    if not 1 <= port <= 65535:
        raise InvalidInput("network.gateway_port: %s is not a UDP port (1-65535)" % port)
    if service:
        try:
            validation.gateway_service(service, "network.gateway_service")
        except validation.InvalidSetting as error:
            raise InvalidInput(str(error)) from None


def gateway_service_name(consumer_id):
    return GATEWAY_SERVICE_PREFIX + consumer_id


def gateway_service(consumer_id, service, listen_port, first_port):
    """The provider's Service in front of its gateway pod for one tenant's UDP port. Traffic policy Local: the tunnel
    sees the consumer's own address, and the node port answers only on the gateway's node, whose address is
    published. A first node port given, each tenant's is that plus its offset from the first gateway port (stable, so a
    firewall can name them); else the API server allocates one, kept from then on."""
    port = {"name": "wireguard", "protocol": "UDP", "port": listen_port, "targetPort": listen_port}
    if service.get("node_port"):
        port["nodePort"] = service["node_port"] + listen_port - first_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": gateway_service_name(consumer_id),
            "namespace": FABRIC_NAMESPACE,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, LABEL_REMOTE_CLUSTER_ID: consumer_id},
        },
        "spec": {
            "type": service["type"],
            "externalTrafficPolicy": "Local",
            "selector": dict(GATEWAY_POD_SELECTOR),
            "ports": [port],
        },
    }


def node_address(node):
    """Where a peer reaches a node: its ExternalIP, else its InternalIP."""
    addresses = (node.get("status") or {}).get("addresses") or []
    for kind in ("ExternalIP", "InternalIP"):
        for address in addresses:
            if address.get("type") == kind and address.get("address"):
                return address["address"]
    return None


def load_balancer_address(service):
    for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
        if ingress.get("ip") or ingress.get("hostname"):
            return ingress.get("ip") or ingress.get("hostname")
    return None


def _remapped(pairs):
    return [{"podCIDR": real, "seenAs": seen} for real, seen in pairs if real != seen]


class Exchange:
    """The fabric's objects of one peering on both clusters, from what they hold now."""

    def __init__(self, consumer, provider, consumer_id, provider_id, tenant_namespace, warn=None):
        self.consumer, self.provider = consumer, provider
        self.warn = warn or (lambda message: None)
        # The module's check mode, set by the peering's run: a check-mode run may plan a gateway not running yet (the
        # controller role's dry run started none); a real run's plan must find it, so that it fails before it changes
        # anything.
        self.check_mode = False
        self.consumer_id, self.provider_id = consumer_id, provider_id
        self.tenant_namespace = tenant_namespace

    @property
    def consumer_secret(self):
        return FABRIC_KEY_TO_PROVIDER_PREFIX + self.provider_id

    @property
    def provider_secret(self):
        return FABRIC_KEY_FROM_CONSUMER_PREFIX + self.consumer_id

    def converge(self, changes, params, consumer_ranges, provider_ranges):
        """Apply the keys; returns what to write: the ResourceOffer's spec.network, the ForeignCluster's
        spec.networking, and the ranges behind the consumer's gateway as the provider sees them (its
        consumerPodCIDRs): the consumer's pods, then its other providers' pods, reached through the consumer."""
        network = params.get("network") or {}
        mode = network.get("mode", DEFAULT_MODE)
        if mode != "fabric":
            self.remove(changes)
            return {"mode": MODES[mode]}, {"mode": MODES[mode]}, list(consumer_ranges)
        rotate = bool(network.get("rotate_keys"))
        consumer_key = self._key(self.consumer, self.consumer_secret, rotate)
        provider_key = self._key(self.provider, self.provider_secret, rotate)
        for cluster, name, key in (
            (self.consumer, self.consumer_secret, consumer_key),
            (self.provider, self.provider_secret, provider_key),
        ):
            changes.ensure(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FABRIC_NAMESPACE}})
            changes.apply(cluster, self._secret(name, key))
            changes.delete(cluster, "v1", "Secret", name, SYSTEM_NAMESPACE)  # moved: release 0.2.0 kept it there
        first_port = network.get("gateway_port", DEFAULT_GATEWAY_PORT)
        port = self._port(first_port)
        endpoint = self._endpoint(changes, network, port, first_port, params.get("wait_timeout"))
        provider_seen, consumer_seen, others_reachable = self._remaps(params, consumer_ranges, provider_ranges)
        offer_network = {
            "mode": "Fabric",
            "gateway": {"listenPort": port, "publicKey": fabric_keys.public_key(consumer_key)},
        }
        foreign_networking = {
            "mode": "Fabric",
            "gateway": {
                "endpoint": endpoint,
                "publicKey": fabric_keys.public_key(provider_key),
            },
        }
        if _remapped(provider_seen):
            offer_network["localPodCIDRRemap"] = _remapped(provider_seen)
            if not params.get("pod_cidr_remap"):
                foreign_networking["podCIDRRemap"] = _remapped(provider_seen)[0]["seenAs"]
        if _remapped(consumer_seen):
            foreign_networking["localPodCIDRRemap"] = _remapped(consumer_seen)
        return offer_network, foreign_networking, [pair[1] for pair in consumer_seen] + others_reachable

    def _remaps(self, params, consumer_ranges, provider_ranges):
        """How each side sees the other's pods: itself, unless it overlaps what that side already uses; then a free
        range of the pool, kept from one run to the next. The consumer keeps every range it hands out apart: its
        view of each provider, and each provider's view of it, since a provider also sees the consumer's other
        providers (at the consumer's view of them) through the consumer's gateway."""
        foreign = self.consumer.get(FOREIGN_CLUSTER_API, "ForeignCluster", self.provider_id, SYSTEM_NAMESPACE) or {}
        networking = (foreign.get("spec") or {}).get("networking") or {}
        consumer_taken = list(consumer_ranges) + reserved_ranges(self.consumer)
        others_seen = []  # the consumer's other fabric providers, as the consumer sees them
        for other in self.consumer.list(FOREIGN_CLUSTER_API, "ForeignCluster", namespace=SYSTEM_NAMESPACE):
            if other["metadata"]["name"] == self.provider_id:
                continue
            other_networking = (other.get("spec") or {}).get("networking") or {}
            # Where the consumer agreed to see that provider (its consent or remap range), else where it does now.
            seen = networks.consented_view(other_networking) or (
                ((other.get("status") or {}).get("network") or {}).get("remotePodCIDRs") or []
            )
            consumer_taken += seen + [e["seenAs"] for e in other_networking.get("localPodCIDRRemap") or []]
            reach = (params.get("network") or {}).get("reach_peers")
            if other_networking.get("mode") == "Fabric" and (reach is None or other["metadata"]["name"] in reach):
                others_seen += seen
        if params.get("pod_cidr_remap"):
            provider_seen = [(real, params["pod_cidr_remap"]) for real in provider_ranges[:1]]
        else:
            kept = [
                (real, networking["podCIDRRemap"]) for real in provider_ranges[:1] if networking.get("podCIDRRemap")
            ]
            provider_seen = self._seen(provider_ranges, consumer_taken, kept, "the provider's")
        provider_taken = list(provider_ranges) + reserved_ranges(self.provider)
        for offer in self.provider.list(OFFLOADING_API, "ResourceOffer"):
            if (
                offer["metadata"]["name"] == RESOURCE_OFFER_NAME
                and offer["metadata"]["namespace"] != self.tenant_namespace
            ):
                provider_taken += (offer.get("spec") or {}).get("consumerPodCIDRs") or []
        others_reachable = networks.reachable_through_consumer(others_seen, provider_taken)
        kept = [(e["podCIDR"], e["seenAs"]) for e in networking.get("localPodCIDRRemap") or []]
        consumer_seen = self._seen(consumer_ranges, provider_taken + others_reachable, kept, "the consumer's")
        return provider_seen, consumer_seen, others_reachable

    @staticmethod
    def _seen(ranges, taken, kept, whose):
        try:
            return networks.seen_as(ranges, taken, kept)
        except ValueError as error:
            raise InvalidInput("%s pod ranges: %s" % (whose, error)) from None

    def _endpoint(self, changes, network, port, first_port, timeout):
        """Where the consumer's gateway reaches this tenant's port: the given address, or the Service's."""
        service = network.get("gateway_service")
        if not service:
            self._remove_service(changes)
            return "%s:%s" % (network["gateway_address"], port)
        live = changes.apply(self.provider, gateway_service(self.consumer_id, service, port, first_port))
        where = "%s: Service %s/%s" % (self.provider.label, FABRIC_NAMESPACE, gateway_service_name(self.consumer_id))
        if service["type"] == "LoadBalancer":
            address = network.get("gateway_address") or self._load_balancer_address(changes, live, timeout, where)
            return "%s:%s" % (address, port)
        node_port = ((live.get("spec") or {}).get("ports") or [{}])[0].get("nodePort")
        if not node_port:  # a dry run that allocates nothing: the port comes with the Service
            changes.note("%s: publish the node port the API server allocates" % where)
            node_port = port
        address = network.get("gateway_address") or self._gateway_node_address(changes, where)
        return "%s:%s" % (address, node_port)

    def _load_balancer_address(self, changes, live, timeout, where):
        address = load_balancer_address(live)
        if address:
            return address
        if changes.check_mode:
            changes.note("%s: publish its load balancer's address once it has one" % where)
            return "pending.invalid"
        name = gateway_service_name(self.consumer_id)
        done, items = self.provider.watch_list_until(
            "v1",
            "Service",
            FABRIC_NAMESPACE,
            lambda services: any(load_balancer_address(s) for s in services),
            timeout,
            fields="metadata.name=%s" % name,
        )
        if not done:
            raise InvalidInput(
                "%s (LoadBalancer) has no address after %ss: does the cluster have a load balancer controller? "
                "(or give network.gateway_address)" % (where, timeout)
            )
        return load_balancer_address(items[0])

    def _gateway_node_address(self, changes, where):
        """The address of the node the gateway pod runs on: the node port answers there (traffic policy Local)."""
        selector = ",".join("%s=%s" % item for item in sorted(GATEWAY_POD_SELECTOR.items()))
        pods = self.provider.list("v1", "Pod", namespace=FABRIC_NAMESPACE, labels=selector)
        nodes = sorted(
            {
                pod["spec"]["nodeName"]
                for pod in pods
                if (pod.get("spec") or {}).get("nodeName")
                and (pod.get("status") or {}).get("phase") == "Running"
                and not pod["metadata"].get("deletionTimestamp")
            }
        )
        if len(nodes) == 1:
            node = self.provider.get("v1", "Node", nodes[0])
            address = node_address(node or {})
            if address:
                return address
            raise InvalidInput("%s (NodePort): the gateway's node %s reports no address" % (where, nodes[0]))
        problem = (
            "no gateway pod runs in %s (NodePort needs the gateway as a pod: controller_mode deployment with "
            "controller_gateway)" % FABRIC_NAMESPACE
            if not nodes
            else "gateway pods run on several nodes (%s)" % ", ".join(nodes)
        )
        published = self._published_address()
        if published:  # a gateway stopped or moving: the consumer keeps what it has until one runs again
            self.warn("%s (NodePort): %s; the address published before, %s, is kept" % (where, problem, published))
            return published
        if self.check_mode:
            changes.note("%s: publish the gateway node's address once %s" % (where, "it runs" if not nodes else "one"))
            return "pending.invalid"
        raise InvalidInput("%s (NodePort): %s; or give network.gateway_address" % (where, problem))

    def _published_address(self):
        foreign = self.consumer.get(FOREIGN_CLUSTER_API, "ForeignCluster", self.provider_id, SYSTEM_NAMESPACE) or {}
        gateway = (((foreign.get("spec") or {}).get("networking") or {}).get("gateway")) or {}
        return gateway.get("endpoint", "").rpartition(":")[0]

    def _remove_service(self, changes):
        if self.provider is not None:
            changes.delete(self.provider, "v1", "Service", gateway_service_name(self.consumer_id), FABRIC_NAMESPACE)

    def remove(self, changes):
        for cluster, name in ((self.consumer, self.consumer_secret), (self.provider, self.provider_secret)):
            if cluster is not None:
                for namespace in (FABRIC_NAMESPACE, SYSTEM_NAMESPACE):
                    changes.delete(cluster, "v1", "Secret", name, namespace)
        self._remove_service(changes)

    def _key(self, cluster, name, rotate):
        """The key kept (where it is now, else where release 0.2.0 kept it: the peer keeps its public key), else a new
        one (none, or damaged: as on rotation)."""
        for namespace in () if rotate else (FABRIC_NAMESPACE, SYSTEM_NAMESPACE):
            current = cluster.get("v1", "Secret", name, namespace) or {}
            encoded = (current.get("data") or {}).get(FABRIC_PRIVATE_KEY)
            if encoded:
                key = base64.b64decode(encoded).decode().strip()
                try:
                    fabric_keys.public_key(key)
                    return key
                except ValueError:
                    pass
        return fabric_keys.generate_private_key()

    def _secret(self, name, key):
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "namespace": FABRIC_NAMESPACE, "labels": {FABRIC_KEY_LABEL: "true"}},
            "data": {FABRIC_PRIVATE_KEY: base64.b64encode(key.encode()).decode()},
        }

    def _port(self, first):
        """This tenant's port if it has one, else the lowest one no other tenant of the provider holds."""
        taken = {}
        for offer in self.provider.list(OFFLOADING_API, "ResourceOffer"):
            if offer["metadata"]["name"] != RESOURCE_OFFER_NAME:
                continue
            port = (((offer.get("spec") or {}).get("network") or {}).get("gateway") or {}).get("listenPort")
            if port:
                taken[offer["metadata"]["namespace"]] = port
        if self.tenant_namespace in taken:
            return taken[self.tenant_namespace]
        used = set(taken.values())
        port = first
        while port in used:
            port += 1
        if port > 65535:
            raise InvalidInput("no UDP port left on the provider's gateway from network.gateway_port=%s" % first)
        return port


def reserved_ranges(cluster):
    """What a cluster uses besides its pods, which a range routed into its tunnel must never cover (else the gateway
    would send its Service or node traffic to the peer): its Service ranges and its real nodes' addresses."""
    try:
        service_cidrs = cluster.list("networking.k8s.io/v1", "ServiceCIDR")
        ranges = [cidr for obj in service_cidrs for cidr in (obj.get("spec") or {}).get("cidrs") or []]
    except ClusterError as error:
        if error.status != 404:
            raise
        # Before Kubernetes 1.33 the range is only in kube-apiserver's flags: its first address is all that shows.
        kubernetes = cluster.get("v1", "Service", "kubernetes", "default") or {}
        ranges = list((kubernetes.get("spec") or {}).get("clusterIPs") or [])
    for node in cluster.list("v1", "Node", labels="%s!=%s" % (LABEL_TYPE, TYPE_VIRTUAL_NODE)):
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") in ("InternalIP", "ExternalIP"):
                ranges.append(address["address"])
    return [str(ipaddress.ip_network(entry, strict=False)) for entry in ranges]
