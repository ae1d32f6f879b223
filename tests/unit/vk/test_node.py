"""The virtual node (vk/node.py): its status, share and conditions, the most specific problem shown, and the
taints it carries and owns.
"""

from __future__ import annotations

import sys

import pytest

from catamaran.constants import ANNOTATION_OWNED_TAINTS, VIRTUAL_NODE_TAINT
from catamaran.vk.node import (
    CORDON_TAINT,
    PROVIDER_CORDONED,
    ROUNDED_TO_ZERO,
    NodeSettings,
    merged_taints,
    node_status,
    node_taints,
    owned_taints,
    owned_taints_annotation,
)
from catamaran.vk.pools import Cordon, cordon_of
from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from catamaran.vk.node import top_problem
from tests.unit.vk.offloading_scope import COSTLY, NOW


def test_node_status_reports_rounding_to_zero_and_health():
    settings = NodeSettings(provider_id="p", node_ip="10.0.0.9", sharing_percentage=90)
    offer = {"free": {"cpu": "2", "nvidia.com/gpu": "1"}, "pressure": ["DiskPressure"]}
    status, vanished = node_status(settings, offer, True, "", [])
    conditions = {c["type"]: c for c in status["conditions"]}
    assert vanished == ["nvidia.com/gpu"]
    assert conditions["Ready"]["status"] == "True"
    assert conditions["DiskPressure"]["status"] == "True"
    assert conditions[ROUNDED_TO_ZERO]["status"] == "True"
    assert status["allocatable"] == {"cpu": "1800m", "nvidia.com/gpu": "0", "pods": "0"}
    unhealthy, _ = node_status(settings, offer, False, "3 consecutive health checks failed", status["conditions"])
    ready = next(c for c in unhealthy["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ProviderUnreachable")


SETTINGS = NodeSettings(provider_id="p", node_ip="10.0.0.1")
OFFER = {"free": {"cpu": "4", "memory": "4Gi", "pods": "100"}}


def ready_condition(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize(
    ("problems", "expected"),
    [
        ({}, None),
        ({"WatchesFailing": "w"}, ("WatchesFailing", "w")),
        ({"WatchesFailing": "w", "CredentialRejected": "c"}, ("CredentialRejected", "c")),
        ({"Zeta": "z", "Alpha": "a", "WatchesFailing": "w"}, ("WatchesFailing", "w")),
        ({"Zeta": "z", "Alpha": "a"}, ("Alpha", "a")),
    ],
)
def test_the_most_specific_problem_is_shown(problems, expected):
    assert top_problem(problems) == expected


def test_node_ready_condition_follows_health_then_problems_then_offer():
    unreachable, _ = node_status(SETTINGS, OFFER, False, "timeout", [], {"WatchesFailing": "w"})
    assert ready_condition(unreachable)["reason"] == "ProviderUnreachable"
    failing, _ = node_status(SETTINGS, OFFER, True, "", [], {"WatchesFailing": "informer x: 403"})
    assert ready_condition(failing)["status"] == "False"
    assert ready_condition(failing)["reason"] == "WatchesFailing"
    assert ready_condition(failing)["message"] == "informer x: 403"
    ready, _ = node_status(SETTINGS, OFFER, True, "", [], {})
    assert ready_condition(ready)["status"] == "True"


UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": NOW}


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


def test_the_providers_cordon_is_read_from_the_offers_spec_its_reason_bounded():
    assert cordon_of(None) is None
    assert cordon_of({"spec": {}}) is None
    assert cordon_of({"spec": {"cordon": {}}}) == Cordon(drain=False, reason="")
    assert cordon_of({"spec": {"cordon": {"drain": True, "reason": "budget spent"}}}) == Cordon(True, "budget spent")
    assert cordon_of({"spec": {"cordon": {"drain": "yes"}}}) == Cordon(drain=False)  # only true drains
    assert len(cordon_of({"spec": {"cordon": {"reason": "x" * 100_000}}}).reason) < 2000


def test_a_cordoned_node_says_so_and_carries_the_cordon_taint_which_goes_with_it():
    settings = NodeSettings(provider_id="p", node_ip="10.0.0.9")
    offer = {"free": {"cpu": "4", "pods": "10"}}
    for cordon, expected in (
        (None, ("False", "NotCordoned")),
        (Cordon(reason="maintenance"), ("True", "Cordoned")),
        (Cordon(drain=True), ("True", "Drained")),
    ):
        status, _ = node_status(settings, offer, True, "", [], cordon=cordon)
        (condition,) = [c for c in status["conditions"] if c["type"] == PROVIDER_CORDONED]
        assert (condition["status"], condition["reason"]) == expected
    assert "provider p lends this tenant nothing new: maintenance" in str(
        node_status(settings, offer, True, "", [], cordon=Cordon(reason="maintenance"))[0]["conditions"]
    )
    # The cordon's taint is one the virtual kubelet owns: added next to the others, and removed once uncordoned.
    with_cordon = merged_taints([VIRTUAL_NODE_TAINT, UNREACHABLE], set(), [COSTLY, CORDON_TAINT])
    assert with_cordon == [VIRTUAL_NODE_TAINT, UNREACHABLE, COSTLY, CORDON_TAINT]
    owned = owned_taints(owned_taints_annotation([COSTLY, CORDON_TAINT]))
    assert merged_taints(with_cordon, owned, [COSTLY]) == [VIRTUAL_NODE_TAINT, UNREACHABLE, COSTLY]
