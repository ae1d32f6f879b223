"""Pure logic of namespace offloading: selection, names, phases, the webhook's mutation, certificates."""

from __future__ import annotations

import base64
import datetime
import json

import pytest
from cryptography import x509

from catamaran import certs, steering
from catamaran.constants import LABEL_OFFLOADING_POLICY
from catamaran.consumer.offloading import offloading_phase, selected_clusters
from catamaran.consumer.policies import next_step, policy_offloading
from catamaran.consumer.webhook import namespace_selectors, review_response, webhook_configuration

REGION = "topology.kubernetes.io/region"
IN_B = {"nodeSelectorTerms": [{"matchExpressions": [{"key": REGION, "operator": "In", "values": ["region-b"]}]}]}


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


def virtual_nodes():
    return {
        (None, "catamaran-a"): {"name": "catamaran-a", "cluster": "a", "labels": {REGION: "region-a"}},
        (None, "catamaran-b"): {"name": "catamaran-b", "cluster": "b", "labels": {REGION: "region-b"}},
    }


def test_selection_and_phase():
    assert selected_clusters({}, virtual_nodes()) == ["a", "b"]
    assert selected_clusters({"clusterSelector": IN_B}, virtual_nodes()) == ["b"]
    assert offloading_phase(False, [], {})[0] == "NoClusterSelected"
    assert offloading_phase(False, ["a", "b"], {"a": {"phase": "Ready"}})[0] == "InProgress"
    assert offloading_phase(False, ["a", "b"], {"a": {"phase": "Ready"}, "b": {"phase": "Ready"}})[0] == "Ready"
    some = offloading_phase(False, ["a", "b"], {"a": {"phase": "Ready"}, "b": {"phase": "Failed", "message": "x"}})
    assert some == ("SomeFailed", "b: x")
    assert offloading_phase(False, ["b"], {"b": {"phase": "Failed", "message": "taken"}})[0] == "AllFailed"
    assert offloading_phase(True, ["a"], {"a": {"phase": "Ready"}})[0] == "Terminating"


def pod(affinity=None, owner=None, tolerations=None):
    meta = {"name": "p", "namespace": "shop"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o"}]
    spec = {"containers": [{"name": "c", "image": "i"}]}
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": meta, "spec": spec}


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


def test_admission_review_carries_a_json_patch():
    review = {"request": {"uid": "u1", "namespace": "shop", "object": pod()}}
    response = review_response(review, {"podOffloadingStrategy": "Remote"})["response"]
    assert response["uid"] == "u1"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"]))[0]["path"] == "/spec/affinity"
    assert "patch" not in review_response(review, None)["response"]


def test_webhook_configuration_fails_closed_only_for_offloaded_namespaces():
    selectors = namespace_selectors([], "catamaran-system")
    config = webhook_configuration(b"CA", "https://127.0.0.1:9443/mutate-pods", None, selectors)["webhooks"][0]
    assert config["failurePolicy"] == "Fail"
    assert config["timeoutSeconds"] == 5
    assert config["namespaceSelector"] == {"matchLabels": {steering.ENABLED_LABEL: "true"}}
    assert base64.b64decode(config["clientConfig"]["caBundle"]) == b"CA"


def test_certificates_are_issued_for_the_hosts_and_renewed_in_time(tmp_path):
    store = certs.CertificateStore(tmp_path, ["127.0.0.1", "catamaran-webhook.catamaran-system.svc"])
    assert store.ensure() is True
    assert store.ensure() is False  # nothing due: nothing changes
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "catamaran-webhook.catamaran-system.svc" in names.get_values_for_type(x509.DNSName)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    assert cert.issuer == ca.subject
    late = cert.not_valid_after_utc - datetime.timedelta(days=1)
    assert certs.needs_renewal((tmp_path / "tls.crt").read_bytes(), now=late)
    assert not certs.needs_renewal((tmp_path / "tls.crt").read_bytes())
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    store.ssl_context()  # loads


def test_ca_rotation_keeps_the_previous_ca_in_the_bundle(tmp_path, monkeypatch):
    store = certs.CertificateStore(tmp_path, ["127.0.0.1"])
    store.ensure()
    old_ca = (tmp_path / "ca.crt").read_bytes()
    key, near_expiry = certs.make_ca("old", days=3)
    (tmp_path / "ca.crt").write_bytes(near_expiry)
    (tmp_path / "ca.key").write_bytes(key)
    assert old_ca != near_expiry
    two_days_later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=2, hours=12)
    monkeypatch.setattr(certs, "_now", lambda: two_days_later)
    assert store.ensure() is True
    bundle = store.ca_bundle()
    assert near_expiry in bundle
    assert (tmp_path / "ca.crt").read_bytes() in bundle


def policy(name: str, selector: dict, **offloading) -> dict:
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloadingPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"namespaceSelector": selector, "offloading": {"podOffloadingStrategy": "Remote", **offloading}},
    }


TEAM_A = policy("team-a", {"matchLabels": {"team": "a"}})
ANY_TEAM = policy(
    "any-team", {"matchExpressions": [{"key": "team", "operator": "Exists"}]}, podOffloadingStrategy="Local"
)


def labels(name: str, **more) -> dict:
    return {steering.NAMESPACE_NAME_LABEL: name, **more}


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


def made(policy_name: str | None, deleting: bool = False, **spec) -> dict:
    meta: dict = {
        "name": "offloading",
        "namespace": "shop",
        "labels": {LABEL_OFFLOADING_POLICY: policy_name} if policy_name else {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    return {"metadata": meta, "spec": {"podOffloadingStrategy": "Remote", **spec}}


LIVE = {"labels": {}, "deleting": False}


@pytest.mark.parametrize(
    ("namespace", "offloading", "deciding", "expected"),
    [
        (LIVE, None, TEAM_A, "create"),
        (LIVE, made("team-a"), TEAM_A, None),
        (LIVE, made("team-a", podOffloadingStrategy="Local"), TEAM_A, "update"),
        (LIVE, made("team-a"), None, "delete"),  # the namespace stopped matching
        (LIVE, made("team-a"), ANY_TEAM, "delete"),  # another policy decides now: remade once this one is gone
        (LIVE, made(None), TEAM_A, None),  # the namespace's own NamespaceOffloading wins
        (LIVE, made(None), None, None),
        (LIVE, made("team-a", deleting=True), TEAM_A, None),  # wait until it is gone
        ({"labels": {}, "deleting": True}, None, TEAM_A, None),
        (None, None, TEAM_A, None),
    ],
)
def test_a_policy_gives_and_takes_a_namespaces_offloading(namespace, offloading, deciding, expected):
    assert next_step(namespace, offloading, deciding) == expected


def test_a_policy_made_offloading_names_its_policy_as_label_and_owner():
    body = policy_offloading(TEAM_A, "shop")
    assert body["metadata"]["name"] == "offloading"
    assert body["metadata"]["labels"] == {LABEL_OFFLOADING_POLICY: "team-a"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-team-a"
    assert body["spec"] == TEAM_A["spec"]["offloading"]


def test_each_policy_has_a_webhook_for_its_namespaces_not_yet_offloaded():
    selectors = namespace_selectors([TEAM_A, ANY_TEAM], "ops")
    config = webhook_configuration(b"CA", "https://127.0.0.1:9443/mutate-pods", None, selectors)["webhooks"]
    assert [hook["clientConfig"]["url"] for hook in config] == [
        "https://127.0.0.1:9443/mutate-pods",
        "https://127.0.0.1:9443/mutate-pods/policies/any-team",
        "https://127.0.0.1:9443/mutate-pods/policies/team-a",
    ]
    team_a = config[2]["namespaceSelector"]
    assert team_a["matchLabels"] == {"team": "a"}
    assert {"key": steering.ENABLED_LABEL, "operator": "NotIn", "values": ["true"]} in team_a["matchExpressions"]
    # What the API server calls the webhook for is what the controller offloads: one rule for both.
    for namespace_labels in (labels("shop", team="a"), labels("kube-system", team="a"), labels("ops", team="a")):
        assert steering.label_selector_matches(team_a, namespace_labels) == steering.policy_selects(
            TEAM_A, namespace_labels, "ops"
        )
    in_service = webhook_configuration(b"CA", None, {"namespace": "ops", "name": "hook", "port": 443}, selectors)
    assert in_service["webhooks"][2]["clientConfig"]["service"]["path"] == "/mutate-pods/policies/team-a"
