"""Mirroring remote pod events onto local pods (vk/remote_events.py): what is kept, and bounded."""

from __future__ import annotations

from lightkube.resources.core_v1 import Event

from catamaran.vk import trust
from catamaran.vk.remote_events import compact_event, mirrored_event


def test_mirrored_events_are_bounded():
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "shop-c1"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "shop-c1"},
        "type": "Warning",
        "reason": "Totally Legit",
        "message": "\u202e" + "E" * 700_000,
    }
    compact = compact_event(Event.from_dict(event))
    assert compact["reason"] == trust.PROVIDER_REASON
    assert len(compact["message"]) == trust.MESSAGE_LIMIT
    assert not compact["message"].startswith("\u202e")


REMOTE = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {"name": "web.17a1b2c3", "namespace": "shop-c1"},
    "involvedObject": {"kind": "Pod", "name": "web", "namespace": "shop-c1", "uid": "remote-uid"},
    "type": "Warning",
    "reason": "FailedMount",
    "message": 'MountVolume.SetUp failed for volume "page" : configmap "page" not found',
    "count": 4,
    "firstTimestamp": "2026-11-23T01:00:00Z",
    "lastTimestamp": "2026-11-23T01:02:00Z",
    "source": {"component": "kubelet", "host": "cluster-2-real"},
}
LOCAL_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop", "uid": "local-uid"}}


def test_a_mirrored_event_keeps_what_happened_and_points_at_the_local_pod():
    compact = compact_event(Event.from_dict(REMOTE))
    body = mirrored_event("web.17a1b2c3", compact, LOCAL_POD, "cluster-2", "catamaran-cluster-2")
    assert (body["type"], body["reason"], body["message"], body["count"]) == (
        "Warning",
        "FailedMount",
        REMOTE["message"],
        4,
    )
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": "shop",
        "uid": "local-uid",
    }
    assert body["metadata"] == {"name": "web.17a1b2c3.cluster-2", "namespace": "shop"}
    assert body["source"] == {"component": "cluster-2 (remote)", "host": "cluster-2-real"}
    assert body["lastTimestamp"] == "2026-11-23T01:02:00Z"


def test_series_events_report_their_series_count():
    series = {**REMOTE, "count": None, "series": {"count": 9, "lastObservedTime": "2026-11-23T01:05:00.000000Z"}}
    compact = compact_event(Event.from_dict(series))
    assert compact["count"] == 9
    assert compact["last"].startswith("2026-11-23T01:05:00")
