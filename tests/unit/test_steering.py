"""Steering (steering.py): remote names, cluster selectors, the pods' affinity and tolerations, the policy that
decides a namespace.
"""

from __future__ import annotations

import json

import pytest

from catamaran import steering
from tests.unit.namespace_offloading import ANY_TEAM, IN_B, REGION, TEAM_A, labels, pod


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "shop-consumer"),
        ({"namespaceMappingStrategy": "DefaultName"}, "shop-consumer"),
        ({"namespaceMappingStrategy": "EnforceSameName"}, "shop"),
        ({"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "store"}, "store"),
    ],
)
def test_remote_names_follow_the_mapping_strategy(spec, expected):
    assert steering.remote_namespace_name("shop", spec, "consumer") == expected


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {}, True),
        ({"nodeSelectorTerms": []}, {}, True),
        (IN_B, {REGION: "region-b"}, True),
        (IN_B, {REGION: "region-c"}, False),
        ({"nodeSelectorTerms": [{"matchExpressions": [{"key": "tier", "operator": "Exists"}]}]}, {"tier": "x"}, True),
        (
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["2"]}]}]},
            {"gpus": "4"},
            True,
        ),
        (
            {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]},
                    {"matchExpressions": [{"key": "b", "operator": "In", "values": ["y"]}]},
                ]
            },
            {"a": "x", "b": "y"},
            True,
        ),
        ({"nodeSelectorTerms": [{}]}, {"a": "b"}, False),
    ],
)
def test_cluster_selector_has_node_selector_semantics(selector, labels, matches):
    assert steering.selector_matches(selector, labels) is matches


def apply(pod_object, operations):
    result = json.loads(json.dumps(pod_object))
    for op in operations:
        parts = op["path"].strip("/").split("/")
        target = result
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = op["value"]
    return result


def terms(result):
    return result["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def node_allowed(result, labels, name="n"):
    selector = {"nodeSelectorTerms": terms(result)}
    tolerated = steering.VIRTUAL_NODE_TOLERATION in (result["spec"].get("tolerations") or [])
    virtual = labels.get("catamaran.io/type") == "virtual-node"
    return steering.selector_matches(selector, labels, name) and (tolerated or not virtual)


LOCAL = {"kubernetes.io/hostname": "w1"}
VIRTUAL_A = {"catamaran.io/type": "virtual-node", REGION: "region-a"}
VIRTUAL_B = {"catamaran.io/type": "virtual-node", REGION: "region-b"}


@pytest.mark.parametrize(
    ("strategy", "selector", "allowed"),
    [
        ("Local", None, {"local": True, "a": False, "b": False}),
        ("Remote", IN_B, {"local": False, "a": False, "b": True}),
        ("Remote", None, {"local": False, "a": True, "b": True}),
        ("LocalAndRemote", None, {"local": True, "a": True, "b": True}),
        ("LocalAndRemote", IN_B, {"local": True, "a": False, "b": True}),
    ],
)
def test_strategies_allow_exactly_their_nodes(strategy, selector, allowed):
    spec = {"podOffloadingStrategy": strategy, **({"clusterSelector": selector} if selector else {})}
    result = apply(pod(), steering.steer(pod(), spec)[0])
    assert node_allowed(result, LOCAL) is allowed["local"]
    assert node_allowed(result, VIRTUAL_A) is allowed["a"]
    assert node_allowed(result, VIRTUAL_B) is allowed["b"]
    assert result["metadata"]["annotations"][steering.STRATEGY_ANNOTATION] == strategy


def test_the_pods_own_affinity_is_kept_with_and_or_semantics():
    own = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    {"matchExpressions": [{"key": REGION, "operator": "In", "values": ["region-a"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    original = pod(affinity=own)
    result = apply(original, steering.steer(original, {"podOffloadingStrategy": "LocalAndRemote"})[0])
    assert len(terms(result)) == 4  # (ssd OR region-a) AND (physical OR virtual)
    assert node_allowed(result, {**LOCAL, "disk": "ssd"})
    assert not node_allowed(result, LOCAL)  # the pod's own terms still apply
    assert node_allowed(result, VIRTUAL_A)  # region-a satisfies the pod's second term
    assert not node_allowed(result, VIRTUAL_B)
    assert result["spec"]["affinity"]["podAntiAffinity"] == own["podAntiAffinity"]
    assert result["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert original["spec"]["affinity"] == own  # the input is not modified


def test_daemonset_pods_never_go_remote():
    daemon = pod(
        owner="DaemonSet",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["catamaran-b"]}]}
                    ]
                }
            }
        },
    )
    result = apply(daemon, steering.steer(daemon, {"podOffloadingStrategy": "Remote"})[0])
    assert not node_allowed(result, VIRTUAL_B, "catamaran-b")
    assert node_allowed(result, LOCAL, "catamaran-b")
    assert steering.VIRTUAL_NODE_TOLERATION not in (result["spec"].get("tolerations") or [])


def test_existing_tolerations_are_kept_and_not_duplicated():
    original = pod(tolerations=[steering.VIRTUAL_NODE_TOLERATION, {"key": "x", "operator": "Exists"}])
    result = apply(original, steering.steer(original, {"podOffloadingStrategy": "Remote"})[0])
    assert result["spec"]["tolerations"] == original["spec"]["tolerations"]


@pytest.mark.parametrize(
    ("namespace_labels", "expected"),
    [
        (labels("shop", team="a"), "any-team"),  # both select it: the first by name decides
        (labels("shop", team="b"), "any-team"),
        (labels("shop"), None),
        (labels("kube-system", team="a"), None),  # system namespaces never
        (labels("ops", team="a"), None),  # the controller's own namespace never
        (labels("catamaran-fabric", team="a"), None),  # nor the fabric's keys
        (labels("shop-c1", team="a", **{"catamaran.io/origin-cluster-id": "c1"}), None),  # a tenant's or twin
    ],
)
def test_the_first_selecting_policy_by_name_decides_a_namespace(namespace_labels, expected):
    deciding = steering.deciding_policy([TEAM_A, ANY_TEAM], namespace_labels, "ops")
    assert (deciding or {}).get("metadata", {}).get("name") == expected


def test_a_policy_being_deleted_decides_nothing():
    deleting = {**TEAM_A, "metadata": {**TEAM_A["metadata"], "deletionTimestamp": "2026-11-25T00:00:00Z"}}
    assert steering.deciding_policy([deleting], labels("shop", team="a"), "ops") is None


@pytest.mark.parametrize(
    ("selector", "namespace_labels", "matches"),
    [
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, {"team": "b"}, True),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "a"}, False),
        (
            {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "env", "operator": "Exists"}]},
            {"team": "a"},
            False,
        ),
    ],
)
def test_label_selectors_follow_kubernetes_semantics(selector, namespace_labels, matches):
    assert steering.label_selector_matches(selector, namespace_labels) is matches
