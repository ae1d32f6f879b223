"""The consumer's pod webhook (consumer/webhook.py): its mutation, configuration and refusals."""

from __future__ import annotations

import base64
import json

from catamaran import steering
from catamaran.consumer.webhook import namespace_selectors, review_response, webhook_configuration
from tests.unit.namespace_offloading import ANY_TEAM, TEAM_A, labels, pod


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


def test_the_webhook_keeps_a_refused_namespaces_pods_local_and_refuses_them_under_remote():
    import base64
    import json

    from catamaran.consumer.webhook import review_response

    def review() -> dict:
        return {"request": {"uid": "u", "object": {"metadata": {}, "spec": {"containers": [{"name": "a"}]}}}}

    refused = review_response(review(), {"podOffloadingStrategy": "Remote"}, "taken")["response"]
    assert refused["allowed"] is False
    assert refused["status"]["code"] == 403
    assert "taken" in refused["status"]["message"]
    local = review_response(review(), {"podOffloadingStrategy": "LocalAndRemote"}, "taken")["response"]
    assert local["allowed"] is True
    assert any("taken" in warning for warning in local["warnings"])
    operations = json.loads(base64.b64decode(local["patch"]))
    assert not any(op["path"] == "/spec/tolerations" for op in operations)  # never tolerates the virtual nodes
