"""Refusals remembered per pod and kind within a bound (vk/refusals.py)."""

from __future__ import annotations

from catamaran.vk import trust


def test_refusals_are_remembered_per_pod_and_kind_within_a_bound():
    from catamaran.vk.refusals import RefusalEvents

    refusals = RefusalEvents(events=None, provider_id="p", memory=2)  # type: ignore[arg-type]
    web, db = ({"metadata": {"name": name, "namespace": "shop", "uid": name}} for name in ("web", "db"))
    clamped, other = trust.Refusal("UsageClamped", "a"), trust.Refusal("UsageClamped", "b")
    assert refusals.first_of_their_kind(web, [clamped, other]) == [clamped]  # one per kind
    assert refusals.first_of_their_kind(web, [other]) == []
    assert refusals.first_of_their_kind(db, [other]) == [other]  # another pod
    refusals.first_of_their_kind(db, [trust.Refusal("UsageRefused", "c")])  # web's is the oldest: forgotten
    assert refusals.first_of_their_kind(web, [clamped]) == [clamped]
