# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Peer a consumer with a provider, and take the peering apart again.

Tenant objects come from tenancy.py, the same file the controller uses, so the module and the
controller cannot disagree about names or rights.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import time

from ansible_collections.catamaran.federation.plugins.module_utils import crds, fabric, networks, reflection, validation
from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import (
    InvalidInput,
    check_cluster_id,
    connection_options,
)
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    CORE_GROUP,
    DEFAULT_ALLOWED_POD_ANNOTATIONS,
    DEFAULT_ALLOWED_SERVICE_TYPES,
    DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    DEFAULT_POD_SECURITY_LEVEL,
    DEFAULT_SHARING_PERCENTAGE,
    DEFAULT_TWIN_NAME_POLICY,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TENANT,
    LABEL_TYPE,
    MANAGED_BY_CATAMARAN,
    NODE_LEASE_NAMESPACE,
    OFFLOADING_GROUP,
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    TENANT_CREDENTIAL_SECRET,
    TENANT_PRIORITY_CLASS,
    TYPE_VIRTUAL_NODE,
    VERSION,
    tenant_namespace,
    virtual_node_name,
)
from ansible_collections.catamaran.federation.plugins.module_utils.kube import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ClusterError,
    ClusterUnreachable,
)
from ansible_collections.catamaran.federation.plugins.module_utils.tenancy import (
    provider_cluster_objects,
    tenant_kubeconfig,
    tenant_manifests,
)

try:
    import yaml
except ImportError:
    yaml = None

FOREIGN_CLUSTER_API = "%s/%s" % (CORE_GROUP, VERSION)
OFFLOADING_API = "%s/%s" % (OFFLOADING_GROUP, VERSION)
CRD_API = "apiextensions.k8s.io/v1"
PRIORITY_CLASS_API = "scheduling.k8s.io/v1"
FOREIGN_CLUSTER_CRD = "foreignclusters.%s" % CORE_GROUP
CONSUMER_CRDS = (FOREIGN_CLUSTER_CRD,)
PROVIDER_CRDS = tuple("%s.%s" % (p, OFFLOADING_GROUP) for p in ("shadowpods", "twinnamespaces", "resourceoffers"))
TOKEN_PLACEHOLDER = "issued-by-the-provider-on-apply"


MAX_POD_CIDRS = 8  # as many as the ForeignCluster's spec.networking.podCIDRs holds
CONSENT_FIELD = ("spec", "networking", "podCIDRs")
RESOURCE_OFFER_CRD = "resourceoffers.%s" % OFFLOADING_GROUP
POOLS_FIELD = ("spec", "pools")
# Terms a release added to the ResourceOffer, and what they are the terms of (for the plan of an upgrade).
ADDED_TERMS_FIELDS = (
    (("spec", "pods"), "the tenant's pods"),
    (("spec", "storage"), "the tenant's PersistentVolumeClaims"),
    (("spec", "ingress"), "the tenant's Ingresses"),
    (("spec", "isolation"), "the tenant's network"),
    (("spec", "consumerAPIServer"), "the tenant's network (the consumer's API server)"),
    (("spec", "cordon"), "the tenant's cordon"),
    (POOLS_FIELD, "the tenant's node pools"),
)


def api_toleration(toleration):
    """A module toleration (snake_case options) as the API writes it."""
    names = {"toleration_seconds": "tolerationSeconds"}
    return dict((names.get(key, key), value) for key, value in toleration.items() if value is not None)


def api_taint(taint):
    """A module taint as the ForeignCluster's spec.nodeTaints holds it (no unset value)."""
    return dict((key, taint[key]) for key in ("key", "value", "effect") if taint.get(key) is not None)


def api_cordon(cordon):
    """A cordon option as the ResourceOffer holds it ({drain, reason}), or None when it lends all (uncordoned)."""
    if not cordon or cordon.get("state", "cordoned") == "uncordoned":
        return None
    written = {"drain": cordon.get("state") == "drained"}
    if cordon.get("reason"):
        written["reason"] = cordon["reason"]
    return written


def offer_pools(params):
    """The provider's terms of each pool (ResourceOffer spec.pools), in the order given: its placement (which replaces
    the tenant's for the pool's pods), its share (unset, the peering's) and its cordon; [] without pools."""
    sharing = params.get("sharing_percentage")
    written = []
    for pool in params.get("pools") or []:
        entry = {"name": pool["name"]}
        if pool.get("provider_node_selector"):
            entry["nodeSelector"] = dict(pool["provider_node_selector"])
        if pool.get("provider_tolerations"):
            entry["tolerations"] = [api_toleration(t) for t in pool["provider_tolerations"]]
        entry["sharingPercentage"] = (
            pool["sharing_percentage"]
            if pool.get("sharing_percentage") is not None
            else (DEFAULT_SHARING_PERCENTAGE if sharing is None else sharing)
        )
        cordon = api_cordon(pool.get("cordon"))
        if cordon:
            entry["cordon"] = cordon
        written.append(entry)
    return written


def foreign_pools(params):
    """The consumer's settings of each pool's virtual node (ForeignCluster spec.pools): labels and taints besides the
    peering's; [] without pools."""
    written = []
    for pool in params.get("pools") or []:
        entry = {"name": pool["name"]}
        if pool.get("node_labels"):
            entry["nodeLabels"] = dict(pool["node_labels"])
        if pool.get("node_taints"):
            entry["nodeTaints"] = [api_taint(t) for t in pool["node_taints"]]
        written.append(entry)
    return written


def virtual_nodes(provider_id, params):
    """The peering's virtual nodes: its pools' (catamaran-<provider>.<pool>) when it has pools, else its one node."""
    pools = params.get("pools") or []
    if pools:
        return [virtual_node_name(provider_id, pool["name"]) for pool in pools]
    return [virtual_node_name(provider_id)]


def terms(params):
    """The tenant's terms the provider keeps in its ResourceOffer; unset options take the controller's defaults.

    Container defaults and object quota are merged over the defaults resource by resource, quantities written as
    strings; a quantity that is not one raises validation.InvalidSetting (Peering.validate reports it first).
    """

    def given(option, default):
        return default if params.get(option) is None else params[option]

    def listed(option, default=()):
        values = given(option, default)
        # Each once, in the order given (the CRD caps the lengths); anything but a list is left for validate.
        return list(dict.fromkeys(values)) if isinstance(values, (list, tuple)) else values

    return {
        "podSecurity": given("pod_security", DEFAULT_POD_SECURITY_LEVEL),
        # The provider's own copy of the share: the tenant's quota is derived from it, whatever the consumer says.
        "sharingPercentage": given("sharing_percentage", DEFAULT_SHARING_PERCENTAGE),
        "credentialLifetimeSeconds": given("credential_lifetime", DEFAULT_CREDENTIAL_LIFETIME_SECONDS),
        "services": {
            "allowedTypes": listed("allowed_service_types", DEFAULT_ALLOWED_SERVICE_TYPES),
            "allowedLoadBalancerClasses": listed("allowed_load_balancer_classes"),
        },
        "twinNamespaceNames": given("twin_namespace_names", DEFAULT_TWIN_NAME_POLICY),
        "priorityClassName": given("priority_class", TENANT_PRIORITY_CLASS),
        "allowedPriorityClasses": listed("allowed_priority_classes"),
        "containerDefaults": validation.container_defaults(params.get("container_defaults"), "container_defaults"),
        "objectQuota": validation.object_quota(params.get("object_quota"), "object_quota"),
        "pods": {
            "maxTerminationGracePeriodSeconds": given(
                "max_termination_grace_period", DEFAULT_MAX_TERMINATION_GRACE_SECONDS
            ),
            "allowedAnnotations": listed("allowed_pod_annotations", DEFAULT_ALLOWED_POD_ANNOTATIONS),
        },
        # Unset, none named: a tenant's claims may name only the provider's default class (what a claim naming none
        # gets), never one the provider keeps for itself.
        "storage": {"allowedClasses": listed("allowed_storage_classes")},
        # Unset, none: a tenant's Ingress is refused until the provider lends a class and hosts.
        "ingress": {
            "allowedClasses": listed("allowed_ingress_classes"),
            "allowedHosts": listed("allowed_ingress_hosts"),
            "allowedAnnotations": listed("allowed_ingress_annotations"),
        },
        # Unset, none lent: a tenant's pods reach, and are reached from, only their own twin, the cluster DNS and the
        # fabric (the NetworkPolicy the provider's manager keeps in every twin), never the provider's API server.
        # Always written, so un-setting an option (or setting it back to false) takes back what was lent before.
        "isolation": {
            "ingressFromNamespaces": listed("network_ingress_from_namespaces"),
            "egressToNamespaces": listed("network_egress_to_namespaces"),
            "egressToCIDRs": listed("network_egress_to_cidrs"),
            "egressToAPIServer": given("network_egress_to_api_server", False),
        },
    }


def credentials_secret_name(provider_id):
    return "catamaran-credentials-%s" % provider_id


class Peering:
    """One consumer -> provider peering, with both clusters connected."""

    def __init__(self, module, consumer, provider, consumer_id, provider_id):
        self.module = module
        self.consumer = consumer
        self.provider = provider
        self.consumer_id = consumer_id
        self.provider_id = provider_id
        self.tenant_namespace = tenant_namespace(consumer_id)
        self.node_name = virtual_node_name(provider_id)
        self.secret_name = credentials_secret_name(provider_id)
        self._consumer_pod_cidrs = None
        self._consented = None
        self.fabric = fabric.Exchange(
            consumer, provider, consumer_id, provider_id, self.tenant_namespace, warn=self._warn
        )

    def _warn(self, message):
        self.module.ansible.warn(message)

    # -- shared checks -------------------------------------------------------------------------
    @staticmethod
    def validate(params):
        consumer_id = check_cluster_id(params["consumer_id"], "consumer_id")
        provider_id = check_cluster_id(params["provider_id"], "provider_id")
        if consumer_id == provider_id:
            raise InvalidInput("a cluster cannot peer with itself (consumer_id == provider_id == %r)" % consumer_id)
        sharing = params.get("sharing_percentage")
        if sharing is not None and not 1 <= sharing <= 100:
            raise InvalidInput("sharing_percentage must be between 1 and 100, got %s" % sharing)
        try:
            validation.tolerations(params.get("provider_tolerations"), "provider_tolerations")
            validation.labels(params.get("node_labels"), "node_labels")
            validation.taints(params.get("node_taints"), "node_taints")
            validation.labels(params.get("provider_node_selector"), "provider_node_selector")
            if params.get("pod_cidr_remap"):
                validation.cidr(params["pod_cidr_remap"], "pod_cidr_remap")
            for index, cidr in enumerate(params.get("pod_cidrs") or []):
                validation.cidr(cidr, "pod_cidrs[%d]" % index)
            if len(params.get("pod_cidrs") or []) > MAX_POD_CIDRS:
                raise validation.InvalidSetting("pod_cidrs: at most %d ranges" % MAX_POD_CIDRS)
            if params.get("home_api_server"):
                validation.home_api_server(params["home_api_server"], "home_api_server")
            validation.health_check(params.get("health_check"), "health_check")
            for field in ("wait_timeout", "drain_timeout"):
                validation.positive(params.get(field), field)
            validation.positive(params.get("request_timeout"), "request_timeout")
            for side in ("consumer", "provider"):
                validation.positive((params.get(side) or {}).get("request_timeout"), "%s.request_timeout" % side)
            validation.peering_terms(params)
            if params.get("cordon"):
                validation.cordon(params["cordon"], "cordon")
            validation.pools(params.get("pools"), provider_id, "pools")
            agreed = terms(params)
            validation.pod_security(agreed["podSecurity"], "pod_security")
            validation.credential_lifetime(agreed["credentialLifetimeSeconds"], "credential_lifetime")
            reflection.check(params.get("reflection"), "reflection")
        except (validation.InvalidSetting, reflection.InvalidReflection) as error:
            raise InvalidInput(str(error)) from None
        state = params.get("state", "present")
        if params.get("force") and state != "absent":
            raise InvalidInput("force applies only to state=absent (it un-peers when one cluster is gone)")
        if params.get("rotate_credential") and state != "present":
            raise InvalidInput("rotate_credential applies only to state=present")
        if state == "present":
            fabric.check(params)
        return consumer_id, provider_id

    def check_clusters(self, params):
        if self.consumer.server and self.consumer.server == self.provider.server:
            raise InvalidInput(
                "consumer %s and provider %s are the same API server (%s)"
                % (self.consumer_id, self.provider_id, self.consumer.server)
            )
        for cluster, names in ((self.consumer, CONSUMER_CRDS), (self.provider, PROVIDER_CRDS)):
            missing = [n for n in names if cluster.get(CRD_API, "CustomResourceDefinition", n) is None]
            if missing:
                message = "%s lacks Catamaran's CRDs (%s): install them first (catamaran.federation.crds)" % (
                    cluster.label,
                    ", ".join(missing),
                )
                if not self.module.check_mode:
                    raise InvalidInput(message)
                # A plan of a new federation: the crds role's dry run installed nothing, so plan as if it had.
                self.module.ansible.warn(message + "; the plan assumes they are installed first")
        if params.get("pools") and not self.module.check_mode:
            # An API server prunes a field its CRD does not declare: the pools would be dropped without a word.
            for cluster, crd in ((self.provider, RESOURCE_OFFER_CRD), (self.consumer, FOREIGN_CLUSTER_CRD)):
                if cluster.get(CRD_API, "CustomResourceDefinition", crd) and not crds.serves_field(
                    cluster, crd, POOLS_FIELD
                ):
                    raise InvalidInput(
                        "%s: its CRD %s has no spec.pools, so the pools %s would be dropped: upgrade Catamaran's "
                        "CRDs first (catamaran.federation.crds)"
                        % (cluster.label, crd, ", ".join(pool["name"] for pool in params["pools"]))
                    )
        existing = self.provider.get("v1", "Namespace", self.tenant_namespace)
        labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
        if existing and labels.get(LABEL_MANAGED_BY) != MANAGED_BY_CATAMARAN:
            raise InvalidInput(
                "%s: namespace %s exists but Catamaran does not manage it (no label %s=%s); "
                "it will not be taken over"
                % (self.provider.label, self.tenant_namespace, LABEL_MANAGED_BY, MANAGED_BY_CATAMARAN)
            )
        if params.get("pod_cidr_remap"):
            try:
                validation.remap_covers(params["pod_cidr_remap"], self.consented_pod_cidrs(params), "pod_cidr_remap")
            except validation.InvalidSetting as error:
                raise InvalidInput("%s: %s" % (self.provider.label, error)) from None
        priority_class = terms(params)["priorityClassName"]
        # Catamaran's own class is applied with the tenant; any other must be the provider's already.
        if priority_class != TENANT_PRIORITY_CLASS and not self.provider.get(
            PRIORITY_CLASS_API, "PriorityClass", priority_class
        ):
            raise InvalidInput(
                "%s: priority_class %s: no such PriorityClass (every pod of the tenant would be refused)"
                % (self.provider.label, priority_class)
            )

    def _provider_pod_cidrs(self):
        """The provider's pod ranges as its ResourceOffer reports them; before the first peering, its nodes'."""
        offer = self.provider.get(OFFLOADING_API, "ResourceOffer", RESOURCE_OFFER_NAME, self.tenant_namespace)
        reported = ((offer or {}).get("status") or {}).get("podCIDRs")
        if reported:
            return reported
        return node_pod_cidrs(self.provider)

    def consented_pod_cidrs(self, params):
        """The provider's pod ranges the consumer consents to (ForeignCluster spec.networking.podCIDRs): as stated,
        else as recorded before (a run never widens a consent by itself), else what the provider announces now, at
        the first peering. Read once per run."""
        if self._consented is None:
            foreign = self.consumer.get(FOREIGN_CLUSTER_API, "ForeignCluster", self.provider_id, SYSTEM_NAMESPACE)
            recorded = (((foreign or {}).get("spec") or {}).get("networking") or {}).get("podCIDRs")
            stated = params.get("pod_cidrs")
            if stated:
                self._consented = networks.normalised(stated)
            elif recorded:  # none recorded (the provider announced none at its peering): the announcement now
                self._consented = list(recorded)
            else:
                self._consented = list(self._provider_pod_cidrs())
            announced = self._provider_pod_cidrs()
            refused = networks.judge_announced(announced, self._consented)[1]
            if refused:
                self.module.ansible.warn(
                    "%s announces pod ranges %s is not consenting to: %s; they are neither shown nor routed (state "
                    "them in pod_cidrs for a new consent)"
                    % (
                        self.provider.label,
                        self.consumer.label,
                        "; ".join("%s (%s)" % (cidr, why) for cidr, _reason, why in refused),
                    )
                )
        return self._consented

    def _consent_served(self, changes):
        """Can the ForeignCluster hold the consent? In check mode the CRDs an upgrade brings are not applied yet, so
        the dry run of a field the served CRD lacks would fail: the plan says the consent comes with the upgrade."""
        return not changes.check_mode or crds.serves_field(self.consumer, FOREIGN_CLUSTER_CRD, CONSENT_FIELD)

    def consumer_pod_cidrs(self):
        """The consumer's pod ranges, announced to the provider in the ResourceOffer (read once per run)."""
        if self._consumer_pod_cidrs is None:
            self._consumer_pod_cidrs = node_pod_cidrs(self.consumer)
        return self._consumer_pod_cidrs

    # -- present -------------------------------------------------------------------------------
    def present(self, params):
        """Dry-run everything on both clusters first, so bad input fails before any change."""
        self.check_clusters(params)
        if not self.consumer_pod_cidrs():
            self.module.ansible.warn(
                "%s: no node reports spec.podCIDRs, so none are announced to %s (consumerPodCIDRs) and the tenant's "
                "EndpointSlices there may hold no address" % (self.consumer.label, self.provider.label)
            )
        rotate = params.get("rotate_credential")
        self.fabric.check_mode = self.module.check_mode
        plan = ChangeSet(check_mode=True)
        self._converge(plan, params)
        if rotate:
            plan.note(
                "rotate %s: Secret %s/%s (its manager mints a new token)"
                % (self.provider.label, self.tenant_namespace, TENANT_CREDENTIAL_SECRET)
            )
        if self.module.check_mode or not plan.changed:
            return plan  # nothing would change: a second pass would only repeat the same reads
        changes = ChangeSet(check_mode=False)
        self._converge(changes, params, rotate=rotate)
        return changes

    def _converge(self, changes, params, rotate=False):
        # Shared by every tenant of the provider: applied with each peering, removed with the last one.
        for obj in provider_cluster_objects():
            changes.apply(self.provider, obj)
        for obj in tenant_manifests(self.consumer_id):
            changes.apply(self.provider, obj)
        changes.ensure(self.consumer, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
        changes.ensure(self.provider, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})
        offer_network, foreign_networking, announced = self.fabric.converge(
            changes, params, self.consumer_pod_cidrs(), self.consented_pod_cidrs(params)
        )
        consent = self.consented_pod_cidrs(params)
        if consent and self._consent_served(changes):
            foreign_networking = dict(foreign_networking, podCIDRs=consent)
        elif consent:
            changes.note(
                "%s: record the consent to %s's pod ranges %s once its ForeignCluster CRD serves"
                " spec.networking.podCIDRs (the crds step of the same run upgrades it; a check-mode run cannot)"
                % (self.consumer.label, self.provider.label, ", ".join(consent))
            )
        offer = self.resource_offer(params, announced, offer_network)
        for field, of_what in ADDED_TERMS_FIELDS:
            if (
                field[-1] in offer["spec"]
                and changes.check_mode
                and not crds.serves_field(self.provider, RESOURCE_OFFER_CRD, field)
            ):
                del offer["spec"][field[-1]]
                changes.note(
                    "%s: write the terms of %s (%s) once its ResourceOffer CRD serves them (the crds step of the same "
                    "run upgrades it; a check-mode run cannot)" % (self.provider.label, of_what, ".".join(field))
                )
        changes.apply(self.provider, offer)
        replaced = None
        if rotate:
            current = self.provider.get("v1", "Secret", TENANT_CREDENTIAL_SECRET, self.tenant_namespace)
            replaced = ((current or {}).get("metadata") or {}).get("uid")
            changes.delete(self.provider, "v1", "Secret", TENANT_CREDENTIAL_SECRET, self.tenant_namespace)
        token = self._token(params["wait_timeout"] if not changes.check_mode else None, replaced)
        server = params["provider"].get("api_server") or self.provider.server
        credential = tenant_kubeconfig(
            server, self.provider.ca_data, token or TOKEN_PLACEHOLDER, self.provider_id, self.consumer_id
        )
        labels = {MANAGED_BY_LABEL: MANAGED_BY, LABEL_REMOTE_CLUSTER_ID: self.provider_id}
        changes.apply(
            self.consumer,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": self.secret_name, "namespace": SYSTEM_NAMESPACE, "labels": labels},
                "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(credential).encode()).decode()},
            },
        )
        foreign = self.foreign_cluster(params, labels, foreign_networking)
        if (
            "pools" in foreign["spec"]
            and changes.check_mode
            and not crds.serves_field(self.consumer, FOREIGN_CLUSTER_CRD, POOLS_FIELD)
        ):
            del foreign["spec"]["pools"]
            changes.note(
                "%s: write the settings of the node pools' virtual nodes (spec.pools) once its ForeignCluster CRD "
                "serves them (the crds step of the same run upgrades it; a check-mode run cannot)" % self.consumer.label
            )
        changes.apply(self.consumer, foreign)

    def resource_offer(self, params, consumer_pod_cidrs=(), network=None):
        """The tenant's placement and terms on the provider: the manager reads it, the tenant may only read it.

        consumer_pod_cidrs: the consumer's pod ranges, the only addresses its EndpointSlices may hold there.
        network: how the two clusters' pods reach each other (fabric.Exchange).
        """
        spec = dict(terms(params), clusterID=self.provider_id)
        if network:
            spec["network"] = network
        if params.get("provider_node_selector"):
            spec["nodeSelector"] = params["provider_node_selector"]
        if params.get("provider_tolerations"):
            spec["tolerations"] = [api_toleration(t) for t in params["provider_tolerations"]]
        if consumer_pod_cidrs:
            spec["consumerPodCIDRs"] = list(consumer_pod_cidrs)
        if params.get("home_api_server"):
            # Where the tenant's pods reach it: the provider's manager lets them (the twins' NetworkPolicy).
            spec["consumerAPIServer"] = params["home_api_server"]
        cordon = api_cordon(params.get("cordon"))
        if cordon:
            spec["cordon"] = cordon
        # Without pools, no field at all: the apply then removes the pools an earlier run wrote.
        pools = offer_pools(params)
        if pools:
            spec["pools"] = pools
        return {
            "apiVersion": OFFLOADING_API,
            "kind": "ResourceOffer",
            "metadata": {
                "name": RESOURCE_OFFER_NAME,
                "namespace": self.tenant_namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            },
            "spec": spec,
        }

    def foreign_cluster(self, params, labels, networking=None):
        spec = {"clusterID": self.provider_id, "credentialsSecretRef": {"name": self.secret_name, "key": "kubeconfig"}}
        if params.get("sharing_percentage") is not None:
            spec["sharingPercentage"] = params["sharing_percentage"]
        if params.get("node_labels"):
            spec["nodeLabels"] = params["node_labels"]
        if params.get("node_taints"):
            spec["nodeTaints"] = [api_taint(t) for t in params["node_taints"]]
        if params.get("home_api_server"):
            spec["homeAPIServer"] = params["home_api_server"]
        health = params.get("health_check") or {}
        health_spec = {
            camel: health[key]
            for key, camel in (
                ("period_seconds", "periodSeconds"),
                ("timeout_seconds", "timeoutSeconds"),
                ("failure_threshold", "failureThreshold"),
            )
            if health.get(key) is not None
        }
        if health_spec:
            spec["healthCheck"] = health_spec
        networking = dict(networking or {})
        if params.get("pod_cidr_remap"):
            networking["podCIDRRemap"] = params["pod_cidr_remap"]
        if networking:
            spec["networking"] = networking
        reflected = reflection.spec(params.get("reflection"))
        if reflected:
            spec["reflection"] = reflected
        pools = foreign_pools(params)
        if pools:
            spec["pools"] = pools
        return {
            "apiVersion": FOREIGN_CLUSTER_API,
            "kind": "ForeignCluster",
            "metadata": {"name": self.provider_id, "namespace": SYSTEM_NAMESPACE, "labels": labels},
            "spec": spec,
        }

    def _token(self, timeout, replaced=None):
        """The tenant's current token, minted by the provider's manager; None in a dry run before it exists.

        With a timeout, waits for it (and, after a rotation, for one in a new Secret than uid `replaced`).
        """

        def issued(secret):
            fresh = ((secret or {}).get("metadata") or {}).get("uid") != replaced
            return fresh and bool(((secret or {}).get("data") or {}).get("token"))

        secret = self.provider.get("v1", "Secret", TENANT_CREDENTIAL_SECRET, self.tenant_namespace)
        if not issued(secret) and timeout:
            done, secret = self.provider.watch_until(
                "v1", "Secret", TENANT_CREDENTIAL_SECRET, self.tenant_namespace, issued, timeout
            )
            if not done:
                raise InvalidInput(
                    "%s: no credential for tenant %s after %ss (Secret %s/%s key token): the provider's catamaran "
                    "manager mints it and must be running (catamaran.federation.controller on %s)"
                    % (
                        self.provider.label,
                        self.consumer_id,
                        timeout,
                        self.tenant_namespace,
                        TENANT_CREDENTIAL_SECRET,
                        self.provider_id,
                    )
                )
        if not issued(secret):
            return None
        token = base64.b64decode(secret["data"]["token"]).decode()
        self.module.hide(token, secret["data"]["token"])
        return token

    def wait_ready(self, timeout, fabric=False, nodes=None):
        """Until the virtual nodes (`nodes`, by default the one pool-less node) are Ready and, in the fabric, the
        provider's pod ranges as the consumer sees them are known (the consumer's other fabric peerings announce them
        to their providers). One deadline for all."""
        deadline = time.monotonic() + timeout

        def ready(node):
            conditions = ((node or {}).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        def ranges_known(foreign):
            return bool((((foreign or {}).get("status") or {}).get("network") or {}).get("remotePodCIDRs"))

        def left():
            return max(1, int(deadline - time.monotonic()))

        waiting = None
        for name in nodes or [self.node_name]:
            if not self.consumer.watch_until("v1", "Node", name, None, ready, left())[0]:
                waiting = name
                break
        done = waiting is None
        if done and fabric:
            done = self.consumer.watch_until(
                FOREIGN_CLUSTER_API, "ForeignCluster", self.provider_id, SYSTEM_NAMESPACE, ranges_known, left()
            )[0]
        if not done:
            foreign = self.consumer.get(FOREIGN_CLUSTER_API, "ForeignCluster", self.provider_id, SYSTEM_NAMESPACE)
            conditions = ((foreign or {}).get("status") or {}).get("conditions") or []
            why = (
                "; ".join(
                    "%s=%s %s: %s" % (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                    for c in conditions
                )
                or "no status yet (is its virtual kubelet running?)"
            )
            what = (
                "virtual node %s is not Ready" % waiting
                if waiting
                else "the pod ranges of %s are not known (ForeignCluster status.network.remotePodCIDRs)"
                % self.provider_id
            )
            raise InvalidInput(
                "%s: %s after %ss; ForeignCluster %s: %s" % (self.consumer.label, what, timeout, self.provider_id, why)
            )
        return True

    # -- absent --------------------------------------------------------------------------------
    def absent(self, drain_timeout, wait_timeout):
        """Un-peer; with one side gone (force), clean the other alone. Returns (changes, forced, not_cleaned)."""
        changes = ChangeSet(self.module.check_mode)
        forced, not_cleaned = [], []
        if self.consumer is None:
            not_cleaned.append(
                "%s (unreachable): virtual node %s (and the nodes of its pools, %s.<pool>), their Leases and pods, "
                "ForeignCluster %s/%s and Secret %s/%s"
                % (
                    self.consumer_id,
                    self.node_name,
                    self.node_name,
                    SYSTEM_NAMESPACE,
                    self.provider_id,
                    SYSTEM_NAMESPACE,
                    self.secret_name,
                )
            )
            self._remove_tenant(changes, wait_timeout)
            self.fabric.remove(changes)
            return changes, forced, not_cleaned
        nodes = self._live_virtual_nodes()
        names = [node["metadata"]["name"] for node in nodes]
        for node in nodes:
            changes.patch(self.consumer, node, {"spec": {"unschedulable": True}})
        if nodes:
            forced = self._drain(changes, drain_timeout, names) if self.provider else self._drop_pods(changes, names)
        changes.delete(self.consumer, FOREIGN_CLUSTER_API, "ForeignCluster", self.provider_id, SYSTEM_NAMESPACE)
        changes.delete(self.consumer, "v1", "Secret", self.secret_name, SYSTEM_NAMESPACE)
        self.fabric.remove(changes)
        if self.provider is not None:
            self._remove_tenant(changes, wait_timeout)
        else:
            not_cleaned.append(
                "%s (unreachable): tenant namespace %s with its credential, and the twin namespaces and pods of "
                "tenant %s" % (self.provider_id, self.tenant_namespace, self.consumer_id)
            )
        if nodes and not changes.check_mode:
            # The virtual kubelet deletes its nodes when its ForeignCluster goes; without one, we do.
            deadline = time.monotonic() + 30
            for name in names:
                left = max(1, int(deadline - time.monotonic()))
                if self.consumer.watch_until("v1", "Node", name, None, lambda n: n is None, left)[0]:
                    continue
                changes.delete(self.consumer, "v1", "Node", name)
                changes.delete(self.consumer, "coordination.k8s.io/v1", "Lease", name, NODE_LEASE_NAMESPACE)
                forced.append("deleted virtual node %s (no virtual kubelet removed it)" % name)
        return changes, forced, not_cleaned

    def _live_virtual_nodes(self):
        """The peering's virtual nodes on the consumer: the pool-less one and its pools' (catamaran-<provider>.<pool>;
        a dot never appears in a cluster id, so no other peering's node has that prefix), whichever exist."""
        found = {}
        base = self.consumer.get("v1", "Node", self.node_name)
        if base is not None:
            found[self.node_name] = base
        for node in self.consumer.list("v1", "Node", labels="%s=%s" % (LABEL_TYPE, TYPE_VIRTUAL_NODE)):
            name = node["metadata"]["name"]
            if name.startswith(self.node_name + "."):
                found[name] = node
        return [found[name] for name in sorted(found)]

    def _drop_pods(self, changes, nodes):
        """The provider is gone: nothing can remove the remote copies, so release the local pods at once."""
        pods = self._pods_on(nodes)
        for pod in pods:
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp"):
                changes.delete(self.consumer, "v1", "Pod", meta["name"], meta["namespace"], grace_period=0)
                continue
            # Already terminating (evicted from the NotReady node), waiting for a remote copy that cannot go.
            if not changes.check_mode:
                self.consumer.delete("v1", "Pod", meta["name"], meta["namespace"], grace_period=0)
            changes.note(
                "delete %s: Pod %s/%s now (grace period 0)" % (self.consumer.label, meta["namespace"], meta["name"])
            )
        if not pods:
            return []
        return [
            "deleted %d pods on %s with grace period 0 (provider %s unreachable)"
            % (len(pods), ", ".join(nodes), self.provider_id)
        ]

    @staticmethod
    def _on_node(node):
        return "spec.nodeName=%s" % node

    def _pods_on(self, nodes):
        """The pods bound to these nodes, one list call per node (a field selector names one)."""
        return [pod for node in nodes for pod in self.consumer.list("v1", "Pod", fields=self._on_node(node))]

    def _drain(self, changes, timeout, nodes):
        """Delete the pods on the virtual nodes; their virtual kubelet removes them remotely first. One deadline for
        all the nodes."""
        pods = self._pods_on(nodes)
        for pod in pods:
            meta = pod["metadata"]
            changes.delete(self.consumer, "v1", "Pod", meta["name"], meta["namespace"])
        if changes.check_mode or not pods:
            return []
        deadline = time.monotonic() + timeout
        left_over = []
        for node in nodes:
            drained, remaining = self.consumer.watch_list_until(
                "v1",
                "Pod",
                None,
                lambda items: not items,
                max(1, int(deadline - time.monotonic())),
                fields=self._on_node(node),
            )
            if not drained:
                left_over.append((node, remaining))
        if not left_over:
            return []
        # Nobody serves the nodes: remove the remote copies ourselves, then release the local pods.
        for namespace in self._tenant_namespaces():
            name = namespace["metadata"]["name"]
            for shadow in self.provider.list(OFFLOADING_API, "ShadowPod", namespace=name):
                self.provider.delete(OFFLOADING_API, "ShadowPod", shadow["metadata"]["name"], name)
        pods = [pod for _node, remaining in left_over for pod in remaining]
        for pod in pods:
            meta = pod["metadata"]
            self.consumer.delete("v1", "Pod", meta["name"], meta["namespace"], grace_period=0)
        return [
            "force-deleted %d pods on %s after %ss (remote copies removed directly)"
            % (len(pods), ", ".join(node for node, _remaining in left_over), timeout)
        ]

    @property
    def _tenant_selector(self):
        return "%s=%s,%s=%s" % (LABEL_MANAGED_BY, MANAGED_BY_CATAMARAN, LABEL_ORIGIN_CLUSTER_ID, self.consumer_id)

    def _tenant_namespaces(self):
        return self.provider.list("v1", "Namespace", labels=self._tenant_selector)

    def _tenant_namespaces_gone(self, timeout):
        return self.provider.watch_list_until(
            "v1", "Namespace", None, lambda items: not items, timeout, labels=self._tenant_selector
        )[0]

    def _remove_tenant(self, changes, timeout):
        """Twin namespaces, the tenant namespace (its account, token and bindings go with it)."""
        for twin in self.provider.list(OFFLOADING_API, "TwinNamespace", namespace=self.tenant_namespace):
            changes.delete(
                self.provider, OFFLOADING_API, "TwinNamespace", twin["metadata"]["name"], self.tenant_namespace
            )
        namespaces = self._tenant_namespaces()
        for namespace in namespaces:
            changes.delete(self.provider, "v1", "Namespace", namespace["metadata"]["name"])
        if changes.check_mode:
            return
        if not self._tenant_namespaces_gone(timeout):
            # The provider's manager is not finalizing twins; do its part so nothing is left.
            for twin in self.provider.list(OFFLOADING_API, "TwinNamespace", namespace=self.tenant_namespace):
                self.provider.merge_patch(
                    OFFLOADING_API,
                    "TwinNamespace",
                    twin["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                    self.tenant_namespace,
                )
            if not self._tenant_namespaces_gone(timeout):
                raise InvalidInput(
                    "%s: namespaces of tenant %s are still terminating after %ss"
                    % (self.provider.label, self.consumer_id, 2 * timeout)
                )
        others = self.provider.list("v1", "Namespace", labels="%s=true" % LABEL_TENANT)
        if not [n for n in others if n["metadata"]["name"] != self.tenant_namespace]:
            # The last tenant is gone: so go the objects all tenants shared (the binding before its policy).
            for obj in reversed(provider_cluster_objects()):
                changes.delete(self.provider, obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def node_pod_cidrs(cluster):
    """A cluster's pod ranges as its real nodes announce them (spec.podCIDRs), one covering range per family."""
    ranges = []
    for node in cluster.list("v1", "Node", labels="%s!=%s" % (LABEL_TYPE, TYPE_VIRTUAL_NODE)):
        spec = node.get("spec") or {}
        ranges.extend(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))
    return networks.covering_networks(ranges)


def connect_both(module, params, consumer_id, provider_id):
    """Both clusters reachable, or nothing happens; with force (un-peering), one of them is enough."""
    force = params.get("state") == "absent" and params.get("force")
    connected, down = {}, []
    for side, cluster_id in (("consumer", consumer_id), ("provider", provider_id)):
        try:
            connected[side] = module.connect(cluster_id, connection_options(params, side))
        except ClusterUnreachable as error:
            if not force:
                raise
            connected[side] = None
            down.append(str(error))
    if len(down) == 2:
        raise ClusterError("neither cluster can be reached, so nothing can be un-peered: %s" % "; ".join(down))
    provider = connected["provider"]
    if params.get("state") != "absent" and provider is not None and not provider.verifies_tls and not provider.ca_data:
        # The consumer's virtual kubelet always verifies the provider: what this run skipped, it cannot.
        raise ClusterError(
            "%s: %s skips certificate verification and names no CA, so the consumer's virtual kubelet would have "
            "nothing to verify the provider with; set certificate-authority in the kubeconfig or the provider's ca_cert"
            % (provider.label, provider.source)
        )
    return Peering(module, connected["consumer"], provider, consumer_id, provider_id)
