"""A deduplicating work queue with per-key backoff, drained by a fixed number of workers.

A key is never processed by two workers at once; a key added while it is being processed
runs once more afterwards. Failures are retried with jittered exponential backoff per key, which a
success resets.

Retries also draw on one token bucket over all keys, as client-go's default controller rate limiter does: it
refills at `retry_rate` tokens a second (default 10) and holds up to `retry_burst` (default 100), and a retry waits
for the longer of its key's backoff and its turn at the bucket. An error storm across a fleet thus retries at most
a burst at once, then a steady trickle, rather than every key together. Plain adds (watch events) and the requeues
a reconcile asks for never wait for the bucket. Its clock is the event loop's, like the retry timers'.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import metrics
from ..logs import fields
from . import backoff

log = logging.getLogger(__name__)

Reconcile = Callable[[Any], Awaitable[float | None]]

# The wait before a key's first retry; it doubles with each further failure, up to the queue's max_backoff.
RETRY_INITIAL_SECONDS = 0.5
# client-go's overall bucket: an error storm retries 100 keys at once, then 10 a second.
RETRY_RATE = 10.0
RETRY_BURST = 100


class WorkQueue:
    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        workers: int = 4,
        max_backoff: float = 60,
        retry_rate: float = RETRY_RATE,
        retry_burst: int = RETRY_BURST,
    ):
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.max_backoff = max_backoff
        self._retries = TokenBucket(retry_rate, retry_burst)
        self._queue: asyncio.Queue = asyncio.Queue()
        self._queued: set = set()
        self._active: set = set()
        self._dirty: set = set()
        self._failures: dict[Any, int] = {}
        self._timers: dict[Any, asyncio.TimerHandle] = {}
        self._queued_at: dict[Any, float] = {}
        self._group: asyncio.TaskGroup | None = None
        self._running = 0
        self._retiring = 0  # workers to end after their current key

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key, delay: float = 0) -> None:
        if delay > 0:
            existing = self._timers.get(key)
            due = asyncio.get_running_loop().time() + delay
            if existing is not None and existing.when() <= due:
                return
            if existing is not None:
                existing.cancel()
            self._timers[key] = asyncio.get_running_loop().call_at(due, self._fire, key)
            return
        if key in self._active:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queued_at[key] = time.perf_counter()
            self._queue.put_nowait(key)
            metrics.labelled(metrics.QUEUE_DEPTH, self.name).set(len(self._queued))

    def _fire(self, key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            self._group = group
            for _ in range(self.workers):
                self._start_worker()
            # Keeps the group open while resize() has retired every worker.
            group.create_task(asyncio.Event().wait())

    def resize(self, workers: int) -> None:
        """Run `workers` workers from now on; fewer ones end once their current key is done."""
        self.workers = workers
        if self._group is None:
            return
        alive = self._running - self._retiring
        for _ in range(workers - alive):
            if self._retiring:
                self._retiring -= 1
            else:
                self._start_worker()
        if workers < alive:
            self._retiring += alive - workers
            for _ in range(alive - workers):
                self._queue.put_nowait(_RETIRE)  # wakes an idle worker so that it can end

    def _start_worker(self) -> None:
        assert self._group is not None, "workers start inside run()"
        self._running += 1
        self._group.create_task(self._worker())

    async def _worker(self) -> None:
        try:
            await self._work()
        finally:
            self._running -= 1

    async def _work(self) -> None:
        while True:
            if self._retiring:
                self._retiring -= 1
                return
            key = await self._queue.get()
            if key is _RETIRE:
                continue
            self._queued.discard(key)
            metrics.labelled(metrics.QUEUE_DEPTH, self.name).set(len(self._queued))
            self._active.add(key)
            started = time.perf_counter()
            metrics.labelled(metrics.QUEUE_WAIT_SECONDS, self.name).observe(started - self._queued_at.pop(key, started))
            requeue_after = None
            try:
                requeue_after = await self.reconcile(key)
                self._failures.pop(key, None)
                metrics.labelled(metrics.RECONCILES, self.name, "success").inc()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                requeue_after = max(
                    backoff.exponential(failures, initial=RETRY_INITIAL_SECONDS, cap=self.max_backoff),
                    self._retries.reserve(asyncio.get_running_loop().time()),
                )
                metrics.labelled(metrics.RECONCILES, self.name, "error").inc()
                log.warning(
                    "reconcile failed; retrying",
                    extra=fields(controller=self.name, key=str(key), error=_describe(error), retry_in=requeue_after),
                )
            finally:
                metrics.labelled(metrics.RECONCILE_SECONDS, self.name).observe(time.perf_counter() - started)
                self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            elif requeue_after:
                self.add(key, requeue_after)


class TokenBucket:
    """Tokens refill at `rate` a second up to `burst`; each reservation takes one, owing it if none is left.

    A reservation never fails: it says how long to wait until its token has refilled (golang.org/x/time/rate's
    Reserve, which client-go's bucket uses), so reservations made together are spaced 1/rate apart once the burst
    is spent. Times are the caller's clock.
    """

    def __init__(self, rate: float, burst: int):
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs a positive rate and a burst of at least 1, not {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)  # negative when reservations owe tokens
        self._at: float | None = None

    def reserve(self, now: float) -> float:
        """Take a token at `now`: the seconds until it is there (0 if it already is)."""
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now if self._at is None else max(self._at, now)
        self._tokens -= 1
        return max(0.0, -self._tokens / self.rate)


_RETIRE = object()


def _describe(error: Exception) -> str:
    status = getattr(error, "status", None)
    if status is not None and getattr(status, "message", None):
        return f"{type(error).__name__} {status.code}: {status.message}"[:400]
    return f"{type(error).__name__}: {error}"[:400]
