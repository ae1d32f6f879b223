"""NamespaceOffloadingPolicies (consumer/policies.py)."""

from __future__ import annotations

import pytest

from catamaran.constants import LABEL_OFFLOADING_POLICY
from catamaran.consumer.policies import next_step, policy_offloading
from tests.unit.namespace_offloading import ANY_TEAM, TEAM_A


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
