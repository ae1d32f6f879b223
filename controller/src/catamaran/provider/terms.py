"""The provider's terms applied to what a tenant writes: its pods, its twin namespaces and their guards. Pure.

Pod specs are allow-listed, not deny-listed: every field of a ShadowPod's pod spec is allowed, rewritten or
refused here, and a field this table does not know (one a newer Kubernetes adds) is refused, so no new field
reopens a hole. What the tenant writes directly (Services, EndpointSlices, Secrets) is held to the same terms by
the ValidatingAdmissionPolicy of `tenancy.py`, which reads them from the twin namespace's annotations written
here. docs/tenant-terms.md has the whole table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .. import quantities
from ..constants import (
    ANNOTATION_ALLOWED_INGRESS_ANNOTATIONS,
    ANNOTATION_ALLOWED_INGRESS_CLASSES,
    ANNOTATION_ALLOWED_INGRESS_HOSTS,
    ANNOTATION_ALLOWED_LOAD_BALANCER_CLASSES,
    ANNOTATION_ALLOWED_SERVICE_TYPES,
    ANNOTATION_ALLOWED_STORAGE_CLASSES,
    ANNOTATION_ENDPOINT_RANGES,
    CLUSTER_DNS_NAMESPACE,
    CLUSTER_DNS_POD_LABELS,
    LABEL_MANAGED_BY,
    MANAGED_BY_CATAMARAN,
    TENANT_TERMS_NAME,
)
from ..tenancy import annotation_allowed

ALLOWED = "allowed"
REWRITTEN = "rewritten"
REFUSED = "refused"

# Every PodSpec field (Kubernetes v1.37's, as lightkube-models knows them; a unit test keeps the two in step) and
# what the provider does with it in a tenant's pod.
POD_SPEC_FIELDS = {
    "activeDeadlineSeconds": ALLOWED,
    "affinity": ALLOWED,  # narrows placement only: the provider's node selector is added to it
    # false, unless the pod asks for the provider's API server: then a token of the twin's default ServiceAccount,
    # which the provider binds to nothing (the consumer's token is reflected and mounted otherwise)
    "automountServiceAccountToken": REWRITTEN,
    "containers": ALLOWED,  # Pod Security level; missing requests and limits get the terms' defaults
    "dnsConfig": ALLOWED,
    "dnsPolicy": ALLOWED,
    "enableServiceLinks": ALLOWED,
    "ephemeralContainers": ALLOWED,
    "evictionResponders": REFUSED,  # newer than this table's review: refused until reviewed
    "hostAliases": ALLOWED,
    "hostIPC": ALLOWED,  # Pod Security level (baseline and restricted refuse it)
    "hostNetwork": ALLOWED,  # Pod Security level
    "hostPID": ALLOWED,  # Pod Security level
    "hostUsers": ALLOWED,
    "hostname": ALLOWED,
    "hostnameOverride": ALLOWED,  # the pod's own hostname
    "imagePullSecrets": ALLOWED,  # names Secrets of its own twin only
    "initContainers": ALLOWED,  # as containers
    "nodeName": REFUSED,  # the provider's scheduler places tenant pods
    "nodeSelector": REWRITTEN,  # the provider's placement wins over the tenant's keys
    "os": ALLOWED,
    "overhead": REWRITTEN,  # removed: set by the provider's RuntimeClass admission only
    "preemptionPolicy": REWRITTEN,  # removed: the priority class sets it
    "priority": REWRITTEN,  # removed: the priority class sets it
    "priorityClassName": REWRITTEN,  # the terms' class unless the pod names one the terms allow
    "readinessGates": ALLOWED,
    "resourceClaims": REFUSED,  # claims reach the provider's devices
    "resources": ALLOWED,  # pod-level requests count toward the quota as much as the containers'
    "restartPolicy": ALLOWED,
    "runtimeClassName": REFUSED,  # a runtime class picks the provider's handler (and its privileges)
    "schedulerName": REWRITTEN,  # removed: the provider's default scheduler
    "schedulingGates": REWRITTEN,  # removed: the gates were the consumer's to lift
    "schedulingGroup": REFUSED,  # newer than this table's review: refused until reviewed
    "securityContext": ALLOWED,  # Pod Security level
    "serviceAccount": REWRITTEN,  # removed (deprecated alias)
    "serviceAccountName": REWRITTEN,  # default: the provider mounts no token of its own
    "setHostnameAsFQDN": ALLOWED,
    "shareProcessNamespace": ALLOWED,
    "subdomain": ALLOWED,
    "terminationGracePeriodSeconds": REWRITTEN,  # at most the terms' maximum, so deletion and un-peering end
    "tolerations": ALLOWED,  # the provider's placement tolerations are added; its selector still decides
    "topologySpreadConstraints": ALLOWED,
    "volumes": ALLOWED,  # Pod Security level (hostPath refused below privileged)
}
REMOVED = ("overhead", "preemptionPolicy", "priority", "schedulerName", "schedulingGates", "serviceAccount")


def refused_fields(pod_spec: dict) -> list[str]:
    """The pod spec's fields the terms refuse, or that the table does not know (sorted)."""
    return sorted(
        name
        for name, value in pod_spec.items()
        if value not in (None, [], {}) and POD_SPEC_FIELDS.get(name, REFUSED) == REFUSED
    )


def pod_affinity_reaches_out(pod_spec: dict) -> bool:
    """Pod (anti-)affinity terms naming other namespaces: a tenant's pod may only relate to pods of its own twin."""
    affinity = pod_spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            t.get("podAffinityTerm") or {} for t in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms):
            return True
    return False


def tenant_pod_spec(pod_spec: dict, terms) -> dict:
    """The spec the provider runs for a tenant's pod: rewritten fields set, container defaults filled in.

    `terms` is the tenant's TenantTerms (provider/offers.py). Refused fields are left for `refused_fields` to name.
    """
    spec = {key: value for key, value in pod_spec.items() if key not in REMOVED}
    spec["automountServiceAccountToken"] = pod_spec.get("automountServiceAccountToken") is True
    spec["serviceAccountName"] = "default"
    named = spec.get("priorityClassName")
    spec["priorityClassName"] = named if named in terms.allowed_priority_classes else terms.priority_class
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = min(grace, terms.max_termination_grace_seconds)
    requests, limits = dict(terms.container_requests), dict(terms.container_limits)
    for kind in ("initContainers", "containers"):
        if spec.get(kind):
            spec[kind] = [with_defaults(container, requests, limits) for container in spec[kind]]
    return spec


def tenant_pod_annotations(annotations: dict | None, terms) -> dict:
    """The annotations of a tenant's pod the provider's pod keeps: only those the terms allow."""
    return {
        key: value
        for key, value in (annotations or {}).items()
        if annotation_allowed(key, terms.allowed_pod_annotations)
    }


def with_defaults(container: dict, requests: dict, limits: dict) -> dict:
    """The container with missing requests and limits filled in as a LimitRange would: a request defaults to its
    limit when one is set, a default limit is raised to the request so the pair stays valid."""
    resources = container.get("resources") or {}
    own_requests = dict(resources.get("requests") or {})
    own_limits = dict(resources.get("limits") or {})
    for resource, default in requests.items():
        if resource not in own_requests:
            own_requests[resource] = own_limits.get(resource, default)
    for resource, default in limits.items():
        if resource not in own_limits:
            request = own_requests.get(resource)
            larger = request is not None and quantities.parse(request) > quantities.parse(default)
            own_limits[resource] = request if larger else default
    return {**container, "resources": {**resources, "requests": own_requests, "limits": own_limits}}


def twin_name_allowed(twin: str, consumer: str, policy: str) -> bool:
    """Suffixed: only `<name>-<consumer-id>` (the DefaultName strategy); Any: same and selected names too."""
    return policy == "Any" or (twin.endswith(f"-{consumer}") and len(twin) > len(consumer) + 1)


def endpoint_ranges(consumer_cidrs: Iterable[str], provider_cidrs: Iterable[str]) -> tuple[list[str], str]:
    """The ranges a tenant's EndpointSlice addresses may point into, and why some announced ones are not.

    They are the consumer's announced pod ranges, less any that overlap the provider's own pod ranges: an address
    there could be one of the provider's pods or another tenant's (a pivot), so with overlapping ranges none are
    allowed until the network fabric remaps them.
    """
    own = [ipaddress.ip_network(c, strict=False) for c in provider_cidrs]
    allowed, refused = [], []
    for text in consumer_cidrs:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            refused.append(f"{text} (not a CIDR)")
            continue
        clash = [str(o) for o in own if o.version == network.version and o.overlaps(network)]
        if clash:
            refused.append(f"{network} (overlaps the provider's pod range {', '.join(clash)})")
        else:
            allowed.append(str(network))
    problem = f"consumer pod ranges not allowed as endpoints: {'; '.join(refused)}" if refused else ""
    return sorted(allowed), problem


def lent_storage_classes(terms, default_classes: Iterable[str]) -> tuple[str, ...]:
    """The classes a tenant's claims may name: those the terms list, else the provider's default classes (what a
    claim naming none gets), so a tenant never picks a class the provider keeps for itself."""
    return tuple(sorted(terms.storage_classes or default_classes))


def twin_annotations(terms, ranges: list[str], default_storage_classes: Iterable[str] = ()) -> dict[str, str]:
    """What the admission policy reads from a twin namespace: the terms for what the tenant writes there."""
    return {
        ANNOTATION_ALLOWED_STORAGE_CLASSES: ",".join(lent_storage_classes(terms, default_storage_classes)),
        ANNOTATION_ALLOWED_SERVICE_TYPES: ",".join(terms.service_types),
        ANNOTATION_ALLOWED_LOAD_BALANCER_CLASSES: ",".join(terms.load_balancer_classes),
        ANNOTATION_ENDPOINT_RANGES: ",".join(ranges),
        ANNOTATION_ALLOWED_INGRESS_CLASSES: ",".join(terms.ingress_classes),
        ANNOTATION_ALLOWED_INGRESS_HOSTS: ",".join(terms.ingress_hosts),
        ANNOTATION_ALLOWED_INGRESS_ANNOTATIONS: ",".join(terms.ingress_annotations),
    }


def twin_guards(namespace: str, terms) -> list[dict]:
    """The LimitRange (container defaults) and ResourceQuota (storage and object counts) of one twin."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}
    meta = {"name": TENANT_TERMS_NAME, "namespace": namespace, "labels": labels}
    return [
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": meta,
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "defaultRequest": dict(terms.container_requests),
                        "default": dict(terms.container_limits),
                    }
                ]
            },
        },
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": {"hard": dict(terms.object_quota)}},
    ]


def _namespace_peer(name: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def _host(address: str) -> str:
    return f"{address}/{32 if ipaddress.ip_address(address).version == 4 else 128}"


def _ip_peer(cidr: str) -> dict:
    network = ipaddress.ip_network(cidr, strict=False)
    return {"ipBlock": {"cidr": str(network)}}


def consumer_api_server_egress(url: str, provider_cidrs: Iterable[str]) -> tuple[dict | None, str]:
    """The egress rule to the consumer's API server, which offloaded pods' in-cluster clients use by default (home
    access), and why there is none. The address is the consumer's to declare, so it must be a unicast address outside
    this cluster's pod ranges: a hostname would be resolved by whoever asks, loopback and link-local ones are this
    node's and its metadata service, a pod address is one of the provider's pods."""
    if not url:
        return None, ""
    parts = urlsplit(url)
    try:
        address = ipaddress.ip_address(parts.hostname or "")
        port = parts.port or 443
    except ValueError:
        return None, f"consumer API server {url!r} is not https://<IP address>[:port]: its pods may not reach it"
    own = [ipaddress.ip_network(c, strict=False) for c in provider_cidrs]
    if (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or any(address in network for network in own if network.version == address.version)
    ):
        return None, f"consumer API server {url!r} is an address of the provider's own: its pods may not reach it"
    return {"to": [_ip_peer(_host(str(address)))], "ports": [{"protocol": "TCP", "port": port}]}, ""


@dataclass(frozen=True)
class Reachable:
    """What a twin's pods reach besides their twin and the fabric, as the cluster's objects say."""

    dns: tuple[str, ...] = ()  # the cluster DNS's endpoint addresses
    consumer_api_server: dict | None = None  # the egress rule of consumer_api_server_egress
    provider_api_server: tuple[tuple[str, int], ...] = ()  # its endpoints (address, port): lent by the terms only


def twin_isolation(namespace: str, terms, ranges: Iterable[str], reachable: Reachable = Reachable()) -> dict:
    """The NetworkPolicy of one twin: its pods accept connections from their own twin, the fabric (the consumer's
    pods, `ranges`) and the namespaces the terms lend; they open connections to their own twin, the cluster DNS, the
    fabric, the consumer's API server (consumer_api_server_egress) and what the terms lend (namespaces, ranges, the
    provider's API server). Nothing else of the provider: its other namespaces and tenants, its nodes, its API server,
    link-local metadata addresses. A rule whose peers would be empty is left out: an empty `from` or `to` admits
    everything."""
    fabric = [_ip_peer(cidr) for cidr in ranges]
    dns_ports = [{"protocol": protocol, "port": 53} for protocol in ("UDP", "TCP")]
    dns = [
        {**_namespace_peer(CLUSTER_DNS_NAMESPACE), "podSelector": {"matchLabels": dict(CLUSTER_DNS_POD_LABELS)}},
        *(_ip_peer(_host(address)) for address in sorted(set(reachable.dns))),
    ]
    api_server = reachable.consumer_api_server
    ingress = [
        {"from": [{"podSelector": {}}]},
        *([{"from": fabric}] if fabric else []),
        *([{"from": [_namespace_peer(n) for n in terms.ingress_namespaces]}] if terms.ingress_namespaces else []),
    ]
    egress = [
        {"to": [{"podSelector": {}}]},
        {"to": dns, "ports": dns_ports},
        *([{"to": fabric}] if fabric else []),
        *([api_server] if api_server else []),
        *(
            {"to": [_ip_peer(_host(address))], "ports": [{"protocol": "TCP", "port": port}]}
            for address, port in (reachable.provider_api_server if terms.egress_to_api_server else ())
            if port
        ),
        *([{"to": [_namespace_peer(n) for n in terms.egress_namespaces]}] if terms.egress_namespaces else []),
        # One rule per range: kube-router v2.1.0 mixes the ipBlocks of one rule in one set.
        *({"to": [_ip_peer(cidr)]} for cidr in terms.egress_cidrs),
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": TENANT_TERMS_NAME,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
        },
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": egress},
    }
