"""Exponential backoff with jitter, for retries that should neither hammer a server nor come back in step.

Clients that fail together (an API server restarting, an RBAC change) would otherwise retry together at every
step. Jitter only ever shortens a wait, so a cap stays a true upper bound.
"""

from __future__ import annotations

import random

# A wait is shortened by up to this share of itself, at random.
JITTER = 0.5


def jittered(seconds: float) -> float:
    return seconds * (1 - JITTER * random.random())


def exponential(attempt: int, *, initial: float, cap: float) -> float:
    """The jittered wait before retry number `attempt` (1 for the first): `initial`, doubled per attempt up to `cap`."""
    return jittered(min(cap, initial * 2 ** (attempt - 1)))


class Backoff:
    """The waits of one retry loop, which start over only once it has been healthy for `reset_after` seconds.

    A loop whose every round gets partway before failing (a list that works, then a watch that is refused)
    must keep backing off: one good step is not health. Times are the caller's clock (the event loop's).
    """

    def __init__(self, *, initial: float, cap: float, reset_after: float):
        self.initial = initial
        self.cap = cap
        self.reset_after = reset_after
        self.attempts = 0
        self._healthy_since: float | None = None

    def healthy(self, now: float) -> None:
        """What is retried works again (from `now`, unless it already did)."""
        if self._healthy_since is None:
            self._healthy_since = now

    def failed(self, now: float) -> float:
        """A failure at `now`: how long to wait before the next attempt."""
        if self._healthy_since is not None and now - self._healthy_since >= self.reset_after:
            self.attempts = 0
        self._healthy_since = None
        self.attempts += 1
        return exponential(self.attempts, initial=self.initial, cap=self.cap)
