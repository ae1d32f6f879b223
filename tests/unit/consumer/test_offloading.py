"""The consumer's NamespaceOffloading controller (consumer/offloading.py): selection and phase, stale entries,
the reflection role, and conflicting twin claims (issue 37).
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from catamaran.consumer.offloading import offloading_phase, reflection_binding, selected_clusters
from catamaran.kube.events import EventRecorder
from catamaran.twin_claims import TWIN_TAKEN
from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from catamaran.consumer.offloading import removal_patch, unpeered_entries
from tests.unit.namespace_offloading import IN_B, REGION
from tests.unit.twin_cases import CONSUMER, EVIL, TWIN, VICTIM, Recorder


class PatchTestFailed(Exception):
    pass


def apply_patch(document: dict, patch: list[dict]) -> dict:
    """RFC 6902 `test` and `remove` on list items, as the API server applies them."""
    clusters = list(document["status"]["clusters"])
    for operation in patch:
        index = int(operation["path"].split("/")[3])
        if operation["op"] == "test":
            if index >= len(clusters) or clusters[index]["clusterID"] != operation["value"]:
                raise PatchTestFailed(operation["path"])
        else:
            del clusters[index]
    return {"status": {"clusters": clusters}}


def test_entries_of_unpeered_clusters_are_removed_guarded_by_their_cluster_id():
    status = {"clusters": [{"clusterID": "a"}, {"clusterID": "gone"}, {"clusterID": "b"}, {"clusterID": "old"}]}
    stale = unpeered_entries(status["clusters"], {"a", "b"})
    assert stale == [1, 3]
    patch = removal_patch(status["clusters"], stale)
    assert apply_patch({"status": status}, patch) == {"status": {"clusters": [{"clusterID": "a"}, {"clusterID": "b"}]}}
    moved = {"status": {"clusters": [{"clusterID": "a"}, {"clusterID": "b"}, {"clusterID": "gone"}]}}
    with pytest.raises(PatchTestFailed):
        apply_patch(moved, patch)


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


# -- the consumer's manager and pod webhook ------------------------------------------------------------------


def offloading_controller():
    from catamaran.consumer.offloading import NamespaceOffloadingController

    client = Recorder()
    controller = NamespaceOffloadingController(client, CONSUMER, EventRecorder(client, "test"))
    for namespace, body in (("victim", VICTIM), ("evil", EVIL)):
        controller.offloadings._store((namespace, "offloading"), body)
        controller._requeue_claimants("ADDED", (namespace, "offloading"), body, None)
    return controller, client


def test_a_conflicting_claim_is_its_own_phase_and_wins_over_the_clusters_entries():
    from catamaran.consumer.offloading import offloading_phase

    ready = {"a": {"phase": "Ready"}}
    assert offloading_phase(False, ["a"], ready, "taken") == ("Conflict", "taken")
    assert offloading_phase(True, ["a"], ready, "taken")[0] == "Terminating"
    assert offloading_phase(False, ["a"], ready, None)[0] == "Ready"


def test_the_manager_refuses_the_younger_claim_with_an_event_on_its_own_offloading_only():
    controller, client = offloading_controller()
    assert controller.twin_refusal("victim") is None
    assert controller.twin_refusal("evil") is not None
    asyncio.run(controller.reconcile(("evil", "offloading")))
    [status] = [call[4]["status"] for call in client.calls if call[0] == "patch" and "status" in call[4]]
    assert status["offloadingPhase"] == "Conflict"
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", TWIN_TAKEN)
    [event] = [call[2] for call in client.calls if call[1] == "Event"]
    assert (event.type, event.reason, event.involvedObject.namespace) == ("Warning", TWIN_TAKEN, "evil")
    assert all(call[3] != "victim" for call in client.calls if call[0] == "patch")


def test_the_younger_claim_is_reconsidered_when_the_older_one_is_let_go():
    controller, _ = offloading_controller()
    controller.queue = type(controller.queue)("namespaceoffloadings", controller.reconcile)  # empty
    controller._requeue_claimants("DELETED", ("victim", "offloading"), None, VICTIM)
    controller.offloadings._drop(("victim", "offloading"))
    assert controller.queue._queued == {("evil", "offloading")}
    assert controller.twin_refusal("evil") is None


def test_a_policys_namespace_without_its_offloading_yet_is_the_youngest_claim():
    controller, _ = offloading_controller()
    spec = {"namespaceMappingStrategy": "EnforceSameName"}
    assert controller.twin_refusal(TWIN, spec) is not None
    assert controller.twin_refusal("fresh", spec) is None


def test_the_reflection_role_is_bound_to_the_controllers_service_accounts_in_the_offloaded_namespace_only():
    binding = reflection_binding("shop", "catamaran-system")
    assert binding["metadata"]["namespace"] == "shop"
    assert binding["roleRef"]["name"] == "catamaran-vk-reflection"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:serviceaccounts:catamaran-system"}
    ]
