"""The token bucket (kube/ratelimit.py)."""

from __future__ import annotations

from catamaran.kube.ratelimit import TokenBucket
from catamaran.vk import remote_events


def test_token_bucket_allows_a_burst_then_gives_each_waiter_its_own_later_slot(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(remote_events.time, "monotonic", lambda: clock[0])
    bucket = TokenBucket(rate=2, burst=3)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [bucket.reserve() for _ in range(3)] == [0.5, 1.0, 1.5]  # waiters queue up, none competes
    clock[0] += 2.0
    assert bucket.reserve() == 0.0  # the three slots are used up by then; the rate refilled one more
