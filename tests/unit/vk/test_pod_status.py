"""Which status changes are worth writing (vk/pod_status.py)."""

from __future__ import annotations

from catamaran.vk.pod_status import comparable_status


def test_unchanged_status_is_recognised_despite_timestamps():
    a = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "1"}]}
    b = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2"}]}
    assert comparable_status(a) == comparable_status(b)


def test_an_init_containers_restart_alone_is_a_status_change_worth_writing():
    waiting = {"name": "init1", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    before = {"phase": "Pending", "initContainerStatuses": [waiting]}
    after = {"phase": "Pending", "initContainerStatuses": [{**waiting, "restartCount": 2}]}
    assert comparable_status(before) != comparable_status(after)
