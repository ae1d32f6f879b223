"""Pure logic of the per-hop metrics: how API requests are named, and what a work queue's wait measures."""

from __future__ import annotations

import asyncio

import pytest

from catamaran import metrics
from catamaran.kube.clients import request_kind
from catamaran.kube.workqueue import WorkQueue


@pytest.mark.parametrize(
    ("method", "path", "watch", "expected"),
    [
        ("GET", "/api/v1/namespaces/a/pods", False, ("LIST", "pods")),
        ("GET", "/api/v1/namespaces/a/pods", True, ("WATCH", "pods")),
        ("GET", "/api/v1/pods", True, ("WATCH", "pods")),
        ("GET", "/api/v1/namespaces/a/pods/p", False, ("GET", "pods")),
        ("PATCH", "/api/v1/namespaces/a/pods/p/status", False, ("PATCH", "pods/status")),
        ("POST", "/apis/offloading.catamaran.io/v1alpha1/namespaces/t/shadowpods", False, ("POST", "shadowpods")),
        (
            "PATCH",
            "/apis/offloading.catamaran.io/v1alpha1/namespaces/t/shadowpods/s/status",
            False,
            ("PATCH", "shadowpods/status"),
        ),
        ("DELETE", "/api/v1/namespaces/a/pods", False, ("DELETECOLLECTION", "pods")),
        ("GET", "/api/v1/namespaces/a", False, ("GET", "namespaces")),
        ("PUT", "/api/v1/namespaces/a/finalize", False, ("PUT", "namespaces/finalize")),
        ("PATCH", "/api/v1/nodes/n/status", False, ("PATCH", "nodes/status")),
        ("GET", "/apis/coordination.k8s.io/v1", False, ("GET", "discovery")),
        ("GET", "/readyz", False, ("GET", "nonresource")),
    ],
)
def test_api_requests_are_named_by_verb_and_resource_as_the_api_server_does(method, path, watch, expected):
    assert request_kind(method, path, watch) == expected


def _sample(name: str, labels: dict) -> float:
    value = metrics.QUEUE_WAIT_SECONDS.collect()[0]
    return sum(s.value for s in value.samples if s.name == name and s.labels == labels)


def test_a_key_waits_in_the_queue_from_its_first_add_until_a_worker_takes_it():
    async def scenario():
        release = asyncio.Event()
        taken = []

        async def reconcile(key):
            taken.append(key)
            await release.wait()

        queue = WorkQueue("wait-test", reconcile, workers=1)
        runner = asyncio.create_task(queue.run())
        queue.add("first")
        await asyncio.sleep(0.01)
        queue.add("second")
        queue.add("second")  # deduplicated: one wait, measured from the first add
        await asyncio.sleep(0.2)
        release.set()
        await asyncio.sleep(0.05)
        runner.cancel()
        return taken

    assert asyncio.run(scenario()) == ["first", "second"]
    labels = {"controller": "wait-test"}
    assert _sample("catamaran_queue_wait_seconds_count", labels) == 2
    assert _sample("catamaran_queue_wait_seconds_sum", labels) >= 0.2  # "second" waited behind "first"
