"""Reads a burst of callers would otherwise repeat: one in flight per key, its result shared while fresh.

Scrapers (metrics-server, the API server's aggregator) ask every few seconds and often at once; each answer costs
requests to another API server. So concurrent callers of one key await the same read, and later ones get its
result until it is `fresh_for` seconds old. A failed read is not kept. Stale results are dropped as new ones land,
so memory follows the keys in use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharedReads(Generic[K, V]):
    def __init__(self, read: Callable[[K], Awaitable[V]], fresh_for: float):
        self.read = read
        self.fresh_for = fresh_for
        self._results: dict[K, tuple[float, V]] = {}  # key -> (when read, result)
        self._pending: dict[K, asyncio.Future] = {}

    async def get(self, key: K) -> V:
        kept = self._results.get(key)
        if kept and time.monotonic() - kept[0] < self.fresh_for:
            return kept[1]
        if key not in self._pending:
            self._pending[key] = asyncio.ensure_future(self._read(key))
        pending = self._pending[key]
        try:
            return await asyncio.shield(pending)  # one caller cancelled does not cancel the read the others await
        finally:
            if pending.done() and self._pending.get(key) is pending:
                del self._pending[key]

    async def _read(self, key: K) -> V:
        result = await self.read(key)
        now = time.monotonic()
        for stale in [k for k, (at, _) in self._results.items() if now - at >= self.fresh_for]:
            del self._results[stale]
        self._results[key] = (now, result)
        return result
