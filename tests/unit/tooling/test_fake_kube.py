"""The in-memory API server of tests/unit/fakes/kube.py keeps the API server's rules the reconciler tests rely on.

A fake that drifted from the API server would let a reconciler pass here and fail in a cluster: each rule the
reconciler tests lean on is held here to what the API server does.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Pod
from lightkube.types import CascadeType, PatchType

from catamaran.kube.informer import Informer
from catamaran.kube.resources import ShadowPod
from tests.unit.fakes.kube import FakeCluster, assert_matches, settle
from tests.unit.fakes.offloading import informers_use_fakes


def pod(name: str = "p", *, node: str | None = "n1", status: dict | None = None, **meta) -> dict:
    spec = {"containers": [{"name": "c", "image": "i:1"}], **({"nodeName": node} if node else {})}
    return {
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": spec,
        "status": status or {"phase": "Running"},
    }


def shadow(name: str = "s", **meta) -> dict:
    return {"metadata": {"name": name, "namespace": "default", **meta}, "spec": {"pod": {}}}


def call(coroutine):
    async def within():
        return await coroutine

    return asyncio.run(within())


def refusal(coroutine) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(coroutine)
    return caught.value


def test_create_sets_the_servers_metadata_and_refuses_a_second_of_the_same_name():
    cluster = FakeCluster()
    client = cluster.client()
    created = call(client.create(Pod.from_dict(pod(status={"phase": "Running"}))))
    assert None not in (created.metadata.uid, created.metadata.resourceVersion, created.metadata.creationTimestamp)
    assert created.status.phase == "Pending"  # the status subresource's: a client does not set it
    error = refusal(client.create(Pod.from_dict(pod())))
    assert (error.status.code, error.status.reason, error.status.message) == (
        409,
        "AlreadyExists",
        'pods "p" already exists',
    )
    assert (error.status.details.name, error.status.details.kind) == ("p", "pods")


def test_a_missing_object_is_404_named_as_the_api_server_names_it():
    client = FakeCluster().client()
    error = refusal(client.get(ShadowPod, "gone", namespace="default"))
    assert (error.status.code, error.status.reason) == (404, "NotFound")
    assert error.status.message == 'shadowpods.offloading.catamaran.io "gone" not found'
    assert refusal(client.delete(Pod, "gone", namespace="default")).status.code == 404
    assert refusal(client.patch(Pod, "gone", {}, namespace="default", patch_type=PatchType.MERGE)).status.code == 404


def test_creating_in_a_missing_or_terminating_namespace_is_refused():
    cluster = FakeCluster()
    cluster.add(Namespace, {"metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    client = cluster.client()
    missing = refusal(client.create(ConfigMap.from_dict({"metadata": {"name": "c", "namespace": "nowhere"}})))
    assert (missing.status.code, missing.status.message) == (404, 'namespaces "nowhere" not found')
    going = refusal(client.create(ConfigMap.from_dict({"metadata": {"name": "c", "namespace": "going"}})))
    assert going.status.code == 403
    assert "unable to create new content in namespace going because it is being terminated" in going.status.message


def test_a_merge_patch_removes_nulls_changes_nothing_twice_and_honours_a_resource_version():
    cluster = FakeCluster()
    stored = cluster.add(ConfigMap, {"metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1", "b": "2"}})
    client = cluster.client()
    call(client.patch(ConfigMap, "c", {"data": {"a": None, "c": "3"}}, namespace="default", patch_type=PatchType.MERGE))
    after = cluster.read(ConfigMap, "c", "default")
    assert after["data"] == {"b": "2", "c": "3"}
    call(client.patch(ConfigMap, "c", {"data": {"c": "3"}}, namespace="default", patch_type=PatchType.MERGE))
    assert (
        cluster.read(ConfigMap, "c", "default")["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
    )
    stale = {"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]}, "data": {"d": "4"}}
    error = refusal(client.patch(ConfigMap, "c", stale, namespace="default", patch_type=PatchType.MERGE))
    assert (error.status.code, error.status.reason) == (409, "Conflict")


def test_the_status_subresource_changes_only_the_status_and_the_main_resource_never_does():
    cluster = FakeCluster()
    cluster.add(ShadowPod, shadow(labels={"a": "1"}))
    client = cluster.client()
    body = {"metadata": {"labels": {"a": "2"}}, "status": {"phase": "Running"}}
    call(client.patch(ShadowPod.Status, "s", body, namespace="default", patch_type=PatchType.MERGE))
    assert_matches(
        cluster.read(ShadowPod, "s", "default"), {"metadata": {"labels": {"a": "1"}}, "status": {"phase": "Running"}}
    )
    body = {"metadata": {"labels": {"a": "3"}}, "status": {"phase": "Failed"}}
    call(client.patch(ShadowPod, "s", body, namespace="default", patch_type=PatchType.MERGE))
    assert_matches(
        cluster.read(ShadowPod, "s", "default"), {"metadata": {"labels": {"a": "3"}}, "status": {"phase": "Running"}}
    )


def test_a_strategic_merge_patch_merges_conditions_by_type_and_is_refused_on_a_custom_resource():
    cluster = FakeCluster()
    cluster.add(Pod, pod(status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}))
    cluster.add(ShadowPod, shadow())
    client = cluster.client()
    body = {"status": {"conditions": [{"type": "Extra", "status": "False"}]}}
    call(client.patch(Pod.Status, "p", body, namespace="default", patch_type=PatchType.STRATEGIC))
    assert [c["type"] for c in cluster.read(Pod, "p", "default")["status"]["conditions"]] == ["Ready", "Extra"]
    error = refusal(client.patch(ShadowPod, "s", {"spec": {}}, namespace="default", patch_type=PatchType.STRATEGIC))
    assert error.status.code == 415


def test_a_json_patch_applies_its_operations_and_fails_a_test_with_422():
    cluster = FakeCluster()
    cluster.add(ConfigMap, {"metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}})
    client = cluster.client()
    operations = [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "2"},
        {"op": "add", "path": "/metadata/labels", "value": {"x/y": "z"}},
    ]
    call(client.patch(ConfigMap, "c", operations, namespace="default", patch_type=PatchType.JSON))
    assert_matches(cluster.read(ConfigMap, "c", "default"), {"data": {"a": "2"}, "metadata": {"labels": {"x/y": "z"}}})
    failing = [{"op": "test", "path": "/data/a", "value": "1"}]
    assert (
        refusal(client.patch(ConfigMap, "c", failing, namespace="default", patch_type=PatchType.JSON)).status.code
        == 422
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        pytest.param({"metadata": {"labels": {"new": "1"}}}, None, id="labels"),
        pytest.param({"spec": {"containers": [{"name": "c", "image": "i:2"}]}}, None, id="an image"),
        pytest.param({"spec": {"activeDeadlineSeconds": 30}}, None, id="a deadline lowered"),
        pytest.param(
            {"spec": {"activeDeadlineSeconds": 120}},
            "must be less than or equal to previous value",
            id="a deadline raised",
        ),
        pytest.param({"spec": {"restartPolicy": "Never"}}, "pod updates may not change fields", id="anything else"),
    ],
)
def test_a_pod_spec_changes_only_as_the_api_server_allows(change, problem):
    cluster = FakeCluster()
    original = pod()
    original["spec"]["activeDeadlineSeconds"] = 60
    cluster.add(Pod, original)
    patching = cluster.client().patch(Pod, "p", change, namespace="default", patch_type=PatchType.MERGE)
    if problem is None:
        call(patching)
    else:
        error = refusal(patching)
        assert (error.status.code, error.status.reason) == (422, "Invalid")
        assert error.status.message.startswith('Pod "p" is invalid: ')
        assert problem in error.status.message


def test_a_running_pod_goes_gracefully_an_unbound_one_at_once():
    cluster = FakeCluster()
    cluster.add(Pod, pod("bound"))
    cluster.add(Pod, pod("unbound", node=None))
    client = cluster.client()
    call(client.delete(Pod, "unbound", namespace="default"))
    assert cluster.read(Pod, "unbound", "default") is None
    call(client.delete(Pod, "bound", namespace="default"))
    assert_matches(cluster.read(Pod, "bound", "default"), {"metadata": {"deletionGracePeriodSeconds": 30}})
    call(client.delete(Pod, "bound", namespace="default", grace_period=5))
    assert cluster.read(Pod, "bound", "default")["metadata"]["deletionGracePeriodSeconds"] == 5
    cluster.finish_pod("bound", "default")
    assert cluster.read(Pod, "bound", "default") is None


def test_finalizers_hold_an_object_until_the_last_goes():
    cluster = FakeCluster()
    cluster.add(ConfigMap, {"metadata": {"name": "c", "namespace": "default", "finalizers": ["example.com/f"]}})
    client = cluster.client()
    call(client.delete(ConfigMap, "c", namespace="default"))
    assert cluster.read(ConfigMap, "c", "default")["metadata"]["deletionTimestamp"]
    adding = {"metadata": {"finalizers": ["example.com/f", "example.com/g"]}}
    assert (
        refusal(client.patch(ConfigMap, "c", adding, namespace="default", patch_type=PatchType.MERGE)).status.code
        == 422
    )
    call(
        client.patch(
            ConfigMap, "c", {"metadata": {"finalizers": None}}, namespace="default", patch_type=PatchType.MERGE
        )
    )
    assert cluster.read(ConfigMap, "c", "default") is None


def test_an_owner_deleted_in_the_foreground_goes_after_its_blocking_dependents():
    cluster = FakeCluster()
    owner = cluster.add(ShadowPod, shadow())
    reference = {"apiVersion": "v1", "kind": "ShadowPod", "name": "s", "uid": owner["metadata"]["uid"]}
    cluster.add(Pod, pod(ownerReferences=[{**reference, "controller": True, "blockOwnerDeletion": True}]))
    cluster.add(ConfigMap, {"metadata": {"name": "c", "namespace": "default", "ownerReferences": [reference]}})
    call(cluster.client().delete(ShadowPod, "s", namespace="default", cascade=CascadeType.FOREGROUND))
    cluster.collect_garbage()
    assert cluster.read(ShadowPod, "s", "default")["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert cluster.read(Pod, "p", "default")["metadata"]["deletionTimestamp"]  # terminating: its kubelet has it
    assert cluster.read(ConfigMap, "c", "default") is None  # not blocking: deleted, not waited for
    cluster.finish_pod("p", "default")
    cluster.collect_garbage()
    assert cluster.read(ShadowPod, "s", "default") is None


def test_a_fault_answers_as_often_as_asked_then_the_server_answers_again():
    cluster = FakeCluster()
    cluster.fail("create", Event, 500, "etcdserver: request timed out")
    client = cluster.client()
    event = Event.from_dict({"metadata": {"name": "e", "namespace": "default"}, "involvedObject": {}})
    error = refusal(client.create(event))
    assert (error.status.code, error.status.reason, error.status.message) == (
        500,
        "InternalError",
        "etcdserver: request timed out",
    )
    call(client.create(event))
    assert [e["metadata"]["name"] for e in cluster.events("default")] == ["e"]


def test_informers_list_and_watch_the_fake_selectors_included():
    async def scenario():
        cluster = FakeCluster()
        client = cluster.client()
        cluster.add(Pod, pod("a", labels={"app": "x"}))
        labelled = Informer(client, Pod, name="labelled", labels={"app": "x"})
        on_node = Informer(client, Pod, name="on-node", fields={"spec.nodeName": "n2"})
        seen = []
        labelled.on_change(lambda event, key, new, old: seen.append((event, key[1])))
        tasks = [asyncio.get_running_loop().create_task(i.run()) for i in (labelled, on_node)]
        await asyncio.sleep(0)
        assert (on_node.synced.is_set(), len(on_node.cache)) == (True, 0)  # listed, its watch not sent yet
        cluster.add(Pod, pod("b", node="n2"))  # between the list and the watch: not lost
        await settle(cluster)
        assert list(on_node.cache) == [("default", "b")]
        merge = PatchType.MERGE
        await client.patch(Pod, "b", {"metadata": {"labels": {"app": "x"}}}, namespace="default", patch_type=merge)
        await client.patch(Pod, "a", {"metadata": {"labels": {"app": None}}}, namespace="default", patch_type=merge)
        await settle(cluster)
        for task in tasks:
            task.cancel()
        return seen, sorted(name for _, name in labelled.cache), sorted(name for _, name in on_node.cache)

    with informers_use_fakes():
        seen, labelled, on_node = asyncio.run(scenario())
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert (labelled, on_node) == (["b"], ["b"])
