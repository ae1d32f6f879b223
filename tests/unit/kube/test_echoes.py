"""OwnWrites (kube/echoes.py): which watch events are a controller's own writes coming back."""

from __future__ import annotations

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from catamaran.kube.echoes import OwnWrites

KEY = ("twin", "web")


def at(version: str) -> dict:
    return {"metadata": {"name": "web", "namespace": "twin", "resourceVersion": version}}


def told_of(writes: OwnWrites, *changes: tuple[str, dict | None]) -> list[str]:
    """The versions (or DELETED) a handler wrapped by `writes.skipping` is told of, of these changes to KEY."""
    told: list[str] = []

    def record(event: str, key, new, old) -> None:
        told.append(new["metadata"]["resourceVersion"] if new else event)

    handler = writes.skipping(record)
    for event, new in changes:
        handler(event, KEY, new, None)
    return told


def test_the_event_of_a_write_is_skipped_once_and_every_other_change_is_told():
    writes = OwnWrites()
    writes.wrote(KEY, Pod(metadata=ObjectMeta(name="web", namespace="twin", resourceVersion="7")))
    # Another writer's change before it (6) and after it (8) are told; its own event (7) is not, and only once.
    assert told_of(writes, ("MODIFIED", at("6")), ("MODIFIED", at("7")), ("MODIFIED", at("8"))) == ["6", "8"]
    assert len(writes) == 0
    assert told_of(writes, ("MODIFIED", at("7"))) == ["7"]


def test_the_created_object_is_skipped_as_added():
    writes = OwnWrites()
    writes.wrote(KEY, at("3"))
    assert told_of(writes, ("ADDED", at("3")), ("MODIFIED", at("4"))) == ["4"]


def test_a_reconcile_begun_after_the_write_has_its_echo_told():
    """It read a cache without the write: the echo's reconcile is the one that sees the write."""
    writes = OwnWrites()
    writes.wrote(KEY, at("7"))
    writes.forget(KEY)
    assert told_of(writes, ("MODIFIED", at("7"))) == ["7"]


def test_only_the_latest_write_is_remembered():
    writes = OwnWrites()
    writes.wrote(KEY, at("7"))
    writes.wrote(KEY, at("9"))
    assert told_of(writes, ("MODIFIED", at("7")), ("MODIFIED", at("9"))) == ["7"]


def test_a_deletion_is_told_and_forgets_the_object():
    writes = OwnWrites()
    writes.wrote(KEY, at("7"))
    assert told_of(writes, ("DELETED", None)) == ["DELETED"]
    assert len(writes) == 0


def test_a_write_without_an_answer_is_not_remembered():
    """A patch of an object deleted meanwhile answers nothing (kube/ops.py patch_status)."""
    writes = OwnWrites()
    writes.wrote(KEY, None)
    assert len(writes) == 0


def test_memory_is_bounded_the_oldest_write_forgotten_first():
    writes = OwnWrites(limit=2)
    for name, version in (("a", "1"), ("b", "2"), ("c", "3")):
        writes.wrote(("twin", name), at(version))
    assert len(writes) == 2
    assert not writes.echo("MODIFIED", ("twin", "a"), at("1"))  # forgotten: its event is told
    assert writes.echo("MODIFIED", ("twin", "c"), at("3"))
