"""Which pods a virtual kubelet offloads, what a pod it keeps shows, and which ForeignCluster specs it serves."""

from __future__ import annotations

import pytest

from catamaran.constants import ANNOTATION_OWNED_TAINTS, VIRTUAL_NODE_TAINT
from catamaran.vk import forge
from catamaran.vk.node import merged_taints, node_taints, owned_taints, owned_taints_annotation
from catamaran.vk.pod_status import comparable_status
from catamaran.vk.pods import create_refusal
from catamaran.vk.runner import settings_from
from catamaran.vk.validation import foreign_spec_problems, home_api_server

NODE = "catamaran-cluster-2"
LABELS = {"catamaran.io/type": "virtual-node", "topology.kubernetes.io/region": "region-b"}
NOW = "2024-01-01T00:00:00Z"


def pod(namespace: str = "apps", owner: str | None = None) -> dict:
    meta = {"name": "p", "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {}}


def offloading(selector: dict | None = None, deleting: bool = False) -> dict:
    meta = {"name": "offloading", "namespace": "apps"}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"clusterSelector": selector} if selector else {}}


def region(value: str) -> dict:
    expression = {"key": "topology.kubernetes.io/region", "operator": "In", "values": [value]}
    return {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}


def refusal(pod_: dict, offloading_: dict | None):
    return forge.offload_refusal(pod_, offloading_, LABELS, NODE, "cluster-2")


def test_a_namespace_is_offloaded_only_by_a_selecting_offloading():
    assert refusal(pod(), offloading()) is None
    assert refusal(pod(), offloading(region("region-b"))) is None
    assert forge.offloading_selects(offloading(), LABELS, NODE)
    assert not forge.offloading_selects(None, LABELS, NODE)
    assert not forge.offloading_selects(offloading(deleting=True), LABELS, NODE)
    assert not forge.offloading_selects(offloading(region("region-a")), LABELS, NODE)


def test_a_namespace_without_offloading_says_how_to_offload_it():
    reason, message = refusal(pod("kube-system"), None)
    assert reason == "OffloadingBackOff"
    assert "namespace kube-system is not offloaded" in message
    assert "NamespaceOffloading named 'offloading' in namespace kube-system" in message
    assert "cluster-2" in message
    assert NODE in message


def test_an_offloading_that_does_not_select_this_cluster_or_is_leaving_is_named():
    reason, message = refusal(pod(), offloading(region("region-a")))
    assert reason == "OffloadingBackOff"
    assert "clusterSelector" in message
    assert "does not select" in message
    assert "cluster-2" in message
    reason, message = refusal(pod(), offloading(deleting=True))
    assert reason == "OffloadingBackOff"
    assert "being deleted" in message


@pytest.mark.parametrize("offloading_", [None, offloading()])
def test_daemonset_pods_are_never_offloaded_whatever_their_namespace(offloading_):
    reason, message = refusal(pod(owner="DaemonSet"), offloading_)
    assert reason == "DaemonSetNotOffloaded"
    assert "DaemonSet pods are never offloaded" in message
    assert "catamaran.io/type NotIn" in message
    assert refusal(pod(owner="ReplicaSet"), offloading()) is None


def test_a_held_pod_is_pending_with_the_reason_everywhere_kubectl_looks():
    local = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    status = forge.held_pod_status(local, "OffloadingBackOff", "why", now=NOW, containers=[("c", "i")])
    assert (status["phase"], status["reason"], status["message"]) == ("Pending", "OffloadingBackOff", "why")
    held = next(c for c in status["conditions"] if c["type"] == forge.REMOTE_CONDITION)
    assert (held["status"], held["reason"], held["message"]) == ("False", "OffloadingBackOff", "why")
    assert {c["type"] for c in status["conditions"]} == {"PodScheduled", forge.REMOTE_CONDITION}
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "OffloadingBackOff"
    # Held again for the same reason: nothing to write, so no second Event either.
    again = forge.held_pod_status(
        status, "OffloadingBackOff", "why", now="2025-01-01T00:00:00Z", containers=[("c", "i")]
    )
    assert comparable_status(again) == comparable_status(status)
    assert next(c for c in again["conditions"] if c["type"] == forge.REMOTE_CONDITION)["lastTransitionTime"] == NOW


def test_once_offloaded_the_held_reason_goes():
    held = forge.held_pod_status(
        {"conditions": [{"type": "PodScheduled", "status": "True"}]}, "OffloadingBackOff", "why", now=NOW,
        containers=[("c", "i")],
    )  # fmt: skip
    remote = {"pod": {"phase": "Pending", "conditions": [{"type": "Initialized", "status": "True"}]}}
    status = forge.local_pod_status(
        held, remote, node_ip="10.0.0.1", translate=lambda ip: ip, provider_reachable=True, now=NOW
    )
    assert status["phase"] == "Pending"
    assert status["reason"] is None
    assert status["message"] is None
    assert status["containerStatuses"] is None
    assert forge.REMOTE_CONDITION not in {c["type"] for c in status["conditions"]}


def test_a_remote_refusal_also_sets_the_pod_reason():
    shadow = {"conditions": [{"type": "PodCreated", "status": "False", "reason": "QuotaExceeded", "message": "m"}]}
    status = forge.local_pod_status(
        {}, shadow, node_ip="10.0.0.1", translate=lambda ip: ip, provider_reachable=True, now=NOW
    )
    assert (status["reason"], status["message"]) == ("QuotaExceeded", "m")


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (403, 'shadowpods "p" is forbidden: exceeded quota: q', "QuotaExceeded"),
        (403, 'shadowpods "p" is forbidden: User cannot create', "AdmissionRejected"),
        (422, "ShadowPod.offloading.catamaran.io is invalid", "AdmissionRejected"),
        (400, "admission webhook denied the request", "AdmissionRejected"),
        (404, 'namespaces "apps-cluster-1" not found', "NamespaceMissing"),
    ],
)
def test_a_refused_shadowpod_create_is_named_on_the_pod(code, message, reason):
    named, detail = create_refusal(code, message, "cluster-2")
    assert named == reason
    assert detail == f"provider cluster-2 refused the ShadowPod: {message}"


@pytest.mark.parametrize("code", [409, 429, 500, 503])
def test_transient_create_errors_are_retried_without_a_reason(code):
    assert create_refusal(code, "busy", "cluster-2") is None


def test_a_valid_spec_has_no_problem():
    spec = {
        "clusterID": "cluster-2",
        "nodeLabels": {"topology.kubernetes.io/region": "region-b", "example.com/tier": "", "plain": "a.b_c-1"},
        "networking": {"podCIDRRemap": "10.200.0.0/16"},
    }
    assert foreign_spec_problems(spec) == []


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"bad key": "x"}, "spec.nodeLabels['bad key']: the key name 'bad key' must be"),
        ({"Example.COM/x": "y"}, "spec.nodeLabels['Example.COM/x']: the key prefix 'Example.COM' is not a DNS"),
        ({"/x": "y"}, "the key has an empty prefix"),
        ({"a/" + "n" * 64: "y"}, "must be 1 to 63 characters"),
        ({"region": "has space"}, "spec.nodeLabels['region']: the value 'has space' must be at most 63"),
        ({"region": "v" * 64}, "the value"),
        ({"region": "-edge"}, "starting and ending with a letter or digit"),
        ({"catamaran.io/type": "other"}, "spec.nodeLabels['catamaran.io/type']: the virtual kubelet sets this label"),
    ],
)
def test_invalid_node_labels_are_named(labels, fragment):
    problems = foreign_spec_problems({"nodeLabels": labels})
    assert len(problems) == 1
    assert fragment in problems[0]


COSTLY = {"key": "example.com/costly", "value": "true", "effect": "NoSchedule"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": NOW}


def test_valid_node_taints_have_no_problem():
    spec = {
        "nodeTaints": [
            COSTLY,
            {"key": "example.com/costly", "effect": "NoExecute"},  # the same key with another effect
            {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
        ]
    }
    assert foreign_spec_problems(spec) == []


@pytest.mark.parametrize(
    ("taints", "fragment"),
    [
        ([{"key": "bad key", "effect": "NoSchedule"}], "spec.nodeTaints[0]: the key name 'bad key' must be"),
        ([{"key": "Example.COM/x", "effect": "NoSchedule"}], "spec.nodeTaints[0]: the key prefix 'Example.COM'"),
        ([{"effect": "NoSchedule"}], "spec.nodeTaints[0]: the key must be a non-empty string"),
        ([{"key": "k", "value": "has space", "effect": "NoSchedule"}], "spec.nodeTaints[0]: the value 'has space'"),
        ([{"key": "k", "value": 5, "effect": "NoSchedule"}], "spec.nodeTaints[0]: the value must be a string"),
        (
            [{"key": "k", "effect": "NoEntry"}],
            "spec.nodeTaints[0]: the effect 'NoEntry' is none of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        ([{"key": "k"}], "spec.nodeTaints[0]: the effect None is none of"),
        (
            [COSTLY, {"key": "example.com/costly", "value": "x", "effect": "NoSchedule"}],
            "spec.nodeTaints[1]: a taint with key 'example.com/costly' and effect NoSchedule is listed before",
        ),
        (
            [{"key": "virtual-node.catamaran.io/not-allowed", "effect": "NoSchedule"}],
            "spec.nodeTaints[0]: the virtual kubelet sets the taint virtual-node.catamaran.io/not-allowed itself",
        ),
        (["k=v:NoSchedule"], "spec.nodeTaints[0]: must be a mapping of key, value and effect"),
    ],
)
def test_invalid_node_taints_are_named(taints, fragment):
    problems = foreign_spec_problems({"nodeTaints": taints})
    assert len(problems) == 1
    assert fragment in problems[0]


def test_the_node_settings_take_the_taints_of_the_spec():
    spec = {"clusterID": "cluster-2", "nodeTaints": [COSTLY]}
    settings, _ = settings_from({"spec": spec}, "10.0.0.1", 10250)
    assert settings.taints == [COSTLY]
    assert settings_from({"spec": {"clusterID": "cluster-2"}}, "10.0.0.1", 10250)[0].taints == []


def test_a_node_carries_a_taint_without_an_empty_value():
    assert node_taints([{"key": "spot", "value": "", "effect": "NoSchedule"}, COSTLY]) == [
        {"key": "spot", "effect": "NoSchedule"},
        COSTLY,
    ]


def test_the_owned_taints_annotation_round_trips_and_never_owns_the_registration_taint():
    value = owned_taints_annotation([COSTLY, {"key": "spot", "effect": "NoExecute"}])
    assert value == "example.com/costly:NoSchedule,spot:NoExecute"
    assert owned_taints(value) == {("example.com/costly", "NoSchedule"), ("spot", "NoExecute")}
    assert owned_taints_annotation([]) is None
    assert owned_taints(None) == set()
    assert owned_taints(f"{VIRTUAL_NODE_TAINT['key']}:NoExecute, junk") == set()
    assert ANNOTATION_OWNED_TAINTS.startswith("catamaran.io/")


def test_configured_taints_are_added_next_to_everyone_elses():
    admin = {"key": "maintenance", "value": "soon", "effect": "NoSchedule"}
    current = [VIRTUAL_NODE_TAINT, UNREACHABLE, admin]
    assert merged_taints(current, set(), [COSTLY]) == [VIRTUAL_NODE_TAINT, UNREACHABLE, admin, COSTLY]


def test_taints_already_in_place_need_no_patch():
    current = [VIRTUAL_NODE_TAINT, {**COSTLY, "timeAdded": NOW}, UNREACHABLE]
    assert merged_taints(current, {("example.com/costly", "NoSchedule")}, [COSTLY]) is None
    assert merged_taints([VIRTUAL_NODE_TAINT], set(), []) is None
    # An empty value in the spec is no value on the node.
    spot = {"key": "spot", "effect": "NoSchedule"}
    assert merged_taints([spot], {("spot", "NoSchedule")}, [{**spot, "value": ""}]) is None


def test_a_taint_removed_from_the_spec_goes_but_only_if_the_virtual_kubelet_set_it():
    admin = {"key": "maintenance", "effect": "NoSchedule"}
    current = [VIRTUAL_NODE_TAINT, COSTLY, admin, UNREACHABLE]
    owned = {("example.com/costly", "NoSchedule")}
    assert merged_taints(current, owned, []) == [VIRTUAL_NODE_TAINT, admin, UNREACHABLE]
    # Not recorded as its own (a node of an older virtual kubelet, or an admin's taint of that key): kept.
    assert merged_taints(current, set(), []) is None
    # The same key with another effect is another taint.
    other_effect = {**COSTLY, "effect": "NoExecute"}
    assert merged_taints([VIRTUAL_NODE_TAINT, other_effect, COSTLY], owned, []) == [VIRTUAL_NODE_TAINT, other_effect]


def test_a_changed_value_replaces_the_taint_and_the_registration_taint_is_never_removed():
    current = [VIRTUAL_NODE_TAINT, {**COSTLY, "value": "old"}, UNREACHABLE]
    owned = {("example.com/costly", "NoSchedule"), (VIRTUAL_NODE_TAINT["key"], "NoExecute")}
    assert merged_taints(current, owned, [COSTLY]) == [VIRTUAL_NODE_TAINT, UNREACHABLE, COSTLY]
    # Removed by hand (the conformance bench does), the registration taint is not put back.
    assert merged_taints([COSTLY], owned, [COSTLY]) is None


def test_every_problem_is_reported_at_once():
    spec = {"nodeLabels": {"ok": "fine", "bad key": "x", "k": "bad value"}, "networking": {"podCIDRRemap": "nope"}}
    problems = foreign_spec_problems(spec)
    assert len(problems) == 3
    assert problems[-1].startswith("spec.networking.podCIDRRemap: 'nope' is not a CIDR")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://203.0.113.10:6443", ("203.0.113.10", 6443)),
        ("https://api.example.com", ("api.example.com", 443)),
        ("https://[2001:db8::1]:6443/", ("2001:db8::1", 6443)),
    ],
)
def test_the_home_api_server_is_a_host_and_port(url, expected):
    assert home_api_server({"homeAPIServer": url}) == expected
    assert foreign_spec_problems({"homeAPIServer": url}) == []


@pytest.mark.parametrize("url", ["http://203.0.113.10:6443", "https://203.0.113.10:port", "https://h/api", "h:6443"])
def test_a_home_api_server_in_cluster_clients_cannot_use_is_named(url):
    (problem,) = foreign_spec_problems({"homeAPIServer": url})
    assert problem.startswith(f"spec.homeAPIServer: {url!r}")
