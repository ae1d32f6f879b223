"""The informers' packed cache: what goes in comes out equal, and takes a fraction of the memory of dicts."""

from __future__ import annotations

import tracemalloc

from catamaran.kube.informer import PackedCache


def pod(index: int) -> dict:
    return {
        "metadata": {"name": f"pod-{index}", "namespace": "ns", "uid": f"uid-{index}", "labels": {"app": "x"}},
        "spec": {
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
            "nodeName": "catamaran-provider",
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"},
    }


def test_objects_come_back_equal_and_each_read_is_a_copy():
    cache = PackedCache()
    cache[("ns", "pod-1")] = pod(1)
    assert cache[("ns", "pod-1")] == pod(1)
    assert cache.get(("ns", "pod-1")) == pod(1)
    assert cache.get(("ns", "missing")) is None
    cache[("ns", "pod-1")]["status"]["phase"] = "Failed"  # a reader's change does not reach the cache
    assert cache[("ns", "pod-1")]["status"]["phase"] == "Running"
    assert ("ns", "pod-1") in cache
    assert list(cache) == [("ns", "pod-1")]
    assert dict(cache.items()) == {("ns", "pod-1"): pod(1)}
    assert cache.pop(("ns", "pod-1")) == pod(1)
    assert cache.pop(("ns", "pod-1")) is None
    assert len(cache) == 0


def test_a_packed_cache_holds_pods_in_far_less_memory_than_dicts():
    def held(fill) -> int:
        tracemalloc.start()
        kept = fill()
        used = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del kept
        return used

    def as_dicts():
        return {("ns", f"pod-{i}"): pod(i) for i in range(2000)}

    def packed():
        cache = PackedCache()
        for i in range(2000):
            cache[("ns", f"pod-{i}")] = pod(i)
        return cache

    assert held(packed) * 2 < held(as_dicts)
