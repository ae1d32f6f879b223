# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: federation_model
short_description: Validate a federation inventory and resolve it into per-cluster work
version_added: 0.1.0
description:
  - Reads every inventory host of the given list as a cluster (C(catamaran_cluster_id), C(catamaran_kubeconfig),
    C(catamaran_context), C(catamaran_cluster_labels), C(catamaran_api_server), C(catamaran_provider_reflection),
    C(catamaran_allowed_pod_security), C(catamaran_tenant_allowances), C(catamaran_network),
    C(catamaran_cordoned_tenants), C(catamaran_cordoned_pools), C(catamaran_home_api_server), C(catamaran_peerings),
    C(catamaran_offloaded_namespaces), C(catamaran_offloading_policies)) and returns the validated federation.
  - C(catamaran_offloading_policies) offload every namespace whose labels match, each with the options of
    M(catamaran.federation.namespace_offloading_policy) (C(name), C(namespace_selector), C(pod_offloading_strategy),
    C(namespace_mapping_strategy), C(cluster_selector)).
  - C(catamaran_home_api_server) is where the cluster's providers' pods reach its API server (V(https://host[:port]));
    every peering of the cluster as a consumer passes it on (O(catamaran.federation.peering#module:home_api_server)).
  - C(catamaran_network) says how the cluster's pods reach its peers' (keys C(mode), V(flat) by default or
    V(fabric); C(gateway_address), where its peers' gateways reach its gateway; C(gateway_port), by default
    V(51820); C(gateway_service), its gateway behind a Service, C(type) V(NodePort) or V(LoadBalancer) and an
    optional first C(node_port), whose address and port the peering reads back; a provider in V(fabric) needs
    C(gateway_address) or C(gateway_service)). A peering goes through the fabric when both its clusters are in
    V(fabric), and fails when only one of them is.
  - A peering's C(pod_security) (V(restricted) by default, V(baseline) or V(privileged)) must be one of its
    provider's C(catamaran_allowed_pod_security) (by default V([restricted, baseline])), so only the provider's
    own inventory entry can lend V(privileged).
  - Likewise a peering's C(allowed_service_types), C(allowed_load_balancer_classes), C(twin_namespace_names),
    C(allowed_priority_classes), C(allowed_pod_annotations), C(allowed_storage_classes), C(allowed_ingress_classes),
    C(allowed_ingress_hosts), C(allowed_ingress_annotations), C(network_ingress_from_namespaces),
    C(network_egress_to_namespaces) and C(network_egress_to_cidrs) must be lent by its provider's
    C(catamaran_tenant_allowances) (keys C(service_types), by default V([ClusterIP]); C(load_balancer_classes), by
    default V([]); C(twin_namespace_names), by default V([Suffixed]); C(priority_classes), by default V([]);
    C(pod_annotations), by default the peering module's default; C(storage_classes), by default V([]), so that only
    the provider's default storage class is lent; C(ingress_classes), C(ingress_hosts) and C(ingress_annotations),
    each by default V([]), so that no tenant Ingress is lent; C(network_ingress_from_namespaces),
    C(network_egress_to_namespaces) and C(network_egress_to_cidrs), each by default V([]), so that a tenant's pods
    reach, and are reached from, only their own twin, the cluster DNS and the fabric), its
    C(max_termination_grace_period) may not exceed the key C(max_termination_grace_period) (by default V(300)), and
    its C(network_egress_to_api_server) may be V(true) only where the key C(network_egress_to_api_server) is (by
    default V(false), so that a tenant's pods never reach the provider's API server, not even those that choose it
    with C(catamaran.io/api-server-access=provider)).
  - An annotation prefix lent (V(prefix/*)) covers its keys and narrower prefixes; a host pattern lent covers the
    hosts it stands for (V(*.example.com) covers V(shop.example.com) and V(*.shop.example.com), not V(example.com);
    V(*) covers every host); an address range lent covers the ranges within it of the same IP family
    (V(10.0.0.0/8) covers V(10.1.0.0/16); V(0.0.0.0/0) covers every IPv4 range, the provider's nodes and metadata
    addresses included); the other allowances are lent name by name.
  - A provider's C(catamaran_cordoned_tenants) maps a consumer's cluster id to C(state) (V(cordoned) by default,
    V(drained) or V(uncordoned)) and an optional C(reason); that consumer's peering passes it as
    O(catamaran.federation.peering#module:cordon), so the provider stops lending without un-peering.
  - A peering's C(pools) splits its provider into node pools, each a virtual node C(catamaran-<provider>.<pool>) of
    the consumer, with the keys of O(catamaran.federation.peering#module:pools) but C(cordon) (C(name),
    C(provider_node_selector), C(provider_tolerations), C(sharing_percentage), by default the peering's,
    C(node_labels), C(node_taints)); at most 16, each name a DNS-1123 label of at most 20 characters listed once, whose
    virtual node's name fits the 63 characters of a C(kubernetes.io/hostname) label.
  - A provider's C(catamaran_cordoned_pools) maps a consumer's cluster id to its pools by name, each to C(state)
    (V(cordoned) by default, V(drained) or V(uncordoned)) and an optional C(reason), as C(catamaran_cordoned_tenants)
    does for a whole tenant; that pool of the consumer's peering passes it as
    O(catamaran.federation.peering#module:pools[].cordon). A pool it names that the consumer's peering with it does
    not declare (or a consumer that does not peer with it) is an error naming the pool.
  - A peering's resource-reflection settings are the provider's C(catamaran_provider_reflection) overridden key by key
    (per kind and per field of a kind; lists replace) by the peering's own C(reflection); both take the suboptions
    of O(catamaran.federation.peering#module:reflection).
  - Every C(catamaran_*) variable of the hosts must be one of those above, C(catamaran_allow_prune_all) (see
    C(playbooks/site.yml)), a playbook switch (C(catamaran_rotate_credentials), C(catamaran_force_unpeer),
    C(catamaran_teardown_crds)) or a fact the playbooks set; any other is refused naming the hosts that have it and
    the closest known name, so that a misspelt C(catamaran_peerings) is never read as no peerings.
  - Every error is reported in one failure (each wrong cluster variable, and the first problem of each list entry);
    a peering with a provider whose own entry is wrong is left out rather than reported twice.
  - Fails with a message naming the host and the field on an invalid cluster id, a duplicate id, a peering that names
    an unknown cluster or the consumer itself, a sharing percentage outside 1-100, a Pod Security level that is
    unknown or that the provider does not allow, a credential lifetime under 600 seconds, an invalid label key or
    value (cluster labels, C(node_labels), C(provider_node_selector)), an invalid C(node_taints) entry (key, value
    or effect invalid, a key and effect listed twice, Catamaran's own taint), a C(pod_cidr_remap) or an entry of
    C(pod_cidrs) that is not a CIDR,
    health-check numbers below 1, unknown keys in any mapping (peerings, pools, C(health_check), tolerations, taints,
    offloaded namespaces, offloading policies), an invalid pool (a name that is no DNS-1123 label of at most 20
    characters or is listed twice, more than 16 pools, a virtual node name longer than 63 characters, a pool's
    placement, share, labels or taints invalid as the peering's, a C(cordon) written in the consumer's entry), an
    offloading policy without a name or with an empty C(namespace_selector),
    invalid reflection settings (an unknown kind, a policy other than DenyList or AllowList, workers
    outside 0-64), invalid provider terms (an unknown Service type or twin-name policy, a load-balancer, priority,
    storage or Ingress class that is not a valid name, an annotation key or Ingress host pattern that is not a valid
    one, a namespace lent to a tenant's network that is not a DNS-1123 label, an address range lent that is not an
    IPv4 or IPv6 network written as one, more than 32 namespaces or ranges in one list, a
    C(network_egress_to_api_server) that is not a boolean (a string such as V("yes") is refused, in a peering and in
    C(catamaran_tenant_allowances) alike), a container default or object quota that is not a quantity, a default
    request above its default limit), or an invalid offloaded namespace.
  - A peering's provider terms C(allowed_service_types), C(allowed_load_balancer_classes), C(twin_namespace_names),
    C(priority_class), C(allowed_priority_classes), C(container_defaults), C(object_quota),
    C(max_termination_grace_period), C(allowed_pod_annotations), C(allowed_storage_classes),
    C(allowed_ingress_classes), C(allowed_ingress_hosts), C(allowed_ingress_annotations),
    C(network_ingress_from_namespaces), C(network_egress_to_namespaces), C(network_egress_to_cidrs) and
    C(network_egress_to_api_server) take the values of the M(catamaran.federation.peering) options of the same
    names; unset, they are left out of the model and the module's defaults apply.
positional: hosts
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: Inventory hosts that are clusters, usually C(groups['catamaran_clusters']).
    type: list
    elements: str
    required: true
author:
  - Catamaran developers
"""

EXAMPLES = r"""
- name: Validate the whole inventory before touching any cluster
  ansible.builtin.set_fact:
    catamaran_model: "{{ hostvars | catamaran.federation.federation_model(groups['catamaran_clusters']) }}"
"""

RETURN = r"""
_value:
  description:
    - C(clusters) maps each cluster id to its connection (C(id), C(host), C(kubeconfig), C(context), C(api_server)),
      its C(labels) and, as a provider, its C(reflection) settings, C(allowed_pod_security) levels and
      C(allowances).
    - C(peerings) maps each consumer id to its resolved peerings, each holding the provider's connection and the
      ForeignCluster and ResourceOffer settings (C(reflection) merged as described above, V({}) when nothing is
      set; C(pod_security) and C(credential_lifetime) with their defaults; C(pools), V([]) without pools, each
      with its share and, where the provider cordons it, its C(cordon); the other provider terms only where
      set).
    - C(pools) maps each consumer id to its providers' ids, each to the names of the peering's pools, as the
      P(catamaran.federation.controller#role) role's
      O(catamaran.federation.controller#role:main:controller_virtual_kubelet_pools) takes them.
    - C(offloadings) maps each consumer id to its offloaded namespaces.
    - C(offloading_policies) maps each consumer id to its offloading policies.
    - C(hosts) maps each inventory host to its cluster id.
  type: dict
"""

import difflib
import functools
import ipaddress
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.module_utils import fabric, reflection, tenancy, validation
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    DEFAULT_ALLOWED_POD_ANNOTATIONS,
    DEFAULT_ALLOWED_SERVICE_TYPES,
    DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    DEFAULT_POD_SECURITY_LEVEL,
    DEFAULT_SHARING_PERCENTAGE,
    DEFAULT_TWIN_NAME_POLICY,
    POD_SECURITY_LEVELS,
)
from ansible_collections.catamaran.federation.plugins.module_utils.offloading import (
    MAPPING_STRATEGIES,
    POD_STRATEGIES,
    POLICY_MAPPING_STRATEGIES,
)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Every catamaran_* variable there is: the prefix is the collection's, so any other is a typo, refused before it can
# make a run plan removals (a misspelt catamaran_peerings reads as "no peerings").
CLUSTER_VARIABLES = (
    "catamaran_cluster_id",
    "catamaran_kubeconfig",
    "catamaran_context",
    "catamaran_cluster_labels",
    "catamaran_api_server",
    "catamaran_provider_reflection",
    "catamaran_allowed_pod_security",
    "catamaran_tenant_allowances",
    "catamaran_network",
    "catamaran_cordoned_tenants",
    "catamaran_cordoned_pools",
    "catamaran_home_api_server",
    "catamaran_peerings",
    "catamaran_offloaded_namespaces",
    "catamaran_offloading_policies",
    "catamaran_allow_prune_all",
)
# The playbooks' switches (extra variables), and the facts they set while they run.
PLAYBOOK_VARIABLES = ("catamaran_rotate_credentials", "catamaran_force_unpeer", "catamaran_teardown_crds")
RUN_FACTS = ("catamaran_model", "catamaran_probe", "catamaran_unreachable", "catamaran_skipped_peerings")
KNOWN_VARIABLES = CLUSTER_VARIABLES + PLAYBOOK_VARIABLES + RUN_FACTS
PREFIX = "catamaran_"
PEERING_KEYS = {
    "provider",
    "sharing_percentage",
    "node_labels",
    "node_taints",
    "health_check",
    "pod_cidr_remap",
    "pod_cidrs",
    "provider_node_selector",
    "provider_tolerations",
    "reflection",
    "pod_security",
    "credential_lifetime",
    "pools",
} | set(validation.TERMS_OPTIONS)
# A pool of a peering takes the peering module's pool options but its cordon, which is the provider's to set
# (catamaran_cordoned_pools).
POOL_KEYS = tuple(field for field in validation.POOL_FIELDS if field != "cordon")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "toleration_seconds")
# What a provider lends unless its inventory says more: never privileged by default.
DEFAULT_ALLOWED_POD_SECURITY = ("restricted", "baseline")
NAMESPACE_KEYS = {
    "namespace",
    "pod_offloading_strategy",
    "namespace_mapping_strategy",
    "remote_namespace_name",
    "cluster_selector",
}
POLICY_KEYS = {
    "name",
    "namespace_selector",
    "pod_offloading_strategy",
    "namespace_mapping_strategy",
    "cluster_selector",
}


def _label(value, where):
    if not isinstance(value, str) or not value or len(value) > 63 or not DNS1123_LABEL.match(value):
        raise AnsibleFilterError("%s: %r is not a DNS-1123 label" % (where, value))
    return value


def _reflection(settings, where):
    try:
        reflection.check(settings, where)
    except reflection.InvalidReflection as error:
        raise AnsibleFilterError(str(error)) from None
    return settings or {}


def _checked(check, value, where):
    """A validation shared with the peering module, its error as this filter's."""
    try:
        return check(value, where)
    except validation.InvalidSetting as error:
        raise AnsibleFilterError(str(error)) from None


def _allowed_pod_security(host, variables):
    where = "host %s: catamaran_allowed_pod_security" % host
    levels = variables.get("catamaran_allowed_pod_security", list(DEFAULT_ALLOWED_POD_SECURITY))
    if not isinstance(levels, list) or not levels:
        raise AnsibleFilterError("%s must be a non-empty list of levels, got %r" % (where, levels))
    for index, level in enumerate(levels):
        _checked(validation.pod_security, level, "%s[%d]" % (where, index))
    return [level for level in POD_SECURITY_LEVELS if level in levels]


# The allowances a peering's terms may ask of a provider, and what a provider lends unless its inventory says more
# (catamaran_tenant_allowances): the peering option each one bounds, and its default.
ALLOWANCES = (
    ("service_types", "allowed_service_types", list(DEFAULT_ALLOWED_SERVICE_TYPES)),
    ("load_balancer_classes", "allowed_load_balancer_classes", []),
    ("twin_namespace_names", "twin_namespace_names", [DEFAULT_TWIN_NAME_POLICY]),
    ("priority_classes", "allowed_priority_classes", []),
    ("pod_annotations", "allowed_pod_annotations", list(DEFAULT_ALLOWED_POD_ANNOTATIONS)),
    # None lent: a tenant's claims may name only the provider's default class, which needs no lending.
    ("storage_classes", "allowed_storage_classes", []),
    ("ingress_classes", "allowed_ingress_classes", []),
    ("ingress_hosts", "allowed_ingress_hosts", []),
    ("ingress_annotations", "allowed_ingress_annotations", []),
    # None lent: a tenant's pods reach, and are reached from, only their own twin, the cluster DNS and the fabric.
    ("network_ingress_from_namespaces", "network_ingress_from_namespaces", []),
    ("network_egress_to_namespaces", "network_egress_to_namespaces", []),
    ("network_egress_to_cidrs", "network_egress_to_cidrs", []),
)


def _range_lent(cidr, lent):
    """An address range within one of the ranges lent, of the same IP family (0.0.0.0/0 covers every IPv4 range,
    never an IPv6 one). Both are checked before (validation.network_cidrs)."""
    asked = ipaddress.ip_network(cidr, strict=False)
    return any(
        asked.version == network.version and asked.subnet_of(network)
        for network in (ipaddress.ip_network(entry, strict=False) for entry in lent)
    )


# How a value asked is covered by those lent, where not by being one of them: an annotation prefix lent (prefix/*)
# covers its keys and narrower prefixes, a host pattern lent (*.example.com, *) the hosts and patterns under it, an
# address range lent the ranges within it.
COVERED = {
    "pod_annotations": tenancy.annotation_allowed,
    "ingress_annotations": tenancy.annotation_allowed,
    "ingress_hosts": tenancy.host_lent,
    "network_egress_to_cidrs": _range_lent,
}
# The allowances that are a bound, not a list: a peering may ask at most what the provider lends (a grace period no
# longer than the one lent; true only where true is lent).
BOUND_ALLOWANCES = (
    ("max_termination_grace_period", "max_termination_grace_period", DEFAULT_MAX_TERMINATION_GRACE_SECONDS),
    # Not lent: a tenant's pods never reach the provider's API server.
    ("network_egress_to_api_server", "network_egress_to_api_server", False),
)


def _written(value):
    """A value as the inventory writes it (YAML's true and false)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _tenant_allowances(host, variables):
    where = "host %s: catamaran_tenant_allowances" % host
    given = variables.get("catamaran_tenant_allowances") or {}
    if not isinstance(given, dict):
        raise AnsibleFilterError("%s must be a mapping, got %r" % (where, given))
    names = [name for name, _option, _default in ALLOWANCES + BOUND_ALLOWANCES]
    unknown = sorted(str(key) for key in given if key not in names)
    if unknown:
        raise AnsibleFilterError("%s: unknown keys %s (allowed: %s)" % (where, unknown, ", ".join(names)))
    allowances = {}
    for name, option, default in ALLOWANCES:
        values = given.get(name, default)
        if not isinstance(values, list):
            raise AnsibleFilterError("%s.%s must be a list, got %r" % (where, name, values))
        check = dict(validation.TERMS_CHECKS)[option]
        if option == "twin_namespace_names":  # a peering names one policy; the provider lends several
            for index, value in enumerate(values):
                _checked(check, value, "%s.%s[%d]" % (where, name, index))
        else:
            _checked(check, values, "%s.%s" % (where, name))
        allowances[name] = list(values)
    for name, option, default in BOUND_ALLOWANCES:
        allowances[name] = _checked(
            dict(validation.TERMS_CHECKS)[option], given.get(name, default), "%s.%s" % (where, name)
        )
    return allowances


def _within_allowances(entry, provider, where):
    """A peering asks only what its provider's inventory lends, so a consumer's entry cannot open the provider up."""
    for name, option, _default in BOUND_ALLOWANCES:
        asked, lent = entry.get(option), provider["allowances"][name]
        # Both checked before (validation.peering_terms and _tenant_allowances): a number of seconds, or a boolean.
        if asked is not None and asked > lent:
            beyond = "not lent by provider %s" if isinstance(lent, bool) else "is above what provider %s lends"
            raise AnsibleFilterError(
                "%s: %s %s %s (host %s: catamaran_tenant_allowances.%s is %s)"
                % (where, option, _written(asked), beyond % provider["id"], provider["host"], name, _written(lent))
            )
    for name, option, _default in ALLOWANCES:
        asked = entry.get(option)
        if asked is None:
            continue
        lent = provider["allowances"][name]
        covered = COVERED.get(name, lambda value, lent: value in lent)
        beyond = [value for value in (asked if isinstance(asked, list) else [asked]) if not covered(value, lent)]
        if option == "allowed_service_types":
            beyond = [value for value in beyond if value != "ClusterIP"]
        if beyond:
            raise AnsibleFilterError(
                "%s: %s %s not lent by provider %s (host %s: catamaran_tenant_allowances.%s is %s)"
                % (
                    where,
                    option,
                    ", ".join(map(str, beyond)),
                    provider["id"],
                    provider["host"],
                    name,
                    provider["allowances"][name],
                )
            )


NETWORK_KEYS = ("mode", "gateway_address", "gateway_port", "gateway_service")
GATEWAY_SERVICE_KEYS = ("type", "node_port")


def _network(host, variables):
    where = "host %s: catamaran_network" % host
    given = variables.get("catamaran_network") or {}
    if not isinstance(given, dict):
        raise AnsibleFilterError("%s must be a mapping, got %r" % (where, given))
    unknown = sorted(str(key) for key in given if key not in NETWORK_KEYS)
    if unknown:
        raise AnsibleFilterError("%s: unknown keys %s (allowed: %s)" % (where, unknown, ", ".join(NETWORK_KEYS)))
    mode = given.get("mode", fabric.DEFAULT_MODE)
    if mode not in fabric.MODES:
        raise AnsibleFilterError("%s.mode: %r is not one of %s" % (where, mode, ", ".join(sorted(fabric.MODES))))
    port = given.get("gateway_port", fabric.DEFAULT_GATEWAY_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise AnsibleFilterError("%s.gateway_port: %r is not a UDP port (1-65535)" % (where, port))
    return dict(
        mode=mode,
        gateway_address=given.get("gateway_address"),
        gateway_port=port,
        gateway_service=_gateway_service(where, given.get("gateway_service")),
    )


def _gateway_service(where, service):
    where += ".gateway_service"
    if service is None:
        return None
    if not isinstance(service, dict):
        raise AnsibleFilterError("%s must be a mapping, got %r" % (where, service))
    unknown = sorted(str(key) for key in service if key not in GATEWAY_SERVICE_KEYS)
    if unknown:
        raise AnsibleFilterError(
            "%s: unknown keys %s (allowed: %s)" % (where, unknown, ", ".join(GATEWAY_SERVICE_KEYS))
        )
    return dict(_checked(validation.gateway_service, service, where))


def _peering_network(consumer, provider, where):
    """A peering's network option: through the fabric when both clusters are in it."""
    modes = (consumer["network"]["mode"], provider["network"]["mode"])
    if modes == ("flat", "flat"):
        return dict(mode="flat")
    if "flat" in modes:
        raise AnsibleFilterError(
            "%s: host %s has catamaran_network.mode %s but host %s has %s; a peering's two clusters need the same"
            % (where, consumer["host"], modes[0], provider["host"], modes[1])
        )
    gateway = provider["network"]
    if not gateway["gateway_address"] and not gateway["gateway_service"]:
        raise AnsibleFilterError(
            "%s: host %s (provider %s) is in the fabric but sets neither catamaran_network.gateway_address nor "
            "catamaran_network.gateway_service" % (where, provider["host"], provider["id"])
        )
    network = dict(mode="fabric", gateway_address=gateway["gateway_address"], gateway_port=gateway["gateway_port"])
    if gateway["gateway_service"]:
        network["gateway_service"] = gateway["gateway_service"]
    return network


def _cluster_labels(host, variables):
    labels = variables.get("catamaran_cluster_labels") or {}
    if not isinstance(labels, dict):
        raise AnsibleFilterError("host %s: catamaran_cluster_labels must be a mapping" % host)
    labels = dict((k, str(v)) for k, v in labels.items())  # YAML numbers and booleans are label strings
    return _checked(validation.labels, labels, "host %s: catamaran_cluster_labels" % host)


def _kubeconfig(host, variables):
    kubeconfig = variables.get("catamaran_kubeconfig")
    if not kubeconfig:
        raise AnsibleFilterError("host %s: catamaran_kubeconfig is not set" % host)
    return str(kubeconfig)


def _home_api_server(host, variables):
    given = variables.get("catamaran_home_api_server") or None
    if not given:
        return None
    return _checked(validation.home_api_server, given, "host %s: catamaran_home_api_server" % host)


CORDON_KEYS = ("state", "reason")


def _cordoned_tenants(host, variables):
    """catamaran_cordoned_tenants: consumer cluster id -> its cordon (state, reason), as the provider declares it."""
    where = "host %s: catamaran_cordoned_tenants" % host
    given = variables.get("catamaran_cordoned_tenants") or {}
    if not isinstance(given, dict):
        raise AnsibleFilterError("%s must be a mapping of consumer cluster ids, got %r" % (where, given))
    tenants = {}
    for consumer_id, cordon in given.items():
        here = "%s.%s" % (where, consumer_id)
        _label(consumer_id, here)
        cordon = cordon or {}
        if not isinstance(cordon, dict):
            raise AnsibleFilterError("%s must be a mapping (state, reason), got %r" % (here, cordon))
        unknown = sorted(str(key) for key in cordon if key not in CORDON_KEYS)
        if unknown:
            raise AnsibleFilterError("%s: unknown keys %s (allowed: %s)" % (here, unknown, ", ".join(CORDON_KEYS)))
        _checked(validation.cordon, cordon, here)
        reason = cordon.get("reason")
        tenants[consumer_id] = dict(state=cordon.get("state", "cordoned"), **({"reason": reason} if reason else {}))
    return tenants


def _cordoned_pools(host, variables):
    """catamaran_cordoned_pools: consumer cluster id -> pool name -> its cordon (state, reason), as the provider
    declares it for the pools it lends that consumer."""
    where = "host %s: catamaran_cordoned_pools" % host
    given = variables.get("catamaran_cordoned_pools") or {}
    if not isinstance(given, dict):
        raise AnsibleFilterError(
            "%s must be a mapping of consumer cluster ids to mappings of pool names, got %r" % (where, given)
        )
    cordoned = {}
    for consumer_id, pools in given.items():
        here = "%s.%s" % (where, consumer_id)
        _label(consumer_id, here)
        pools = pools or {}
        if not isinstance(pools, dict):
            raise AnsibleFilterError(
                "%s must be a mapping of pool names to cordons (state, reason), got %r" % (here, pools)
            )
        for name, cordon in pools.items():
            there = "%s.%s" % (here, name)
            _checked(validation.pool_name, name, there)
            cordon = _checked(validation.pool_cordon, cordon or {}, there)
            reason = cordon.get("reason")
            cordoned.setdefault(consumer_id, {})[name] = dict(
                state=cordon.get("state", "cordoned"), **({"reason": reason} if reason else {})
            )
    return cordoned


# A cluster's fields, each read from its variables on its own so that every wrong one is reported.
CLUSTER_FIELDS = (
    ("id", lambda host, v: _label(v.get("catamaran_cluster_id", host), "host %s: catamaran_cluster_id" % host)),
    ("kubeconfig", _kubeconfig),
    ("context", lambda host, v: v.get("catamaran_context") or None),
    ("api_server", lambda host, v: v.get("catamaran_api_server") or None),
    ("labels", _cluster_labels),
    ("allowed_pod_security", _allowed_pod_security),
    ("allowances", _tenant_allowances),
    ("network", _network),
    ("cordoned_tenants", _cordoned_tenants),
    ("cordoned_pools", _cordoned_pools),
    ("home_api_server", _home_api_server),
    (
        "reflection",
        lambda host, v: _reflection(
            v.get("catamaran_provider_reflection"), "host %s: catamaran_provider_reflection" % host
        ),
    ),
)


def _cluster(host, variables, errors):
    """The host's cluster, or None when any of its fields is wrong (each error added to `errors`)."""
    cluster = dict(host=host)
    for name, read in CLUSTER_FIELDS:
        try:
            cluster[name] = read(host, variables)
        except AnsibleFilterError as error:
            errors.append(str(error))
    return cluster if len(cluster) == len(CLUSTER_FIELDS) + 1 else None


def _pools(entry, consumer, provider, sharing, where):
    """A peering's node pools, checked as the peering module checks them, each with the peering's share unless it
    sets its own and with the cordon its provider declares for it (catamaran_cordoned_pools)."""
    where += ": pools"
    given = entry.get("pools")
    for index, pool in enumerate(given if isinstance(given, list) else []):
        if isinstance(pool, dict) and "cordon" in pool:
            raise AnsibleFilterError(
                "%s[%d]: a pool's cordon is its provider's to set: in host %s's catamaran_cordoned_pools, under %s and "
                "the pool's name" % (where, index, provider["host"], consumer["id"])
            )
    _checked(lambda pools, here: validation.pools(pools, provider["id"], here, POOL_KEYS), given, where)
    cordons = provider["cordoned_pools"].get(consumer["id"]) or {}
    resolved = []
    for pool in given or []:
        name = pool["name"]
        resolved.append(
            dict(
                name=name,
                provider_node_selector=dict(pool.get("provider_node_selector") or {}),
                provider_tolerations=list(pool.get("provider_tolerations") or []),
                sharing_percentage=pool.get("sharing_percentage", sharing),
                node_labels=dict(pool.get("node_labels") or {}),
                node_taints=list(pool.get("node_taints") or []),
                **({"cordon": cordons[name]} if name in cordons else {}),
            )
        )
    return resolved


def _peering(consumer, entry, clusters, where, broken=()):
    if not isinstance(entry, dict) or "provider" not in entry:
        raise AnsibleFilterError("%s: each peering needs a provider (a cluster id), got %r" % (where, entry))
    unknown = set(entry) - PEERING_KEYS
    if unknown:
        raise AnsibleFilterError("%s: unknown keys %s (allowed: %s)" % (where, sorted(unknown), sorted(PEERING_KEYS)))
    provider_id = entry["provider"]
    if provider_id == consumer["id"]:
        raise AnsibleFilterError("%s: a cluster cannot peer with itself" % where)
    if provider_id in broken and provider_id not in clusters:
        raise _ReportedElsewhere()
    if provider_id not in clusters:
        raise AnsibleFilterError(
            "%s: no cluster with id %r in the inventory (known: %s)" % (where, provider_id, ", ".join(sorted(clusters)))
        )
    sharing = entry.get("sharing_percentage", DEFAULT_SHARING_PERCENTAGE)
    if isinstance(sharing, bool) or not isinstance(sharing, int) or not 1 <= sharing <= 100:
        raise AnsibleFilterError("%s: sharing_percentage must be an integer from 1 to 100, got %r" % (where, sharing))
    selector = entry.get("provider_node_selector") or {}
    if not isinstance(selector, dict):
        raise AnsibleFilterError("%s: provider_node_selector must be a mapping of labels, got %r" % (where, selector))
    _checked(validation.labels, selector, where + ": provider_node_selector")
    tolerations = entry.get("provider_tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
        raise AnsibleFilterError("%s: provider_tolerations must be a list of mappings, got %r" % (where, tolerations))
    for index, toleration in enumerate(tolerations):
        unknown = sorted(str(key) for key in toleration if key not in TOLERATION_KEYS)
        if unknown:
            raise AnsibleFilterError(
                "%s: provider_tolerations[%d]: unknown keys %s (allowed: %s)"
                % (where, index, unknown, ", ".join(TOLERATION_KEYS))
            )
    settings = _reflection(entry.get("reflection"), where + ": reflection")
    provider = clusters[provider_id]
    _checked(validation.labels, entry.get("node_labels"), where + ": node_labels")
    node_labels = dict(provider["labels"])
    node_labels.update(entry.get("node_labels") or {})
    node_taints = list(_checked(validation.taints, entry.get("node_taints"), where + ": node_taints"))
    health = _checked(validation.health_check, entry.get("health_check"), where + ": health_check")
    if entry.get("pod_cidr_remap") is not None:
        _checked(validation.cidr, entry["pod_cidr_remap"], where + ": pod_cidr_remap")
    for index, cidr in enumerate(entry.get("pod_cidrs") or []):
        _checked(validation.cidr, cidr, "%s: pod_cidrs[%d]" % (where, index))
    pod_security = _checked(
        validation.pod_security, entry.get("pod_security", DEFAULT_POD_SECURITY_LEVEL), where + ": pod_security"
    )
    if pod_security not in provider["allowed_pod_security"]:
        raise AnsibleFilterError(
            "%s: pod_security %s is not allowed by provider %s (host %s: catamaran_allowed_pod_security is %s)"
            % (where, pod_security, provider_id, provider["host"], ", ".join(provider["allowed_pod_security"]))
        )
    lifetime = _checked(
        validation.credential_lifetime,
        entry.get("credential_lifetime", DEFAULT_CREDENTIAL_LIFETIME_SECONDS),
        where + ": credential_lifetime",
    )
    _checked(validation.peering_terms, entry, where + ": ")
    _within_allowances(entry, provider, where)
    pools = _pools(entry, consumer, provider, sharing, where)
    return dict(
        provider_id=provider_id,
        kubeconfig=provider["kubeconfig"],
        context=provider["context"],
        api_server=provider["api_server"],
        sharing_percentage=sharing,
        node_labels=node_labels,
        node_taints=node_taints,
        health_check=health,
        pod_cidr_remap=entry.get("pod_cidr_remap"),
        pod_cidrs=list(entry.get("pod_cidrs") or []),
        home_api_server=consumer["home_api_server"],
        network=_peering_network(consumer, provider, where),
        provider_node_selector=dict((str(k), str(v)) for k, v in selector.items()),
        provider_tolerations=tolerations,
        reflection=reflection.merge(provider["reflection"], settings),
        pod_security=pod_security,
        credential_lifetime=lifetime,
        pools=pools,
        **(
            {"cordon": provider["cordoned_tenants"][consumer["id"]]}
            if consumer["id"] in provider["cordoned_tenants"]
            else {}
        ),
        # The provider's other terms as the entry sets them; unset ones are left out (the role omits them), so the
        # peering module's defaults apply.
        **dict((option, entry[option]) for option in validation.TERMS_OPTIONS if entry.get(option) is not None),
    )


def _offloading(entry, where):
    _entry(entry, where, "namespace", NAMESPACE_KEYS, "offloaded namespace")
    return dict(
        namespace=entry["namespace"],
        remote_namespace_name=entry.get("remote_namespace_name"),
        **_strategies(entry, where, MAPPING_STRATEGIES),
    )


def _offloading_policy(entry, where):
    _entry(entry, where, "name", POLICY_KEYS, "offloading policy")
    selector = entry.get("namespace_selector")
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        raise AnsibleFilterError(
            "%s: namespace_selector must hold matchLabels or matchExpressions (empty, it would offload every "
            "namespace)" % where
        )
    return dict(
        name=entry["name"],
        namespace_selector=selector,
        **_strategies(entry, where, POLICY_MAPPING_STRATEGIES, " (SelectedName names one twin)"),
    )


def _entry(entry, where, key, allowed, what):
    """An entry of an offloading list: a mapping with `key` (a DNS label) and no key outside `allowed`."""
    if not isinstance(entry, dict) or key not in entry:
        raise AnsibleFilterError("%s: each %s needs a %s, got %r" % (where, what, key, entry))
    unknown = set(entry) - allowed
    if unknown:
        raise AnsibleFilterError("%s: unknown keys %s (allowed: %s)" % (where, sorted(unknown), sorted(allowed)))
    _label(entry[key], "%s: %s" % (where, key))


def _strategies(entry, where, mapping_strategies, why=""):
    """An entry's strategies and cluster selector, the strategies defaulted as the modules default them."""
    resolved = dict(
        pod_offloading_strategy=entry.get("pod_offloading_strategy", "LocalAndRemote"),
        namespace_mapping_strategy=entry.get("namespace_mapping_strategy", "DefaultName"),
        cluster_selector=entry.get("cluster_selector"),
    )
    if resolved["pod_offloading_strategy"] not in POD_STRATEGIES:
        raise AnsibleFilterError("%s: pod_offloading_strategy must be one of %s" % (where, ", ".join(POD_STRATEGIES)))
    if resolved["namespace_mapping_strategy"] not in mapping_strategies:
        raise AnsibleFilterError(
            "%s: namespace_mapping_strategy must be one of %s%s" % (where, ", ".join(mapping_strategies), why)
        )
    return resolved


class _ReportedElsewhere(Exception):
    """An entry that depends on a cluster whose own error is already reported."""


def _entries(host, variables, name, resolve, key, twice, errors):
    """The host's list variable `name`, each valid entry resolved and each error added to `errors`; the `key` of each
    entry once (else `twice` names it)."""
    given = variables.get(name) or []
    if not isinstance(given, list):
        errors.append("host %s: %s must be a list, got %r" % (host, name, given))
        return []
    resolved = []
    for index, entry in enumerate(given):
        where = "host %s: %s[%d]" % (host, name, index)
        try:
            item = resolve(entry, where=where)
        except _ReportedElsewhere:
            continue
        except AnsibleFilterError as error:
            errors.append(str(error))
            continue
        if item[key] in [earlier[key] for earlier in resolved]:
            errors.append("%s: %s" % (where, twice % item[key]))
            continue
        resolved.append(item)
    return resolved


def _unknown_variables(hostvars, hosts):
    """One error per unknown catamaran_* variable, naming the hosts that have it and the closest known name."""
    having = {}
    for host in hosts:
        for name in hostvars[host]:
            if str(name).startswith(PREFIX) and name not in KNOWN_VARIABLES:
                having.setdefault(str(name), []).append(host)
    errors = []
    # Compared without the shared prefix, which would make every name look close.
    suffixes = dict((known[len(PREFIX) :], known) for known in KNOWN_VARIABLES)
    for name, where in sorted(having.items()):
        closest = [suffixes[close] for close in difflib.get_close_matches(name[len(PREFIX) :], suffixes, n=1)]
        errors.append(
            "host%s %s: unknown variable %s%s"
            % (
                "s" if len(where) > 1 else "",
                ", ".join(where),
                name,
                " (did you mean %s?)" % closest[0] if closest else " (known: %s)" % ", ".join(CLUSTER_VARIABLES),
            )
        )
    return errors


def _undeclared_cordoned_pools(clusters, peerings, unresolved):
    """One error per pool a provider cordons (catamaran_cordoned_pools) that the consumer's peering with it does not
    declare; consumers whose own entries are wrong (`unresolved`) are left to their errors."""
    errors = []
    for provider_id, provider in sorted(clusters.items()):
        for consumer_id, cordoned in sorted(provider["cordoned_pools"].items()):
            where = "host %s: catamaran_cordoned_pools.%s" % (provider["host"], consumer_id)
            if consumer_id in unresolved:
                continue
            if consumer_id not in clusters:
                errors.append(
                    "%s: no cluster with id %r in the inventory (known: %s)"
                    % (where, consumer_id, ", ".join(sorted(clusters)))
                )
                continue
            peering = [entry for entry in peerings[consumer_id] if entry["provider_id"] == provider_id]
            if not peering:
                errors.append(
                    "%s: cluster %s (host %s) does not peer with %s, so it has no pool %s to cordon"
                    % (where, consumer_id, clusters[consumer_id]["host"], provider_id, ", ".join(sorted(cordoned)))
                )
                continue
            declared = [pool["name"] for pool in peering[0]["pools"]]
            for name in sorted(set(cordoned) - set(declared)):
                errors.append(
                    "%s.%s: the peering of %s (host %s) with %s declares no pool %s (%s)"
                    % (
                        where,
                        name,
                        consumer_id,
                        clusters[consumer_id]["host"],
                        provider_id,
                        name,
                        "its pools: %s" % ", ".join(declared) if declared else "it declares no pools",
                    )
                )
    return errors


def _failure(errors):
    if len(errors) == 1:
        return AnsibleFilterError(errors[0])
    return AnsibleFilterError(
        "the inventory has %d errors:\n%s" % (len(errors), "\n".join("- " + error for error in errors))
    )


def federation_model(hostvars, hosts):
    errors = _unknown_variables(hostvars, hosts)
    clusters, broken = {}, set()
    for host in hosts:
        cluster = _cluster(host, hostvars[host], errors)
        if cluster is None:
            broken.add(hostvars[host].get("catamaran_cluster_id", host))
            continue
        if cluster["id"] in clusters:
            errors.append(
                "hosts %s and %s both have cluster id %s" % (clusters[cluster["id"]]["host"], host, cluster["id"])
            )
            continue
        clusters[cluster["id"]] = cluster
    peerings, offloadings, policies = {}, {}, {}
    unresolved = set(broken)  # clusters whose peerings are not all resolved
    for cluster_id, cluster in sorted(clusters.items()):
        host = cluster["host"]
        variables = hostvars[host]
        before = len(errors)
        resolved = _entries(
            host,
            variables,
            "catamaran_peerings",
            functools.partial(_peering, cluster, clusters=clusters, broken=broken),
            "provider_id",
            "%s is peered twice",
            errors,
        )
        peering_errors = len(errors) > before
        if peering_errors:
            unresolved.add(cluster_id)
        peerings[cluster_id] = resolved
        namespaces = _entries(
            host,
            variables,
            "catamaran_offloaded_namespaces",
            _offloading,
            "namespace",
            "namespace %s is listed twice",
            errors,
        )
        selecting = _entries(
            host,
            variables,
            "catamaran_offloading_policies",
            _offloading_policy,
            "name",
            "policy %s is listed twice",
            errors,
        )
        declares_offloading = variables.get("catamaran_offloaded_namespaces") or variables.get(
            "catamaran_offloading_policies"
        )
        if declares_offloading and not resolved and not peering_errors:
            errors.append(
                "host %s offloads namespaces but peers with no provider (catamaran_peerings is empty)" % cluster["host"]
            )
        offloadings[cluster_id] = namespaces
        policies[cluster_id] = selecting
    errors.extend(_undeclared_cordoned_pools(clusters, peerings, unresolved))
    if errors:
        raise _failure(errors)
    hosts_to_ids = dict((cluster["host"], cluster_id) for cluster_id, cluster in clusters.items())
    return dict(
        clusters=clusters,
        hosts=hosts_to_ids,
        peerings=peerings,
        pools=dict(
            (cluster_id, dict((entry["provider_id"], [pool["name"] for pool in entry["pools"]]) for entry in resolved))
            for cluster_id, resolved in peerings.items()
        ),
        offloadings=offloadings,
        offloading_policies=policies,
    )


class FilterModule(object):
    def filters(self):
        return {"federation_model": federation_model}
