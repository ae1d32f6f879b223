"""Rate limits for writes a burst of events could otherwise turn into a flood. Pure but for the clock."""

from __future__ import annotations

import time


class TokenBucket:
    """At most `rate` writes a second on average, `burst` at once."""

    def __init__(self, rate: float, burst: int):
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = time.monotonic()

    def reserve(self) -> float:
        """Take the next token, free now or in the future: seconds until it is this caller's (0: now).

        Each waiting writer holds its own future slot, so a thousand waiting writes wake once each, in turn,
        instead of all waking to compete for every token that frees up."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
