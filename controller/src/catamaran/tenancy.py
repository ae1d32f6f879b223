"""RBAC, namespaces and the credential that make a consumer a tenant of a provider (least privilege). Pure.

The consumer's credential can touch only its tenant namespace and the twin namespaces the
provider's manager made for it; it holds no cluster-wide rights. It is a bound, expiring token
(TokenRequest for the tenant's ServiceAccount, bound to the binding Secret, so deleting that Secret
revokes every token issued for the tenant), kept in the tenant namespace's credential Secret and
renewed before it expires.
"""

from __future__ import annotations

import base64
import calendar
import time

from .constants import (
    ANNOTATION_ALLOWED_INGRESS_ANNOTATIONS,
    ANNOTATION_ALLOWED_INGRESS_CLASSES,
    ANNOTATION_ALLOWED_INGRESS_HOSTS,
    ANNOTATION_ALLOWED_LOAD_BALANCER_CLASSES,
    ANNOTATION_ALLOWED_SERVICE_TYPES,
    ANNOTATION_ALLOWED_STORAGE_CLASSES,
    ANNOTATION_ENDPOINT_RANGES,
    COUNTERS_GROUP,
    COUNTERS_RESOURCE,
    DEFAULT_ALLOWED_SERVICE_TYPES,
    INGRESS_HOSTS_CONFIGMAP,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_TENANT,
    MANAGED_BY_CATAMARAN,
    OFFLOADING_GROUP,
    ROOT_CA_CONFIGMAP,
    SERVICE_TYPES,
    SYSTEM_NAMESPACE,
    TENANT_CLUSTER_ROLE,
    TENANT_CREDENTIAL_SECRET,
    TENANT_INGRESS_HOSTS_POLICY,
    TENANT_NAMESPACE_PREFIX,
    TENANT_PRIORITY_CLASS,
    TENANT_PRIORITY_VALUE,
    TENANT_SERVICE_ACCOUNT,
    TENANT_TERMS_NAME,
    TENANT_TOKEN_BINDING_SECRET,
    TENANT_WORKLOAD_CLUSTER_ROLE,
    tenant_namespace,
)

READ = ["get", "list", "watch"]
WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]
# Exactly what resource reflection does with its copies: informers, create, update (with the
# resourceVersion it read), delete (with a UID precondition). No patch, no deletecollection.
REFLECT = ["get", "list", "watch", "create", "update", "delete"]


def provider_cluster_roles() -> list[dict]:
    """Roles bound per namespace: one in the tenant namespace, one in each twin namespace."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": TENANT_CLUSTER_ROLE, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
            "rules": [
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["twinnamespaces"], "verbs": WRITE},
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["resourceoffers"], "verbs": READ},
                {"apiGroups": [""], "resources": ["events"], "verbs": READ},
                # The tenant's own current token, which its virtual kubelet follows; no other Secret.
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "verbs": READ,
                    "resourceNames": [TENANT_CREDENTIAL_SECRET],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": TENANT_WORKLOAD_CLUSTER_ROLE,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
            },
            "rules": [
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["shadowpods"], "verbs": WRITE},
                {"apiGroups": [OFFLOADING_GROUP], "resources": ["shadowpods/status"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "events"], "verbs": READ},
                # The virtual kubelet's API (vk/kubelet): logs, streams (WebSocket upgrades are GETs that
                # also need create) and pod metrics for metrics-server on the consumer.
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["pods/exec", "pods/attach", "pods/portforward"],
                    "verbs": ["get", "create"],
                },
                {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]},
                # The provider kubelets' counters of this twin's pods (provider/counters.py), for `kubectl top`.
                {"apiGroups": [COUNTERS_GROUP], "resources": [COUNTERS_RESOURCE], "verbs": ["list"]},
                # Resource reflection (vk/reflection): the consumer's objects copied into this twin.
                {
                    "apiGroups": [""],
                    "resources": ["configmaps", "secrets", "services", "persistentvolumeclaims"],
                    "verbs": REFLECT,
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": REFLECT},
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": REFLECT},
            ],
        },
    ]


def provider_cluster_objects() -> list[dict]:
    """Everything cluster-wide a provider holds for all its tenants: their roles, the low priority class their pods
    run at, and the admission policy holding what they write to their terms."""
    return [*provider_cluster_roles(), tenant_priority_class(), *tenant_admission_policy()]


def lent_service_types(allowed) -> tuple:
    """The Service types a tenant may have, from the terms' list (unset: the default): ClusterIP (headless
    included) always, and of the others only Kubernetes' own; sorted. The provider enforces them (its admission
    policy), the consumer reflects to them."""
    listed = allowed or DEFAULT_ALLOWED_SERVICE_TYPES
    return tuple(sorted({"ClusterIP", *(kind for kind in listed if kind in SERVICE_TYPES)}))


def annotation_allowed(key: str, allowed) -> bool:
    """An exact key of the list, or under one of its prefixes (`prefix/*`): the terms' pod annotations, as the
    provider's manager applies them and an inventory's provider lends them."""
    return any(key == entry or (entry.endswith("/*") and key.startswith(entry[:-1])) for entry in allowed)


def host_lent(host: str, lent) -> bool:
    """An Ingress host (or a host pattern) within the patterns a provider lends: `*` is every host (rules without a
    host and default backends included), `*.example.com` every name under it (wildcard hosts too), any other entry
    that host alone. The admission policy applies the same rule in CEL (`_HOST_LENT`)."""
    return any(entry == "*" or entry == host or (entry.startswith("*.") and host.endswith(entry[1:])) for entry in lent)


def ingress_host_key(host: str) -> str:
    """A host as a key of the ConfigMap of served hosts (keys take no `*`; a host name takes no `_`)."""
    return host.replace("*", "_")


def tenant_priority_class() -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": TENANT_PRIORITY_CLASS, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
        "value": TENANT_PRIORITY_VALUE,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "Catamaran tenants' pods: below the provider's own workloads, preempting nothing.",
    }


# CEL over what a tenant writes; the terms come from the twin namespace's annotations (provider/terms.py).
_TERMS = "(has(namespaceObject.metadata.annotations) ? namespaceObject.metadata.annotations : {})"


def _listed(annotation: str) -> str:
    return f"('{annotation}' in variables.terms ? variables.terms['{annotation}'] : '').split(',').filter(x, x != '')"


# host_lent in CEL, for the host expression `{h}`.
_HOST_LENT = (
    "variables.ingressHosts.exists(p, p == '*' || p == {h} || (p.startsWith('*.') && {h}.endsWith(p.substring(1))))"
)
# annotation_allowed in CEL, for the key `k`; Catamaran's own marks on reflected copies always pass.
_INGRESS_ANNOTATION_ALLOWED = (
    "(k.startsWith('catamaran.io/') || variables.ingressAnnotations.exists(p, p == k || "
    "(p.endsWith('/*') && k.startsWith(p.substring(0, size(p) - 1)))))"
)


def _none_or(variable: str) -> str:
    return f"(size({variable}) == 0 ? 'none' : {variable}.join(', '))"


def _ingress_validations() -> list[dict]:
    """A tenant Ingress: a class the provider allows, hosts within the patterns it lends (a rule without a host
    or a default backend serves every host: only `*` lends that), and allow-listed annotations (ingress controllers
    act on theirs: snippets inject configuration, auth URLs send the provider's requests elsewhere)."""
    other_than = "request.resource.resource != 'ingresses'"
    named_class = (
        "(has(object.spec.ingressClassName) ? 'ingress class ' + object.spec.ingressClassName : "
        "'an Ingress without a class')"
    )
    return [
        {
            "expression": (
                f"{other_than} || (has(object.spec.ingressClassName) && "
                "object.spec.ingressClassName in variables.ingressClasses)"
            ),
            "messageExpression": (
                f'{named_class} + " is not allowed by the provider\'s terms (allowed: " + '
                f"{_none_or('variables.ingressClasses')} + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": f"{other_than} || variables.ruleHosts.all(h, {_HOST_LENT.format(h='h')})",
            "messageExpression": (
                '"hosts not lent by the provider\'s terms: " + '
                f"variables.ruleHosts.filter(h, !{_HOST_LENT.format(h='h')}).join(', ') + "
                "' (* is a rule without a host or a default backend, which serve every host; lent: ' + "
                f"{_none_or('variables.ingressHosts')} + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than} || !has(object.spec.tls) || object.spec.tls.all(t, !has(t.hosts) || "
                f"t.hosts.all(h, {_HOST_LENT.format(h='h')}))"
            ),
            "messageExpression": (
                '"TLS hosts must be within the hosts the provider\'s terms lend (lent: " + '
                f"{_none_or('variables.ingressHosts')} + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than} || !has(object.metadata.annotations) || "
                f"object.metadata.annotations.all(k, {_INGRESS_ANNOTATION_ALLOWED})"
            ),
            "messageExpression": (
                '"Ingress annotations not allowed by the provider\'s terms: " + '
                f"object.metadata.annotations.filter(k, !{_INGRESS_ANNOTATION_ALLOWED}).join(', ')"
            ),
            "reason": "Forbidden",
        },
    ]


def _ingress_rule_hosts() -> str:
    """The hosts an Ingress serves, `*` standing for a rule without a host and for a default backend."""
    return (
        "request.resource.resource == 'ingresses' ? "
        "(has(object.spec.rules) ? object.spec.rules.map(r, has(r.host) ? r.host : '*') : []) + "
        "(has(object.spec.defaultBackend) ? ['*'] : []) : []"
    )


def _tenant_validations() -> list[dict]:
    """The policy's rules: what a tenant credential may write of Services, Secrets, PersistentVolumeClaims,
    EndpointSlices and ConfigMaps in a twin."""
    other_than = "request.resource.resource != '{}'".format
    service_type = "(has(object.spec.type) ? object.spec.type : 'ClusterIP')"
    return [
        # The provider's cluster publishes its CA into every namespace; the consumer's is reflected under another
        # name. Matched by the request's name, so a delete (no object) is refused too.
        {
            "expression": f"{other_than('configmaps')} || request.name != '{ROOT_CA_CONFIGMAP}'",
            "message": (
                f"{ROOT_CA_CONFIGMAP} is the provider's: its cluster publishes it into every namespace, the tenant "
                "may not write or delete it"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('services')} || !has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0"
            ),
            "message": "externalIPs are refused by the provider's terms: they would capture the provider's traffic",
            "reason": "Forbidden",
        },
        {
            "expression": f"{other_than('services')} || {service_type} in variables.serviceTypes",
            "messageExpression": (
                f"'Service type ' + {service_type} + \" is not allowed by the provider's terms (allowed: \""
                " + variables.serviceTypes.join(', ') + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('services')} || !has(object.spec.loadBalancerClass) || "
                "object.spec.loadBalancerClass in variables.loadBalancerClasses"
            ),
            "messageExpression": (
                "'load-balancer class ' + object.spec.loadBalancerClass + \" is not allowed by the provider's terms\""
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('secrets')} || !has(object.type) || object.type != 'kubernetes.io/service-account-token'"
            ),
            "message": "service-account-token Secrets are refused by the provider's terms: their tokens never expire",
            "reason": "Forbidden",
        },
        # Claims: provisioned by a class, never bound to a volume the tenant picks (the provider's static volumes,
        # hostPath ones included, hold the provider's data). What the provider's controllers set stays.
        {
            "expression": (
                f"{other_than('persistentvolumeclaims')} || !has(object.spec.volumeName) || "
                "object.spec.volumeName == '' || (oldObject != null && has(oldObject.spec.volumeName) && "
                "oldObject.spec.volumeName == object.spec.volumeName)"
            ),
            "message": (
                "a claim may not name a volume (spec.volumeName) by the provider's terms: the provider's volumes "
                "hold its own data"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('persistentvolumeclaims')} || !has(object.spec.selector) || "
                "(oldObject != null && has(oldObject.spec.selector))"
            ),
            "message": "a claim may not select volumes (spec.selector) by the provider's terms",
            "reason": "Forbidden",
        },
        # Unset after the API server's defaulting means the cluster has no default class: such a claim binds any
        # static volume without a class, as the empty class does.
        {
            "expression": (
                f"{other_than('persistentvolumeclaims')} || request.operation != 'CREATE' || "
                "(has(object.spec.storageClassName) && object.spec.storageClassName != '')"
            ),
            "message": (
                "a claim must have a storage class by the provider's terms (name one, or the provider needs a default "
                "class): without one, or with the empty class, it binds the provider's static volumes"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('persistentvolumeclaims')} || request.operation != 'CREATE' || "
                "!has(object.spec.storageClassName) || object.spec.storageClassName == '' || "
                "object.spec.storageClassName in variables.storageClasses"
            ),
            "messageExpression": (
                "'storage class ' + object.spec.storageClassName + "
                '" is not allowed by the provider\'s terms (allowed: " + (size(variables.storageClasses) == 0 ? '
                "'none: the provider lends no class and has no default one' : "
                "variables.storageClasses.join(', ')) + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('persistentvolumeclaims')} || !has(object.spec.dataSourceRef) || "
                "!has(object.spec.dataSourceRef.namespace) || object.spec.dataSourceRef.namespace == request.namespace"
            ),
            "message": "a claim's data source must be in its own twin namespace by the provider's terms",
            "reason": "Forbidden",
        },
        {
            "expression": f"{other_than('endpointslices')} || object.addressType != 'FQDN'",
            "message": "FQDN EndpointSlices are refused by the provider's terms",
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"{other_than('endpointslices')} || !has(object.endpoints) || object.endpoints.all(e, "
                "e.addresses.all(a, variables.endpointRanges.exists(r, isCIDR(r) && cidr(r).containsIP(a))))"
            ),
            "messageExpression": (
                '"EndpointSlice addresses must lie in the consumer\'s announced pod ranges (" + '
                "(size(variables.endpointRanges) == 0 ? 'none announced' : variables.endpointRanges.join(', ')) + ')'"
            ),
            "reason": "Forbidden",
        },
        *_ingress_validations(),
    ]


def tenant_admission_policy() -> list[dict]:
    """A ValidatingAdmissionPolicy (native, no webhook) and its binding, for requests of tenant credentials only."""
    validations = _tenant_validations()
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": TENANT_TERMS_NAME, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["services", "secrets", "persistentvolumeclaims"],
                    },
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["configmaps"],
                        "resourceNames": [ROOT_CA_CONFIGMAP],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["endpointslices"],
                    },
                    _INGRESS_RULE,
                ]
            },
            "matchConditions": [_tenant_credential()],
            "variables": [
                {"name": "terms", "expression": _TERMS},
                {"name": "serviceTypes", "expression": _listed(ANNOTATION_ALLOWED_SERVICE_TYPES)},
                {"name": "loadBalancerClasses", "expression": _listed(ANNOTATION_ALLOWED_LOAD_BALANCER_CLASSES)},
                {"name": "endpointRanges", "expression": _listed(ANNOTATION_ENDPOINT_RANGES)},
                {"name": "storageClasses", "expression": _listed(ANNOTATION_ALLOWED_STORAGE_CLASSES)},
                {"name": "ingressClasses", "expression": _listed(ANNOTATION_ALLOWED_INGRESS_CLASSES)},
                {"name": "ingressHosts", "expression": _listed(ANNOTATION_ALLOWED_INGRESS_HOSTS)},
                {"name": "ingressAnnotations", "expression": _listed(ANNOTATION_ALLOWED_INGRESS_ANNOTATIONS)},
                {"name": "ruleHosts", "expression": _ingress_rule_hosts()},
            ],
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": TENANT_TERMS_NAME, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
        "spec": {"policyName": TENANT_TERMS_NAME, "validationActions": ["Deny"]},
    }
    return [policy, binding, *_ingress_hosts_policy()]


_INGRESS_RULE = {
    "apiGroups": ["networking.k8s.io"],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["ingresses"],
}


def _tenant_credential() -> dict:
    username = f"system:serviceaccount:{TENANT_NAMESPACE_PREFIX}"
    return {
        "name": "tenant-credential",
        "expression": (
            f"request.userInfo.username.startsWith('{username}') && "
            f"request.userInfo.username.endsWith(':{TENANT_SERVICE_ACCOUNT}')"
        ),
    }


def _ingress_hosts_policy() -> list[dict]:
    """A tenant Ingress may not serve a host another namespace of the provider serves (it would split or take the
    provider's traffic for it, or another twin's). The hosts served are the manager's ConfigMap (provider/hosts.py),
    this policy's parameter; without it, tenant Ingresses are refused. The owner is not named to the tenant."""
    key = "h.replace('*', '_')"
    labels = {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": TENANT_INGRESS_HOSTS_POLICY, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [_INGRESS_RULE]},
            "matchConditions": [_tenant_credential()],
            "variables": [
                {"name": "served", "expression": "has(params.data) ? params.data : {}"},
                {
                    "name": "taken",
                    "expression": (
                        "(has(object.spec.rules) ? object.spec.rules.filter(r, has(r.host)).map(r, r.host) : [])"
                        f".filter(h, {key} in variables.served && "
                        f"variables.served[{key}].split(',').exists(n, n != request.namespace))"
                    ),
                },
            ],
            "validations": [
                {
                    "expression": "size(variables.taken) == 0",
                    "messageExpression": (
                        "'hosts already served by another namespace of the provider: ' + variables.taken.join(', ')"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": TENANT_INGRESS_HOSTS_POLICY, "labels": labels},
        "spec": {
            "policyName": TENANT_INGRESS_HOSTS_POLICY,
            "validationActions": ["Deny"],
            "paramRef": {
                "name": INGRESS_HOSTS_CONFIGMAP,
                "namespace": SYSTEM_NAMESPACE,
                "parameterNotFoundAction": "Deny",
            },
        },
    }
    return [policy, binding]


def tenant_manifests(consumer_id: str) -> list[dict]:
    """Tenant namespace, its ServiceAccount, token binding Secret and RoleBinding, on the provider."""
    namespace = tenant_namespace(consumer_id)
    labels = {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN, LABEL_ORIGIN_CLUSTER_ID: consumer_id}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {**labels, LABEL_TENANT: "true"}},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": TENANT_SERVICE_ACCOUNT, "namespace": namespace, "labels": labels},
        },
        token_binding_secret(consumer_id),
        tenant_role_binding(namespace, namespace, TENANT_CLUSTER_ROLE),
    ]


def role_binding(namespace: str, cluster_role: str, subject: dict) -> dict:
    """A RoleBinding of `cluster_role` in `namespace`, named after the role and managed by Catamaran."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": cluster_role,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [subject],
    }


def tenant_role_binding(namespace: str, tenant_ns: str, cluster_role: str) -> dict:
    return role_binding(
        namespace, cluster_role, {"kind": "ServiceAccount", "name": TENANT_SERVICE_ACCOUNT, "namespace": tenant_ns}
    )


def tenant_kubeconfig(server: str, ca_data_b64: str, token: str, provider_id: str, consumer_id: str) -> dict:
    """The credential the consumer stores: the tenant token, defaulting to the tenant namespace."""
    user = f"{consumer_id}-on-{provider_id}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": provider_id, "cluster": {"server": server, "certificate-authority-data": ca_data_b64}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": provider_id,
                "context": {"cluster": provider_id, "user": user, "namespace": tenant_namespace(consumer_id)},
            }
        ],
        "current-context": provider_id,
    }


# On the credential Secret: when its token was issued and expires (UTC, RFC 3339), the lifetime asked for, and
# the uid of the binding Secret it is bound to (a token bound to a deleted binding is dead).
ANNOTATION_CREDENTIAL_ISSUED_AT = "catamaran.io/credential-issued-at"
ANNOTATION_CREDENTIAL_EXPIRES_AT = "catamaran.io/credential-expires-at"
ANNOTATION_CREDENTIAL_LIFETIME = "catamaran.io/credential-lifetime-seconds"
ANNOTATION_CREDENTIAL_BOUND_TO = "catamaran.io/credential-bound-to"
CREDENTIAL_TOKEN_KEY = "token"
CREDENTIAL_RENEW_FRACTION = 0.8
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def token_binding_secret(consumer_id: str) -> dict:
    """The empty Secret every tenant token is bound to: deleting it revokes them all at once."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": TENANT_TOKEN_BINDING_SECRET,
            "namespace": tenant_namespace(consumer_id),
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN, LABEL_ORIGIN_CLUSTER_ID: consumer_id},
        },
    }


def credential_token_request(binding_uid: str, lifetime_seconds: int) -> dict:
    """TokenRequest body for the tenant's ServiceAccount, bound to the binding Secret with this uid."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": int(lifetime_seconds),
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": TENANT_TOKEN_BINDING_SECRET,
                "uid": binding_uid,
            },
        },
    }


def format_timestamp(epoch: float) -> str:
    return time.strftime(TIMESTAMP_FORMAT, time.gmtime(epoch))


def parse_timestamp(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, TIMESTAMP_FORMAT)))


def credential_secret(
    consumer_id: str, token: str, issued_at: float, expires_at: float, lifetime_seconds: int, binding_uid: str
) -> dict:
    """The tenant's credential Secret: its current token and when it was issued, expires and is bound to."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": TENANT_CREDENTIAL_SECRET,
            "namespace": tenant_namespace(consumer_id),
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN, LABEL_ORIGIN_CLUSTER_ID: consumer_id},
            "annotations": {
                ANNOTATION_CREDENTIAL_ISSUED_AT: format_timestamp(issued_at),
                ANNOTATION_CREDENTIAL_EXPIRES_AT: format_timestamp(expires_at),
                ANNOTATION_CREDENTIAL_LIFETIME: str(int(lifetime_seconds)),
                ANNOTATION_CREDENTIAL_BOUND_TO: binding_uid,
            },
        },
        "data": {CREDENTIAL_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def credential_token(secret: dict | None) -> str | None:
    """The token a credential Secret (as the API returns it) holds; None when it holds none."""
    encoded = ((secret or {}).get("data") or {}).get(CREDENTIAL_TOKEN_KEY)
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode() or None
    except ValueError:  # not base64, not UTF-8
        return None


def credential_renewal(
    secret: dict | None,
    binding_uid: str,
    lifetime_seconds: int,
    now: float,
    renew_fraction: float = CREDENTIAL_RENEW_FRACTION,
) -> tuple[str | None, float]:
    """Why the credential Secret needs a new token now (None: it does not) and, if not, in how many seconds.

    A token is renewed once `renew_fraction` of its life has passed, when it is bound to another binding
    Secret than the current one (the old binding was deleted: the token is revoked), when the lifetime the
    provider grants the tenant changed, and when the Secret is missing or unreadable.
    """
    if secret is None:
        return "missing", 0.0
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    try:
        issued = parse_timestamp(annotations[ANNOTATION_CREDENTIAL_ISSUED_AT])
        expires = parse_timestamp(annotations[ANNOTATION_CREDENTIAL_EXPIRES_AT])
        lifetime = int(annotations[ANNOTATION_CREDENTIAL_LIFETIME])
    except (KeyError, ValueError, TypeError):
        return "unreadable", 0.0
    if credential_token(secret) is None or expires <= issued:
        return "unreadable", 0.0
    if annotations.get(ANNOTATION_CREDENTIAL_BOUND_TO) != binding_uid:
        return "revoked", 0.0
    if lifetime != int(lifetime_seconds):
        return "lifetime changed", 0.0
    renew_at = issued + renew_fraction * (expires - issued)
    if now >= renew_at:
        return "renewal due", 0.0
    return None, renew_at - now
