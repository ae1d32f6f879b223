"""Who may take a leader-election Lease: free, one's own, or silent for a whole lease duration."""

from __future__ import annotations

from catamaran.kube.leaderelection import Observed, may_take


def test_a_free_or_own_lease_may_be_taken_at_once():
    assert may_take(None, "b", now=0.0)
    assert may_take(Observed("", "t1", 10.0, changed_at=100.0), "b", now=100.0)  # released
    assert may_take(Observed("b", "t1", 10.0, changed_at=100.0), "b", now=100.0)


def test_anothers_lease_only_once_it_has_not_changed_for_a_lease_duration():
    held = Observed("a", "t1", 10.0, changed_at=100.0)
    assert not may_take(held, "b", now=109.9)
    assert may_take(held, "b", now=110.1)
