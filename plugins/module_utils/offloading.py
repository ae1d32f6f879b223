# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Extend a namespace to peered clusters through its NamespaceOffloading, and report on it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import (
    InvalidInput,
    check_cluster_id,
    connection_options,
)
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    LABEL_OFFLOADING_POLICY,
    OFFLOADING_GROUP,
    VERSION,
)
from ansible_collections.catamaran.federation.plugins.module_utils.kube import MANAGED_BY, MANAGED_BY_LABEL

API = "%s/%s" % (OFFLOADING_GROUP, VERSION)
KIND = "NamespaceOffloading"
NAME = "offloading"  # one per namespace, fixed by the CRD
CRD = "namespaceoffloadings.%s" % OFFLOADING_GROUP
SETTLED_PHASES = ("Ready", "SomeFailed", "AllFailed", "Conflict", "NoClusterSelected")
POD_STRATEGIES = ("Local", "Remote", "LocalAndRemote")
MAPPING_STRATEGIES = ("DefaultName", "EnforceSameName", "SelectedName")
POLICY_MAPPING_STRATEGIES = ("DefaultName", "EnforceSameName")  # SelectedName names one twin only


def spec_options(mapping_strategies):
    """The argument spec of the NamespaceOffloading spec's options (doc fragment catamaran.federation.offloading)."""
    return dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        pod_offloading_strategy=dict(type="str", choices=list(POD_STRATEGIES), default="LocalAndRemote"),
        namespace_mapping_strategy=dict(type="str", choices=list(mapping_strategies), default="DefaultName"),
        cluster_selector=dict(type="dict"),
        wait=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=120),
    )


def run_module(module, validate_present, present, absent, key, summarize):
    """The whole of a module that makes an object present or absent: validate, connect, converge, report."""
    params = module.params

    def body():
        if params["state"] == "present":
            validate_present(params)
        cluster = module.connect(None, connection_options(params))
        changes, live = (present if params["state"] == "present" else absent)(module, cluster, params)
        return changes.result(**{key: summarize(live) if live else {}})

    module.run(body)


def validate(params):
    check_cluster_id(params["namespace"], "namespace")
    selected = params.get("namespace_mapping_strategy") == "SelectedName"
    if selected and not params.get("remote_namespace_name"):
        raise InvalidInput("remote_namespace_name is required with namespace_mapping_strategy=SelectedName")
    if params.get("remote_namespace_name"):
        if not selected:
            raise InvalidInput("remote_namespace_name is only allowed with namespace_mapping_strategy=SelectedName")
        check_cluster_id(params["remote_namespace_name"], "remote_namespace_name")
    validate_cluster_selector(params)


def manifest(params):
    return {
        "apiVersion": API,
        "kind": KIND,
        "metadata": {"name": NAME, "namespace": params["namespace"], "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": offloading_spec(params),
    }


def summary(offloading):
    """What people and playbooks want to know about one NamespaceOffloading."""
    meta = offloading["metadata"]
    status = offloading.get("status") or {}
    return dict(
        namespace=meta["namespace"],
        phase=status.get("offloadingPhase"),
        current=status.get("observedGeneration") == meta.get("generation"),
        remote_namespace=status.get("remoteNamespaceName"),
        pod_offloading_strategy=(offloading.get("spec") or {}).get("podOffloadingStrategy"),
        namespace_mapping_strategy=(offloading.get("spec") or {}).get("namespaceMappingStrategy"),
        cluster_selector=(offloading.get("spec") or {}).get("clusterSelector"),
        clusters=[
            dict(
                cluster_id=c.get("clusterID"),
                phase=c.get("phase"),
                remote_namespace=c.get("remoteNamespace"),
                reason=c.get("reason"),
                message=c.get("message"),
            )
            for c in status.get("clusters") or []
        ],
        managed_by_ansible=(meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY,
        terminating=bool(meta.get("deletionTimestamp")),
        policy=(meta.get("labels") or {}).get(LABEL_OFFLOADING_POLICY),
    )


def settled(offloading):
    if offloading is None:
        return False
    info = summary(offloading)
    return info["current"] and info["phase"] in SETTLED_PHASES


def present(module, cluster, params):
    if cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD) is None:
        message = "%s lacks the CRD %s: install Catamaran's CRDs first" % (cluster.label, CRD)
        if not module.check_mode:
            raise InvalidInput(message)
        # A plan of a new federation: the crds role's dry run installed nothing, so plan as if it had.
        module.ansible.warn(message + "; the plan assumes they are installed first")
    namespace = params["namespace"]
    if not params["create_namespace"] and cluster.get("v1", "Namespace", namespace) is None:
        raise InvalidInput("%s: namespace %s does not exist (create_namespace is false)" % (cluster.label, namespace))

    def converge(changes):
        if params["create_namespace"]:
            changes.apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        return changes.apply(cluster, manifest(params))

    # A dry run first: an immutable field or a rejected spec fails before the namespace is created.
    changes = ChangeSet(check_mode=True)
    live = converge(changes)
    if module.check_mode:
        return changes, live
    if changes.changed:  # unchanged, the dry run's reads already describe the live object
        changes = ChangeSet(check_mode=False)
        live = converge(changes)
    if params["wait"]:
        done, live = cluster.watch_until(API, KIND, NAME, namespace, settled, params["wait_timeout"])
        info = summary(live) if live else {}
        if not done or info.get("phase") != "Ready":
            details = "; ".join(
                "%s: %s %s" % (c["cluster_id"], c["phase"], c.get("message") or c.get("reason") or "")
                for c in info.get("clusters") or []
            )
            module.ansible.fail_json(
                msg="%s: namespace %s is %s, not Ready, after %ss%s"
                % (
                    cluster.label,
                    namespace,
                    info.get("phase") or "without a phase",
                    params["wait_timeout"],
                    " (%s)" % details if details else " (is the manager running?)",
                ),
                changed=changes.changed,
                offloading=info,
            )
    return changes, live


def absent(module, cluster, params):
    changes = ChangeSet(module.check_mode)
    namespace = params["namespace"]
    existed = (
        changes.delete(cluster, API, KIND, NAME, namespace)
        if cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", CRD)
        else False
    )
    if existed and not module.check_mode:
        gone, live = cluster.watch_until(API, KIND, NAME, namespace, lambda obj: obj is None, params["wait_timeout"])
        if not gone:
            module.ansible.fail_json(
                msg="%s: NamespaceOffloading %s/%s is still terminating after %ss (its finalizer waits for the "
                "manager to remove the twin namespaces: is the manager running?)"
                % (cluster.label, namespace, NAME, params["wait_timeout"]),
                changed=True,
                offloading=summary(live),
            )
    return changes, None


# NamespaceOffloadingPolicy: the same spec for every namespace a label selector matches.
POLICY_KIND = "NamespaceOffloadingPolicy"
POLICY_CRD = "namespaceoffloadingpolicies.%s" % OFFLOADING_GROUP


def validate_policy(params):
    check_cluster_id(params["name"], "name")
    selector = params.get("namespace_selector") or {}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        raise InvalidInput(
            "namespace_selector must hold matchLabels or matchExpressions (an empty one would offload every namespace)"
        )
    unknown = set(selector) - set(["matchLabels", "matchExpressions"])
    if unknown:
        raise InvalidInput(
            "namespace_selector: unknown keys %s (a label selector has matchLabels, matchExpressions)" % sorted(unknown)
        )
    if params.get("namespace_mapping_strategy") not in POLICY_MAPPING_STRATEGIES:
        raise InvalidInput(
            "namespace_mapping_strategy must be one of %s for a policy (SelectedName names one twin)"
            % ", ".join(POLICY_MAPPING_STRATEGIES)
        )
    validate_cluster_selector(params)


def validate_cluster_selector(params):
    terms = (params.get("cluster_selector") or {}).get("nodeSelectorTerms")
    if params.get("cluster_selector") and not isinstance(terms, list):
        raise InvalidInput("cluster_selector must be a NodeSelector: a dict with a list under nodeSelectorTerms")


def offloading_spec(params):
    """The NamespaceOffloading spec the options describe (for one namespace, or every one a policy selects)."""
    spec = {
        "podOffloadingStrategy": params["pod_offloading_strategy"],
        "namespaceMappingStrategy": params["namespace_mapping_strategy"],
    }
    if params.get("remote_namespace_name"):
        spec["remoteNamespaceName"] = params["remote_namespace_name"]
    if params.get("cluster_selector"):
        spec["clusterSelector"] = params["cluster_selector"]
    return spec


def policy_manifest(params):
    return {
        "apiVersion": API,
        "kind": POLICY_KIND,
        "metadata": {"name": params["name"], "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"namespaceSelector": params["namespace_selector"], "offloading": offloading_spec(params)},
    }


def policy_summary(policy):
    meta = policy["metadata"]
    spec = policy.get("spec") or {}
    status = policy.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return dict(
        name=meta["name"],
        namespace_selector=spec.get("namespaceSelector"),
        pod_offloading_strategy=(spec.get("offloading") or {}).get("podOffloadingStrategy"),
        namespace_mapping_strategy=(spec.get("offloading") or {}).get("namespaceMappingStrategy"),
        cluster_selector=(spec.get("offloading") or {}).get("clusterSelector"),
        offloaded_namespaces=status.get("offloadedNamespaces"),
        current=status.get("observedGeneration") == meta.get("generation"),
        ready=bool(ready) and ready[0].get("status") == "True",
        message=ready[0].get("message") if ready else None,
        managed_by_ansible=(meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY,
    )


def policy_present(module, cluster, params):
    changes = ChangeSet(module.check_mode)
    if cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", POLICY_CRD) is None:
        message = "%s lacks the CRD %s: install Catamaran's CRDs first" % (cluster.label, POLICY_CRD)
        if not module.check_mode:
            raise InvalidInput(message)
        # A plan of a new federation: the crds role's dry run installed nothing, so plan as if it had.
        module.ansible.warn(message + "; the plan assumes they are installed first")
        changes.note("create %s: %s %s" % (cluster.label, POLICY_KIND, params["name"]))
        return changes, policy_manifest(params)
    live = changes.apply(cluster, policy_manifest(params))
    if params["wait"] and not module.check_mode:
        done, live = cluster.watch_until(
            API,
            POLICY_KIND,
            params["name"],
            None,
            lambda obj: obj is not None and policy_summary(obj)["current"],
            params["wait_timeout"],
        )
        info = policy_summary(live) if live else {}
        if not done or not info.get("ready"):
            module.ansible.fail_json(
                msg="%s: NamespaceOffloadingPolicy %s is not Ready after %ss (%s)"
                % (
                    cluster.label,
                    params["name"],
                    params["wait_timeout"],
                    info.get("message") or "is the manager running?",
                ),
                changed=changes.changed,
                policy=info,
            )
    return changes, live


def policy_absent(module, cluster, params):
    """Delete the policy, then wait while the manager drains the namespaces it offloaded (the garbage collector
    deletes their NamespaceOffloadings), so what runs next (an un-peering) finds them gone."""
    changes = ChangeSet(module.check_mode)
    if cluster.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", POLICY_CRD) is None:
        return changes, None
    existed = changes.delete(cluster, API, POLICY_KIND, params["name"])
    if existed and not module.check_mode:
        made = "%s=%s" % (LABEL_OFFLOADING_POLICY, params["name"])
        gone, left = cluster.watch_list_until(
            API, KIND, None, lambda items: not items, params["wait_timeout"], labels=made
        )
        if not gone:
            module.ansible.fail_json(
                msg="%s: the NamespaceOffloadings of policy %s in %s are still there after %ss (they wait for the "
                "manager to remove the twin namespaces: is the manager running?)"
                % (
                    cluster.label,
                    params["name"],
                    ", ".join(sorted(item["metadata"]["namespace"] for item in left)),
                    params["wait_timeout"],
                ),
                changed=True,
                policy={},
            )
    return changes, None
