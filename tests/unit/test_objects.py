"""Patches and annotations (objects.py): merge patches, status patches, the deletion grace annotation."""

from __future__ import annotations

from catamaran import objects


def test_merge_patch_nulls_removed_keys():
    assert objects.merge_patch({"a": 1, "b": {"c": 1, "d": 2}}, {"b": {"c": 1}}) == {"a": None, "b": {"d": None}}


def test_status_patch_touches_only_wanted_fields():
    current = {"phase": "Running", "pod": {"reason": "x", "podIP": "1"}, "conditions": []}
    assert objects.status_patch(current, {"pod": {"podIP": "2"}}) == {"pod": {"reason": None, "podIP": "2"}}


def test_a_deletion_grace_annotation_is_read_only_when_a_whole_number():
    key = "catamaran.io/deletion-grace-period-seconds"
    assert objects.deletion_grace({key: "30"}) == 30
    assert [objects.deletion_grace(a) for a in ({key: "²"}, {key: "-1"}, {key: ""}, {}, None)] == [None] * 5
