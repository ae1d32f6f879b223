"""The work queue: one run per key however often it is added, per-key retries that back off, delays, resizing.

Time is virtual (see test_informer.VirtualTimeLoop): reconciles that "take" seconds and backoffs of minutes run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from catamaran.kube.workqueue import WorkQueue
from tests.unit.test_informer import in_virtual_time


def now() -> float:
    return asyncio.get_running_loop().time()


class Reconciler:
    """Takes `seconds` per key, fails while a key's script says so, and records when each run started."""

    def __init__(self, seconds: float = 0.0, failures: dict | None = None, requeue_after: float | None = None):
        self.seconds = seconds
        self.failures = failures or {}  # key: how many of its next runs fail
        self.requeue_after = requeue_after
        self.started: list[tuple[float, str]] = []
        self.running: set[str] = set()
        self.most_at_once = 0
        self.overlapped: set[str] = set()

    async def __call__(self, key: str) -> float | None:
        self.started.append((now(), key))
        if key in self.running:
            self.overlapped.add(key)
        self.running.add(key)
        self.most_at_once = max(self.most_at_once, len(self.running))
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.running.discard(key)
        if self.failures.get(key):
            self.failures[key] -= 1
            raise RuntimeError(f"{key} refused")
        return self.requeue_after

    def starts(self, key: str) -> list[float]:
        return [at for at, started in self.started if started == key]


@contextlib.asynccontextmanager
async def running(queue: WorkQueue):
    task = asyncio.get_running_loop().create_task(queue.run())
    await asyncio.sleep(0)  # the workers wait for keys
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_key_added_again_while_it_waits_runs_once():
    reconciler = Reconciler(seconds=1)

    async def scenario():
        async with running(WorkQueue("dedup", reconciler, workers=1)) as queue:
            queue.add("busy")
            await asyncio.sleep(0.5)
            for _ in range(3):
                queue.add("k")
            assert len(queue) == 1
            await asyncio.sleep(10)

    in_virtual_time(scenario())
    assert reconciler.started == [(0, "busy"), (1, "k")]


def test_a_key_added_while_it_runs_runs_once_more_afterwards_and_never_alongside_itself():
    reconciler = Reconciler(seconds=1)

    async def scenario():
        async with running(WorkQueue("active", reconciler, workers=4)) as queue:
            queue.add("k")
            await asyncio.sleep(0.5)
            queue.add("k")
            queue.add("k")
            assert len(queue) == 0  # marked to run again, not queued where an idle worker would take it
            await asyncio.sleep(10)

    in_virtual_time(scenario())
    assert reconciler.starts("k") == [0, 1]
    assert not reconciler.overlapped


def test_failures_back_off_per_key_with_jitter_up_to_the_cap_and_a_success_forgets_them():
    reconciler = Reconciler(failures={"bad": 6})

    async def scenario():
        async with running(WorkQueue("retries", reconciler, workers=2, max_backoff=4)) as queue:
            queue.add("bad")
            await asyncio.sleep(2)
            queue.add("good")  # another key does not wait for the failing one
            await asyncio.sleep(60)  # "bad" fails six times, then succeeds
            reconciler.failures["bad"] = 1
            queue.add("bad")
            await asyncio.sleep(60)

    in_virtual_time(scenario())
    assert reconciler.starts("good") == [2]
    bad = reconciler.starts("bad")
    assert len(bad) == 9  # six failures, the success, then one more failure and its retry
    waits = [later - earlier for earlier, later in itertools.pairwise(bad[:7])]
    for wait, ceiling in zip(waits, [0.5, 1, 2, 4, 4, 4], strict=True):
        assert ceiling / 2 <= wait <= ceiling, waits
    assert len({round(wait, 6) for wait in waits}) == len(waits)  # jittered: no two retries alike
    assert 0.25 <= bad[8] - bad[7] <= 0.5  # the success forgot the earlier failures


def test_a_delayed_add_keeps_the_earliest_time():
    reconciler = Reconciler()

    async def scenario():
        async with running(WorkQueue("delays", reconciler, workers=1)) as queue:
            queue.add("k", 10)
            queue.add("k", 5)
            queue.add("k", 20)
            queue.add("j", 3)
            queue.add("j", 8)
            await asyncio.sleep(30)

    in_virtual_time(scenario())
    assert reconciler.started == [(3, "j"), (5, "k")]


def test_a_reconcile_asks_for_its_next_run():
    reconciler = Reconciler(requeue_after=7)

    async def scenario():
        async with running(WorkQueue("requeue", reconciler, workers=1)) as queue:
            queue.add("k")
            await asyncio.sleep(20)

    in_virtual_time(scenario())
    assert reconciler.starts("k") == [0, 7, 14]


def test_resizing_changes_how_many_keys_run_at_once_and_busy_workers_retire_after_their_key():
    reconciler = Reconciler(seconds=1)

    async def scenario():
        async with running(WorkQueue("resize", reconciler, workers=1)) as queue:
            for key in "abcdef":
                queue.add(key)
            queue.resize(3)
            await asyncio.sleep(0.5)
            queue.resize(1)  # while all three are busy
            await asyncio.sleep(3.5)
            queue.resize(0)
            queue.add("g")
            await asyncio.sleep(6)
            assert len(queue) == 1  # nobody works
            queue.resize(2)
            queue.add("h")
            await asyncio.sleep(5)

    in_virtual_time(scenario())
    assert reconciler.started == [
        (0, "a"),
        (0, "b"),
        (0, "c"),
        (1, "d"),
        (2, "e"),
        (3, "f"),
        (10, "g"),
        (10, "h"),
    ]
