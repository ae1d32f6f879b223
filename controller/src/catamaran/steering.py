"""Namespace offloading rules: cluster selection, remote names, and the pod mutation. Pure.

The webhook's mutation ANDs the strategy's placement with the pod's own required node affinity:
with pod terms P1 OR P2 and allowed placements A1 OR A2, the result is the four terms Pi AND Aj,
which is exactly (P1 OR P2) AND (A1 OR A2).
"""

from __future__ import annotations

import copy

from .constants import (
    FABRIC_NAMESPACE,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_TYPE,
    TYPE_VIRTUAL_NODE,
    VIRTUAL_NODE_TAINT_KEY,
    default_twin_namespace,
)

OFFLOADING_NAME = "offloading"
ENABLED_LABEL = "catamaran.io/offloading-enabled"
STRATEGY_ANNOTATION = "catamaran.io/offloading-strategy"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # every namespace has it, set by the API server

ON_VIRTUAL_NODE = {"key": LABEL_TYPE, "operator": "In", "values": [TYPE_VIRTUAL_NODE]}
ON_PHYSICAL_NODE = {"key": LABEL_TYPE, "operator": "NotIn", "values": [TYPE_VIRTUAL_NODE]}
VIRTUAL_NODE_TOLERATION = {"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}


def remote_namespace_name(namespace: str, spec: dict, consumer_id: str) -> str:
    strategy = spec.get("namespaceMappingStrategy") or "DefaultName"
    if strategy == "EnforceSameName":
        return namespace
    if strategy == "SelectedName":
        return spec["remoteNamespaceName"]
    return default_twin_namespace(namespace, consumer_id)


def _expression_matches(expression: dict, value: str | None) -> bool:
    operator, values = expression["operator"], expression.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def selector_matches(selector: dict | None, labels: dict, name: str = "") -> bool:
    """NodeSelector semantics (terms ORed, expressions ANDed); an empty selector matches every node."""
    terms = (selector or {}).get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue  # an empty term matches nothing, as in Kubernetes
        if all(_expression_matches(e, labels.get(e["key"])) for e in expressions) and all(
            _expression_matches(f, name if f["key"] == "metadata.name" else None) for f in fields
        ):
            return True
    return False


def label_selector_matches(selector: dict | None, labels: dict) -> bool:
    """LabelSelector semantics (matchLabels and matchExpressions ANDed); an empty selector matches everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(e, labels.get(e["key"])) for e in selector.get("matchExpressions") or [])


def never_offloaded_by_policy(controller_namespace: str) -> list[dict]:
    """Label expressions every namespace a policy offloads must also match: never the cluster's own system
    namespaces or Catamaran's, nor a tenant or twin namespace this cluster holds for a consumer."""
    system = sorted({"kube-system", "kube-public", "kube-node-lease", controller_namespace, FABRIC_NAMESPACE})
    return [
        {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": system},
        {"key": LABEL_ORIGIN_CLUSTER_ID, "operator": "DoesNotExist"},
    ]


def policy_selects(policy: dict, namespace_labels: dict, controller_namespace: str) -> bool:
    """Does a NamespaceOffloadingPolicy offload a namespace with these labels?"""
    if policy["metadata"].get("deletionTimestamp"):
        return False
    exclusions = {"matchExpressions": never_offloaded_by_policy(controller_namespace)}
    return label_selector_matches(exclusions, namespace_labels) and label_selector_matches(
        policy["spec"]["namespaceSelector"], namespace_labels
    )


def deciding_policy(policies, namespace_labels: dict, controller_namespace: str) -> dict | None:
    """Of the policies selecting a namespace, the one that offloads it: the first by name."""
    selecting = [p for p in policies if policy_selects(p, namespace_labels, controller_namespace)]
    return min(selecting, key=lambda p: p["metadata"]["name"], default=None)


def allowed_placements(spec: dict, daemonset: bool) -> list[dict]:
    """The node selector terms (ORed) where the strategy lets a pod run."""
    strategy = spec.get("podOffloadingStrategy") or "LocalAndRemote"
    local = [{"matchExpressions": [ON_PHYSICAL_NODE]}]
    if daemonset or strategy == "Local":
        return local
    selector_terms = ((spec.get("clusterSelector") or {}).get("nodeSelectorTerms")) or [{}]
    remote = [
        {
            "matchExpressions": [ON_VIRTUAL_NODE, *(term.get("matchExpressions") or [])],
            **({"matchFields": term["matchFields"]} if term.get("matchFields") else {}),
        }
        for term in selector_terms
    ]
    return remote if strategy == "Remote" else local + remote


def _and_terms(first: dict, second: dict) -> dict:
    term = {"matchExpressions": [*(first.get("matchExpressions") or []), *(second.get("matchExpressions") or [])]}
    fields = [*(first.get("matchFields") or []), *(second.get("matchFields") or [])]
    if fields:
        term["matchFields"] = fields
    return term


def is_daemonset_pod(pod: dict) -> bool:
    return any(owner.get("kind") == "DaemonSet" for owner in pod["metadata"].get("ownerReferences") or [])


def steer(pod: dict, spec: dict) -> tuple[list[dict], str]:
    """JSON patch operations that apply the strategy to a pod being created, and a summary."""
    daemonset = is_daemonset_pod(pod)
    strategy = "Local" if daemonset else spec.get("podOffloadingStrategy") or "LocalAndRemote"
    affinity = copy.deepcopy(pod["spec"].get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    own_terms = required.get("nodeSelectorTerms") or [{}]
    allowed = allowed_placements(spec, daemonset)
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [_and_terms(own, placement) for own in own_terms for placement in allowed]
    }
    operations = [{"op": "add", "path": "/spec/affinity", "value": affinity}]
    if strategy != "Local":
        tolerations = list(pod["spec"].get("tolerations") or [])
        if VIRTUAL_NODE_TOLERATION not in tolerations:
            tolerations.append(VIRTUAL_NODE_TOLERATION)
        operations.append({"op": "add", "path": "/spec/tolerations", "value": tolerations})
    annotations = dict(pod["metadata"].get("annotations") or {})
    annotations[STRATEGY_ANNOTATION] = strategy
    operations.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    summary = f"{strategy}{' (DaemonSet pods stay local)' if daemonset else ''}"
    return operations, summary
