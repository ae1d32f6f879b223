"""Reads shared by concurrent callers and kept while fresh (kube/reads.py)."""

from __future__ import annotations

import asyncio

import pytest

from catamaran.kube.reads import SharedReads


def test_concurrent_callers_share_one_read_and_a_fresh_result_is_kept():
    reads: list[str] = []

    async def read(key: str) -> str:
        reads.append(key)
        await asyncio.sleep(0.01)
        return f"{key}#{len(reads)}"

    async def scenario():
        shared = SharedReads(read, fresh_for=60)
        together = await asyncio.gather(*(shared.get("node-a") for _ in range(5)))
        again = await shared.get("node-a")
        other = await shared.get("node-b")
        return together, again, other

    together, again, other = asyncio.run(scenario())
    assert together == ["node-a#1"] * 5
    assert again == "node-a#1"
    assert other == "node-b#2"
    assert reads == ["node-a", "node-b"]


def test_a_failed_read_is_not_kept_and_stale_results_are_dropped():
    outcomes = iter([RuntimeError("refused"), "a", "b"])

    async def read(key: str) -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def scenario():
        shared = SharedReads(read, fresh_for=0)
        with pytest.raises(RuntimeError):
            await shared.get("node-a")
        first = await shared.get("node-a")
        second = await shared.get("node-b")  # node-a's result, stale at once, goes as this one lands
        return first, second, dict(shared._results)

    first, second, kept = asyncio.run(scenario())
    assert (first, second) == ("a", "b")
    assert list(kept) == ["node-b"]
