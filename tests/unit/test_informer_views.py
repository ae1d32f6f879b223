"""One pod watch for the manager: the ShadowPod controller's pods are a view of the offers' pod informer."""

from __future__ import annotations

from lightkube.models.core_v1 import Container, PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from catamaran.constants import LABEL_MANAGED_BY, MANAGED_BY_CATAMARAN
from catamaran.kube.informer import Informer
from catamaran.provider.offers import summarize_pod
from catamaran.provider.shadowpods import _managed, compact_pod


def pod(name: str, version: str, managed: bool, phase: str = "Running") -> Pod:
    labels = {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN} if managed else {"app": "other"}
    return Pod(
        metadata=ObjectMeta(name=name, namespace="twin", uid=f"uid-{name}", labels=labels, resourceVersion=version),
        spec=PodSpec(containers=[Container(name="app", image="pause")], nodeName="node-1"),
        status=PodStatus(phase=phase, podIP="10.0.0.1"),
    )


def test_a_view_follows_its_source_and_reports_objects_entering_and_leaving_it():
    source = Informer(None, Pod, name="pods", transform=summarize_pod)
    view = source.view("managed", include=_managed, transform=compact_pod, packed=True)
    seen = []
    view.on_change(lambda event, key, new, old: seen.append((event, key[1], bool(new), bool(old))))

    source._apply("ADDED", pod("a", "1", managed=True))
    source._apply("ADDED", pod("b", "2", managed=False))
    assert set(source.cache) == {("twin", "a"), ("twin", "b")}
    assert list(view.cache) == [("twin", "a")]
    assert view.get("twin", "a") == {
        "metadata": {
            "name": "a",
            "namespace": "twin",
            "uid": "uid-a",
            "ownerReferences": None,
            "deletionTimestamp": None,
            "deletionGracePeriodSeconds": None,
        },
        "changeable": {
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
            "annotations": {},
            "activeDeadlineSeconds": None,
        },
        "ephemeralContainers": [],
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }

    source._apply("MODIFIED", pod("a", "3", managed=True, phase="Succeeded"))
    assert source.get("twin", "a") is None  # a finished pod holds nothing of its node or tenant
    assert view.get("twin", "a")["status"]["phase"] == "Succeeded"  # but its status still reaches the ShadowPod

    source._apply("MODIFIED", pod("b", "4", managed=True))  # relabelled: enters the view
    source._apply("MODIFIED", pod("a", "5", managed=False))  # leaves it
    source._apply("DELETED", pod("b", "6", managed=True))
    assert seen == [
        ("ADDED", "a", True, False),
        ("MODIFIED", "a", True, True),
        ("ADDED", "b", True, False),
        ("DELETED", "a", False, True),
        ("DELETED", "b", False, True),
    ]
    assert len(view.cache) == 0
    assert view.synced is source.synced


def test_a_relist_replaces_the_view_and_announces_only_differences():
    source = Informer(None, Pod, name="pods", transform=summarize_pod)
    view = source.view("managed", include=_managed, transform=compact_pod)
    source._apply("ADDED", pod("kept", "1", managed=True))
    source._apply("ADDED", pod("gone", "2", managed=True))
    seen = []
    view.on_change(lambda event, key, new, old: seen.append((event, key[1])))
    fresh = {("twin", "kept"): compact_pod(pod("kept", "1", managed=True))}
    view._replace(fresh, {("twin", "kept"): "1", ("twin", "gone"): "2"}, {("twin", "kept"): "1"})
    assert seen == [("DELETED", "gone")]
    assert list(view.cache) == [("twin", "kept")]


def test_keys_in_a_namespace_follow_the_cache_without_a_walk():
    from catamaran.kube.informer import _Cached

    cached = _Cached("pods", packed=False)
    cached._store(("a", "one"), 1)
    cached._store(("a", "two"), 2)
    cached._store(("b", "one"), 3)
    assert sorted(cached.keys_in("a")) == [("a", "one"), ("a", "two")]
    cached._drop(("a", "one"))
    assert cached.keys_in("a") == [("a", "two")]
    cached._reset({("c", "x"): 4})
    assert (cached.keys_in("a"), cached.keys_in("c")) == ([], [("c", "x")])


def test_named_handlers_enqueue_or_call_only_for_the_changes_they_admit():
    from catamaran.kube.informer import call, changed, enqueue, present

    class Queue:
        def __init__(self):
            self.added = []

        def add(self, key, delay=0):
            self.added.append((key, delay))

    queue, calls = Queue(), []
    enqueue(queue, key=lambda key: key[1], delay=1.0, when=present)("ADDED", ("ns", "a"), {"x": 1}, None)
    enqueue(queue, when=present)("DELETED", ("ns", "b"), None, {"x": 1})
    assert queue.added == [("a", 1.0)]
    call(calls.append, key=lambda key: key[0], when=changed)("MODIFIED", ("ns", "a"), {"x": 1}, {"x": 1})
    call(calls.append, key=lambda key: key[0], when=changed)("MODIFIED", ("ns", "a"), {"x": 2}, {"x": 1})
    assert calls == ["ns"]
