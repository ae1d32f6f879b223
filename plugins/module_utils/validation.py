# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A peering's settings, checked the way the API server and the controller would check them.

Pure: the peering module and the federation_model filter share it, so an inventory and a task are
held to the same rules and both refuse bad settings before any cluster is changed. Every message
names the field.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.catamaran.federation.plugins.module_utils import quantities
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    DEFAULT_CONTAINER_LIMITS,
    DEFAULT_CONTAINER_REQUESTS,
    DEFAULT_OBJECT_QUOTA,
    LABEL_POOL,
    MAX_POOL_NAME,
    MAX_POOLS,
    MAX_TERMINATION_GRACE_SECONDS,
    MIN_CREDENTIAL_LIFETIME_SECONDS,
    POD_SECURITY_LEVELS,
    SERVICE_TYPES,
    TAINT_EFFECTS,
    TWIN_NAME_POLICIES,
    VIRTUAL_NODE_TAINT_KEY,
    virtual_node_name,
)

# k8s.io/apimachinery validation: a qualified name is [prefix/]name, the prefix a DNS-1123 subdomain.
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# An address and a prefix length, as a NetworkPolicy's ipBlock takes them (no netmask, no zone, no spaces).
CIDR_FORM = re.compile(r"^[0-9A-Fa-f.:]+/(0|[1-9][0-9]{0,2})$")
# As many entries as each list of the ResourceOffer's spec.isolation holds.
MAX_ISOLATION_ENTRIES = 32
HEALTH_CHECK_FIELDS = ("period_seconds", "timeout_seconds", "failure_threshold")
CONTAINER_DEFAULTS_FIELDS = ("requests", "limits")
TAINT_FIELDS = ("key", "value", "effect")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "toleration_seconds")
TOLERATION_OPERATORS = ("Equal", "Exists")
# As many tolerations as the ResourceOffer's spec.tolerations (and each pool's) holds.
MAX_TOLERATIONS = 32
# A node's name is its kubernetes.io/hostname label, whose value holds at most 63 characters.
MAX_NODE_NAME = 63


class InvalidSetting(ValueError):
    """A setting the API server or the controller would refuse."""


def one_of(value, allowed, where):
    """`value`, if it is one of `allowed`."""
    if value not in allowed:
        raise InvalidSetting("%s must be one of %s, got %r" % (where, ", ".join(allowed), value))
    return value


def optional_mapping(value, where, holding=""):
    """`value`, a mapping (`holding` says of what), or {} when unset."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidSetting("%s must be a mapping%s, got %r" % (where, holding, value))
    return value


def known_keys(mapping, allowed, where):
    """Refuse a mapping with keys outside `allowed`, naming them and the allowed ones."""
    unknown = sorted(str(key) for key in mapping if key not in allowed)
    if unknown:
        raise InvalidSetting("%s: unknown %s (allowed: %s)" % (where, ", ".join(unknown), ", ".join(allowed)))


def qualified_name(key, where, what="label key"):
    """A qualified name as the API server accepts it (label keys, resource names, load-balancer classes):
    [DNS-1123 subdomain/]name (name at most 63)."""
    if not isinstance(key, str) or not key:
        raise InvalidSetting("%s: %s %r must be a non-empty string" % (where, what, key))
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise InvalidSetting(
            "%s: %s %r: the prefix %r must be a DNS-1123 subdomain (lower case, at most 253)"
            % (where, what, key, prefix)
        )
    if len(name) > 63 or not QUALIFIED_NAME.match(name):
        raise InvalidSetting(
            "%s: %s %r: the name %r must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit" % (where, what, key, name)
        )
    return key


def label_key(key, where):
    """A label key as the API server accepts it: [DNS-1123 subdomain/]name (name at most 63)."""
    return qualified_name(key, where, "label key")


def label_value(value, where, what="label value"):
    if not isinstance(value, str):
        raise InvalidSetting("%s: %s must be a string, got %r" % (where, what, value))
    if value and (len(value) > 63 or not QUALIFIED_NAME.match(value)):
        raise InvalidSetting(
            "%s: %s %r must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit" % (where, what, value)
        )
    return value


def labels(mapping, where):
    """A mapping of label keys to label values; returns it with every key and value checked."""
    mapping = optional_mapping(mapping, where, " of labels")
    for key, value in mapping.items():
        label_key(key, where)
        label_value(value, "%s.%s" % (where, key))
    return mapping


def taints(items, where):
    """Taints of the virtual node besides its own (ForeignCluster spec.nodeTaints), as a Node holds them: a label
    key (not the virtual kubelet's own taint), an optional label value, an effect, each key and effect once."""
    if items is None:
        return []
    if not isinstance(items, (list, tuple)):
        raise InvalidSetting("%s must be a list of taints (key, value, effect), got %r" % (where, items))
    seen = set()
    for index, taint in enumerate(items):
        here = "%s[%d]" % (where, index)
        if not isinstance(taint, dict):
            raise InvalidSetting("%s must be a mapping of key, value and effect, got %r" % (here, taint))
        known_keys(taint, TAINT_FIELDS, here)
        key, effect = taint.get("key"), taint.get("effect")
        qualified_name(key, here, "taint key")
        if key == VIRTUAL_NODE_TAINT_KEY:
            raise InvalidSetting("%s: the virtual kubelet sets the taint %s itself; remove it" % (here, key))
        if taint.get("value") is not None:
            label_value(taint["value"], here + ".value", "taint value")
        one_of(effect, TAINT_EFFECTS, here + ".effect")
        if (key, effect) in seen:
            raise InvalidSetting("%s: a taint with key %s and effect %s is listed before" % (here, key, effect))
        seen.add((key, effect))
    return items


def toleration(value, where):
    """A toleration as the API accepts it (the option's snake_case keys: key, operator, value, effect,
    toleration_seconds; unset ones None)."""
    if not isinstance(value, dict):
        raise InvalidSetting("%s must be a mapping, got %r" % (where, value))
    known_keys(value, TOLERATION_FIELDS, where)
    operator = value.get("operator") or "Equal"
    if operator not in TOLERATION_OPERATORS:
        raise InvalidSetting(
            "%s.operator must be one of %s, got %r" % (where, ", ".join(TOLERATION_OPERATORS), operator)
        )
    if value.get("effect") and value["effect"] not in TAINT_EFFECTS:
        raise InvalidSetting("%s.effect must be one of %s, got %r" % (where, ", ".join(TAINT_EFFECTS), value["effect"]))
    if operator == "Exists" and value.get("value"):
        raise InvalidSetting("%s: operator Exists takes no value" % where)
    if operator == "Equal" and not value.get("key"):
        raise InvalidSetting("%s: operator Equal needs a key" % where)
    seconds = value.get("toleration_seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise InvalidSetting("%s.toleration_seconds must be a whole number of seconds, got %r" % (where, seconds))
    return value


def tolerations(items, where):
    """A list of tolerations (provider_tolerations), at most as many as the ResourceOffer holds."""
    if items is None:
        return []
    if not isinstance(items, (list, tuple)):
        raise InvalidSetting("%s must be a list of tolerations, got %r" % (where, items))
    if len(items) > MAX_TOLERATIONS:
        raise InvalidSetting("%s: at most %d tolerations, got %d" % (where, MAX_TOLERATIONS, len(items)))
    for index, item in enumerate(items):
        toleration(item, "%s[%d]" % (where, index))
    return items


def home_api_server(value, where):
    """https://host[:port], as the virtual kubelet reads it: where in-cluster clients reach an API server."""
    match = re.match(r"^https://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:([0-9]{1,5}))?/?$", str(value))
    if not match or (match.group(3) and not 1 <= int(match.group(3)) <= 65535):
        raise InvalidSetting(
            "%s: %r is not https://host[:port] (in-cluster clients speak TLS to a host and port)" % (where, value)
        )
    return value


def cidr(value, where):
    """An IP network such as 10.200.0.0/16 (host bits are ignored, as the virtual kubelet does)."""
    try:
        if "/" in str(value):
            return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        pass
    raise InvalidSetting("%s: %r is not a CIDR such as 10.200.0.0/16" % (where, value))


def remap_covers(remap, provider_cidrs, where):
    """The remap range must hold each of the provider's pod ranges: the virtual kubelet maps offsets."""
    target = cidr(remap, where)
    for source in provider_cidrs:
        network = ipaddress.ip_network(source, strict=False)
        if network.version != target.version:
            raise InvalidSetting(
                "%s: %s is IPv%d but the provider's pod range %s is IPv%d"
                % (where, remap, target.version, source, network.version)
            )
        if target.prefixlen > network.prefixlen:
            raise InvalidSetting(
                "%s: %s is smaller than the provider's pod range %s (a prefix of /%d or shorter is needed)"
                % (where, remap, source, network.prefixlen)
            )


def positive(value, where):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidSetting("%s must be a positive integer, got %r" % (where, value))
    return value


def health_check(settings, where):
    settings = optional_mapping(settings, where)
    known_keys(settings, HEALTH_CHECK_FIELDS, where)
    for key in HEALTH_CHECK_FIELDS:
        positive(settings.get(key), "%s.%s" % (where, key))
    return settings


def pod_security(level, where):
    return one_of(level, POD_SECURITY_LEVELS, where)


def credential_lifetime(seconds, where):
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < MIN_CREDENTIAL_LIFETIME_SECONDS:
        raise InvalidSetting(
            "%s must be an integer of at least %d seconds (the API server's floor for bound tokens), got %r"
            % (where, MIN_CREDENTIAL_LIFETIME_SECONDS, seconds)
        )
    return seconds


def _strings(values, where):
    if not isinstance(values, (list, tuple)):
        raise InvalidSetting("%s must be a list, got %r" % (where, values))
    return values


def service_types(values, where):
    """Service types a tenant may have, each one of Kubernetes' own."""
    for index, value in enumerate(_strings(values, where)):
        one_of(value, SERVICE_TYPES, "%s[%d]" % (where, index))
    return values


def load_balancer_classes(values, where):
    """spec.loadBalancerClass values: label-style keys such as example.com/internal-vip, as the API holds them."""
    for index, value in enumerate(_strings(values, where)):
        qualified_name(value, "%s[%d]" % (where, index), "load-balancer class")
    return values


def dns1123_subdomain(value, where):
    """An object name such as a PriorityClass's: lower-case DNS-1123 subdomain, at most 253 characters."""
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        raise InvalidSetting(
            "%s: %r is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253)" % (where, value)
        )
    return value


def object_names(values, where):
    """Names of cluster objects such as PriorityClasses, StorageClasses and IngressClasses, each a DNS-1123
    subdomain (never empty)."""
    for index, value in enumerate(_strings(values, where)):
        dns1123_subdomain(value, "%s[%d]" % (where, index))
    return values


def ingress_hosts(values, where):
    """Host patterns lent to a tenant's Ingresses: `*` (every host), `*.` and a domain (every name under it) or a
    host name, each a lower-case DNS-1123 subdomain as the API holds an Ingress's hosts."""
    for index, value in enumerate(_strings(values, where)):
        name = value[2:] if isinstance(value, str) and value.startswith("*.") else value
        if value != "*" and (not isinstance(name, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.match(name)):
            raise InvalidSetting(
                "%s[%d]: host %r is not *, *.<domain> or a host name (lower-case letters, digits, '-' and '.', "
                "a DNS-1123 subdomain of at most 253)" % (where, index, value)
            )
    return values


def _at_most(values, most, where, what):
    """At most `most` distinct entries (each written once in the ResourceOffer, whose CRD caps the list)."""
    distinct = len(set(values))
    if distinct > most:
        raise InvalidSetting("%s: at most %d %s, got %d" % (where, most, what, distinct))
    return values


def namespace_names(values, where):
    """Names of the provider's namespaces lent to a tenant's network (spec.isolation): each a DNS-1123 label, as a
    namespace's name is, at most 32 of them."""
    for index, value in enumerate(_strings(values, where)):
        if not isinstance(value, str) or len(value) > 63 or not DNS1123_LABEL.match(value):
            raise InvalidSetting(
                "%s[%d]: %r is not a namespace name (a DNS-1123 label: lower-case letters, digits and '-', at most "
                "63)" % (where, index, value)
            )
    return _at_most(values, MAX_ISOLATION_ENTRIES, where, "namespaces")


def _written_network(value):
    """The network an address/prefix string stands for (host bits ignored), or None."""
    if not isinstance(value, str) or not CIDR_FORM.match(value):
        return None
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        return None


def network_cidrs(values, where):
    """Address ranges lent to a tenant's pods (spec.isolation.egressToCIDRs): IPv4 or IPv6 networks written as
    networks, address/prefix with no host bits set (10.0.0.0/8, not 10.0.0.1/8), at most 32 of them."""
    for index, value in enumerate(_strings(values, where)):
        here = "%s[%d]" % (where, index)
        network = _written_network(value)
        if network is None:
            raise InvalidSetting(
                "%s: %r is not an IPv4 or IPv6 network written as address/prefix, such as 203.0.113.0/24 or "
                "2001:db8::/32" % (here, value)
            )
        if network.network_address != ipaddress.ip_address(value.split("/")[0]):
            raise InvalidSetting(
                "%s: %r has host bits set: write the network, %s (not an address within it)" % (here, value, network)
            )
    return _at_most(values, MAX_ISOLATION_ENTRIES, where, "ranges")


def boolean(value, where):
    """A true or false as YAML writes it (true, false), not a string such as "yes" or a number: an inventory's value
    reaches the filter as written, and a string would read as true."""
    if not isinstance(value, bool):
        raise InvalidSetting("%s must be true or false (a boolean, unquoted), got %r" % (where, value))
    return value


def grace_seconds(value, where):
    """The longest a tenant's pod may take to stop: whole seconds, 0 to a day."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TERMINATION_GRACE_SECONDS:
        raise InvalidSetting(
            "%s must be a whole number of seconds from 0 to %d, got %r" % (where, MAX_TERMINATION_GRACE_SECONDS, value)
        )
    return value


GATEWAY_SERVICE_TYPES = ("NodePort", "LoadBalancer")
CORDON_STATES = ("cordoned", "drained", "uncordoned")
MAX_CORDON_REASON = 256  # the ResourceOffer CRD's spec.cordon.reason maxLength


def gateway_service(service, where):
    """network.gateway_service: its `type`, and the first `node_port` if given (checked by the module and the
    inventory model alike; unknown keys are each caller's to refuse)."""
    if service.get("type") not in GATEWAY_SERVICE_TYPES:
        raise InvalidSetting(
            "%s.type: %r is not one of %s" % (where, service.get("type"), ", ".join(GATEWAY_SERVICE_TYPES))
        )
    node_port = service.get("node_port")
    if node_port is not None and (isinstance(node_port, bool) or not isinstance(node_port, int)):
        raise InvalidSetting("%s.node_port: %r is not a port" % (where, node_port))
    if node_port is not None and not 1 <= node_port <= 65535:
        raise InvalidSetting("%s.node_port: %s is not a port (1-65535)" % (where, node_port))
    return service


def cordon(settings, where):
    """A provider's cordon of a tenant: its `state`, and a `reason` the ResourceOffer can hold."""
    state = settings.get("state", CORDON_STATES[0])
    if state not in CORDON_STATES:
        raise InvalidSetting("%s.state: %r is not one of %s" % (where, state, ", ".join(CORDON_STATES)))
    reason = settings.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidSetting("%s.reason must be text, got %r" % (where, reason))
    if reason is not None and len(reason) > MAX_CORDON_REASON:
        raise InvalidSetting("%s.reason: at most %d characters, got %d" % (where, MAX_CORDON_REASON, len(reason)))
    return settings


def annotation_keys(values, where):
    """Annotation keys a tenant's pods or Ingresses keep on the provider: exact keys, or a prefix followed by /*."""
    for index, value in enumerate(_strings(values, where)):
        key = value[:-2] + "/x" if isinstance(value, str) and value.endswith("/*") else value
        qualified_name(key, "%s[%d]" % (where, index), "annotation key (or prefix/*)")
    return values


def twin_name_policy(policy, where):
    return one_of(policy, TWIN_NAME_POLICIES, where)


def quantity(value, where):
    """A non-negative Kubernetes quantity (100m, 2Gi, 1000); returns it parsed."""
    try:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            parsed = quantities.parse(value)
            if parsed >= 0:
                return parsed
    except ValueError:
        pass
    raise InvalidSetting("%s: %r is not a non-negative Kubernetes quantity such as 500m, 2Gi or 1000" % (where, value))


def resource_quantities(mapping, where):
    """Resource names (cpu, requests.storage, count/ingresses.networking.k8s.io) to quantities, as the API writes
    them (strings); returns that mapping."""
    if not isinstance(mapping, dict):
        raise InvalidSetting("%s must be a mapping of resource names to quantities, got %r" % (where, mapping))
    written = {}
    for resource, value in mapping.items():
        qualified_name(resource, where, "resource name")
        quantity(value, "%s.%s" % (where, resource))
        written[resource] = str(value).strip()
    return written


def over_defaults(defaults, given, where):
    """Quantities given replace the defaults' resource by resource; resources left out keep their default."""
    merged = dict(defaults)
    if given is not None:
        merged.update(resource_quantities(given, where))
    return merged


def container_defaults(settings, where):
    """Requests and limits of containers that set none, over the defaults; as a LimitRange must hold them, no
    default request may exceed its default limit. Returns {requests, limits}."""
    settings = optional_mapping(settings, where, " with requests and limits")
    known_keys(settings, CONTAINER_DEFAULTS_FIELDS, where)
    requests = over_defaults(DEFAULT_CONTAINER_REQUESTS, settings.get("requests"), where + ".requests")
    limits = over_defaults(DEFAULT_CONTAINER_LIMITS, settings.get("limits"), where + ".limits")
    for resource in sorted(set(requests) & set(limits)):
        if quantities.parse(requests[resource]) > quantities.parse(limits[resource]):
            raise InvalidSetting(
                "%s: requests.%s %s is above limits.%s %s (a default request may not exceed the default limit; "
                "set both)" % (where, resource, requests[resource], resource, limits[resource])
            )
    return {"requests": requests, "limits": limits}


def object_quota(settings, where):
    """Hard limits of each twin's ResourceQuota, over the defaults."""
    return over_defaults(DEFAULT_OBJECT_QUOTA, settings, where)


# The provider's terms of a peering beyond Pod Security, share and credential lifetime, by the name the peering
# module and an inventory's catamaran_peerings entry give them, each with its check.
TERMS_CHECKS = (
    ("allowed_service_types", service_types),
    ("allowed_load_balancer_classes", load_balancer_classes),
    ("twin_namespace_names", twin_name_policy),
    ("priority_class", dns1123_subdomain),
    ("allowed_priority_classes", object_names),
    ("container_defaults", container_defaults),
    ("object_quota", object_quota),
    ("max_termination_grace_period", grace_seconds),
    ("allowed_pod_annotations", annotation_keys),
    ("allowed_storage_classes", object_names),
    ("allowed_ingress_classes", object_names),
    ("allowed_ingress_hosts", ingress_hosts),
    ("allowed_ingress_annotations", annotation_keys),
    ("network_ingress_from_namespaces", namespace_names),
    ("network_egress_to_namespaces", namespace_names),
    ("network_egress_to_cidrs", network_cidrs),
    ("network_egress_to_api_server", boolean),
)
TERMS_OPTIONS = tuple(option for option, _check in TERMS_CHECKS)


def peering_terms(settings, where=""):
    """Those terms as a peering sets them: each one set is checked, its message naming `where` + the option; unset
    ones (None) are left to the defaults."""
    for option, check in TERMS_CHECKS:
        if settings.get(option) is not None:
            check(settings[option], where + option)
    return settings


# A node pool of a peering (docs/design.md, "Node pools"), as the peering module's O(pools) and an inventory's
# catamaran_peerings entry write it; an inventory's pools take no cordon (the provider's catamaran_cordoned_pools).
POOL_FIELDS = (
    "name",
    "provider_node_selector",
    "provider_tolerations",
    "sharing_percentage",
    "node_labels",
    "node_taints",
    "cordon",
)
CORDON_FIELDS = ("state", "reason")


def pool_name(name, where):
    """A pool's name: a DNS-1123 label of at most MAX_POOL_NAME characters (it names a virtual node and a label)."""
    if not isinstance(name, str) or len(name) > MAX_POOL_NAME or not DNS1123_LABEL.match(name):
        raise InvalidSetting(
            "%s: %r is not a pool name (a DNS-1123 label: lower-case letters, digits and '-', starting and ending "
            "with a letter or digit, at most %d characters)" % (where, name, MAX_POOL_NAME)
        )
    return name


def pool_node_name(provider_id, name, where):
    """The pool's virtual node, catamaran-<provider>.<pool>: its name is its kubernetes.io/hostname label, so at most
    MAX_NODE_NAME characters."""
    node = virtual_node_name(provider_id, name)
    if len(node) > MAX_NODE_NAME:
        room = MAX_NODE_NAME - len(virtual_node_name(provider_id)) - 1
        raise InvalidSetting(
            "%s: the pool's virtual node %s would have %d characters, more than the %d of a kubernetes.io/hostname "
            "label (with provider %s, a pool name of at most %d characters fits)"
            % (where, node, len(node), MAX_NODE_NAME, provider_id, max(room, 0))
        )
    return node


def sharing_percentage(value, where):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise InvalidSetting("%s must be an integer from 1 to 100, got %r" % (where, value))
    return value


def pool_cordon(settings, where):
    """A pool's cordon: a mapping of state and reason, as the peering's cordon (validation.cordon)."""
    if not isinstance(settings, dict):
        raise InvalidSetting("%s must be a mapping (state, reason), got %r" % (where, settings))
    known_keys(settings, CORDON_FIELDS, where)
    return cordon(settings, where)


def pools(items, provider_id, where, fields=POOL_FIELDS):
    """A peering's node pools: at most MAX_POOLS, each a mapping of `fields` with a name of its own whose virtual node
    name fits a hostname label, its placement (node selector, tolerations), share, node labels and taints checked as
    the peering's own. Returns the list ([] when unset). Messages name the pool by position and, once it is valid,
    by name."""
    if items is None:
        return []
    if not isinstance(items, (list, tuple)):
        raise InvalidSetting("%s must be a list of pools, got %r" % (where, items))
    if len(items) > MAX_POOLS:
        raise InvalidSetting("%s: at most %d pools per peering, got %d" % (where, MAX_POOLS, len(items)))
    seen = {}
    for index, pool in enumerate(items):
        here = "%s[%d]" % (where, index)
        if not isinstance(pool, dict):
            raise InvalidSetting("%s must be a mapping with a name, got %r" % (here, pool))
        known_keys(pool, fields, here)
        if pool.get("name") is None:
            raise InvalidSetting("%s: a pool needs a name" % here)
        name = pool_name(pool["name"], here + ".name")
        if name in seen:
            listed = "%s[%d]" % (where.rsplit(": ", 1)[-1], seen[name])
            raise InvalidSetting("%s: pool %s is listed before, as %s" % (here, name, listed))
        seen[name] = index
        here = "%s (pool %s)" % (here, name)
        pool_node_name(provider_id, name, here)
        if pool.get("sharing_percentage") is not None:
            sharing_percentage(pool["sharing_percentage"], here + ".sharing_percentage")
        labels(pool.get("provider_node_selector"), here + ".provider_node_selector")
        tolerations(pool.get("provider_tolerations"), here + ".provider_tolerations")
        node_labels = labels(pool.get("node_labels"), here + ".node_labels")
        if LABEL_POOL in node_labels:
            raise InvalidSetting(
                "%s.node_labels: the virtual kubelet sets the label %s=%s itself; remove it" % (here, LABEL_POOL, name)
            )
        taints(pool.get("node_taints"), here + ".node_taints")
        if pool.get("cordon") is not None:
            pool_cordon(pool["cordon"], here + ".cordon")
    return items
