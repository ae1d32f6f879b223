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

from .. import quantities
from ..constants import (
    ANNOTATION_ALLOWED_INGRESS_ANNOTATIONS,
    ANNOTATION_ALLOWED_INGRESS_CLASSES,
    ANNOTATION_ALLOWED_INGRESS_HOSTS,
    ANNOTATION_ALLOWED_LOAD_BALANCER_CLASSES,
    ANNOTATION_ALLOWED_SERVICE_TYPES,
    ANNOTATION_ALLOWED_STORAGE_CLASSES,
    ANNOTATION_ENDPOINT_RANGES,
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
