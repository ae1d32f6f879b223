"""A twin belongs to one origin namespace (issue 37): the pure rule (twin_claims.py). The parts that act on it
are tested with their modules, on the same case (twin_cases.py).
"""

from __future__ import annotations

from catamaran.twin_claims import RemoteNames, claim_refusal, claimants, twin_holder
from tests.unit.twin_cases import CONSUMER, EVIL, SAME_NAME, TWIN, VICTIM, offloading, selected_name

# -- the rule ------------------------------------------------------------------------------------------------


def test_every_strategy_naming_the_same_twin_is_a_claimant_oldest_first():
    pairs = [("evil", EVIL), (TWIN, SAME_NAME), ("victim", VICTIM), ("other", offloading("other"))]
    assert claimants(TWIN, pairs, CONSUMER) == ["victim", "evil", TWIN]  # same second: by namespace name


def test_an_offloading_being_deleted_claims_nothing_any_more():
    assert claimants(TWIN, [("victim", offloading("victim", deleting=True)), ("evil", EVIL)], CONSUMER) == ["evil"]


def test_the_twins_holder_keeps_it_whatever_the_age_of_the_claimants():
    older_evil = selected_name("evil", created="2023-01-01T00:00:00Z")
    pairs = [("victim", VICTIM), ("evil", older_evil)]
    assert twin_holder(TWIN, "victim", pairs, CONSUMER) == "victim"
    assert twin_holder(TWIN, None, pairs, CONSUMER) == "evil"  # nobody holds it yet: the oldest claim
    assert twin_holder(TWIN, None, [], CONSUMER) is None


def test_only_the_holder_may_have_the_twin_and_the_refusal_does_not_name_it():
    assert claim_refusal("victim", TWIN, "victim") is None
    assert claim_refusal("victim", TWIN, None) is None
    refusal = claim_refusal("evil", TWIN, "victim")
    assert refusal is not None
    assert TWIN in refusal
    assert "victim " not in refusal.replace(TWIN, "")


def test_the_remote_names_index_follows_offloadings_coming_changing_and_going():
    names = RemoteNames(CONSUMER)
    assert names.changed("victim", VICTIM) == {TWIN}
    assert names.changed("evil", EVIL) == {TWIN}
    assert names.namespaces(TWIN) == {"victim", "evil"}
    assert names.changed("evil", None) == {TWIN}
    assert names.namespaces(TWIN) == {"victim"}
    assert names.changed("victim", None) == {TWIN}
    assert names.namespaces(TWIN) == set()
