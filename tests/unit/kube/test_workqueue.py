"""The work queue (kube/workqueue.py): one run per key however often it is added, per-key retries that back off,
delays, resizing, the bucket over all keys' retries, and what its wait metric measures.

Time is virtual (see test_informer.VirtualTimeLoop): reconciles that "take" seconds and backoffs of minutes run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest

from catamaran import metrics
from catamaran.kube.workqueue import RETRY_BURST, RETRY_RATE, TokenBucket, WorkQueue
from tests.unit.kube.test_informer import in_virtual_time


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


def test_an_error_storm_across_more_keys_than_the_burst_retries_a_burst_at_once_then_at_the_overall_rate():
    assert (RETRY_RATE, RETRY_BURST) == (10, 100)  # client-go's defaults
    keys = [f"k{index:03}" for index in range(RETRY_BURST + 50)]
    reconciler = Reconciler(failures=dict.fromkeys(keys, 1))

    async def scenario():
        async with running(WorkQueue("storm", reconciler, workers=8)) as queue:
            for key in keys:
                queue.add(key)
            await asyncio.sleep(60)

    in_virtual_time(scenario())
    retries = [reconciler.starts(key)[1] for key in keys]  # every key failed at 0, in the order it was added
    for retry in retries[:RETRY_BURST]:
        assert 0.25 <= retry <= 0.5  # within the burst: the key's own first backoff
    for k, retry in enumerate(retries[RETRY_BURST:], start=1):
        # The (burst + k)-th waits k / rate for its token, or its own first backoff (0.25..0.5 s) if that is longer.
        assert k / RETRY_RATE - 1e-9 <= retry <= max(k / RETRY_RATE, 0.5) + 1e-9, (k, retry)
    assert retries[-1] == pytest.approx(50 / RETRY_RATE)


def test_plain_adds_and_requested_requeues_do_not_wait_for_the_overall_bucket():
    reconciler = Reconciler(failures={"a": 1, "b": 1, "c": 1}, requeue_after=2)

    async def scenario():
        async with running(WorkQueue("plain", reconciler, workers=1, retry_rate=0.1, retry_burst=1)) as queue:
            for key in "abc":
                queue.add(key)  # fail at 0: "a" takes the one token, "b" owes one till 10, "c" till 20
            await asyncio.sleep(1)
            queue.add("fresh")  # a watch event while the bucket is spent
            await asyncio.sleep(10.5)

    in_virtual_time(scenario())
    assert reconciler.starts("fresh") == [1, 3, 5, 7, 9, 11]  # then every requeue it asks for, on time
    assert reconciler.starts("b") == [0, pytest.approx(10)]
    assert reconciler.starts("c") == [0]  # still owed the bucket at 11.5


def test_a_keys_own_backoff_wins_over_the_overall_bucket_when_longer():
    reconciler = Reconciler(failures={"k": 8})

    async def scenario():
        async with running(WorkQueue("slow", reconciler, workers=1, retry_rate=0.1, retry_burst=1)) as queue:
            queue.add("k")
            await asyncio.sleep(400)

    in_virtual_time(scenario())
    starts = reconciler.starts("k")
    assert len(starts) == 9  # eight failures, then the success
    assert 0.25 <= starts[1] <= 0.5  # the bucket's one token: the first backoff
    # Backoffs of up to 1, 2, 4 and 8 s are shorter than the bucket's 10 s a token: it sets the retries.
    assert starts[2:6] == pytest.approx([10, 20, 30, 40])
    # Backoffs of 16..32 and 32..60 s outlast the bucket's wait: the key's own backoff sets the retries.
    waits = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert 16 <= waits[6] <= 32, waits
    assert 30 <= waits[7] <= 60, waits


def test_the_bucket_refills_at_its_rate_up_to_its_burst_and_spaces_reservations_once_it_is_spent():
    bucket = TokenBucket(rate=2, burst=3)
    assert [bucket.reserve(0) for _ in range(5)] == [0, 0, 0, 0.5, 1.0]
    assert bucket.reserve(1) == pytest.approx(0.5)  # two tokens refilled, three owed before this one
    assert bucket.reserve(100) == 0  # refilled to the burst, no further
    assert [bucket.reserve(100) for _ in range(3)] == [0, 0, 0.5]
    with pytest.raises(ValueError, match="positive rate"):
        TokenBucket(rate=0, burst=1)


def _sample(name: str, labels: dict) -> float:
    value = metrics.QUEUE_WAIT_SECONDS.collect()[0]
    return sum(s.value for s in value.samples if s.name == name and s.labels == labels)


def test_a_key_waits_in_the_queue_from_its_first_add_until_a_worker_takes_it():
    async def scenario():
        release = asyncio.Event()
        taken = []

        async def reconcile(key):
            taken.append(key)
            await release.wait()

        queue = WorkQueue("wait-test", reconcile, workers=1)
        runner = asyncio.create_task(queue.run())
        queue.add("first")
        await asyncio.sleep(0.01)
        queue.add("second")
        queue.add("second")  # deduplicated: one wait, measured from the first add
        await asyncio.sleep(0.2)
        release.set()
        await asyncio.sleep(0.05)
        runner.cancel()
        return taken

    assert asyncio.run(scenario()) == ["first", "second"]
    labels = {"controller": "wait-test"}
    assert _sample("catamaran_queue_wait_seconds_count", labels) == 2
    assert _sample("catamaran_queue_wait_seconds_sum", labels) >= 0.2  # "second" waited behind "first"
