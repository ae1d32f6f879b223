"""Token lifetimes for reflected service account tokens (vk/reflection/tokens.py)."""

from __future__ import annotations

import pytest

from catamaran.vk.reflection.tokens import refresh_delay, token_secret_name


def test_tokens_are_refreshed_at_80_percent_of_the_shortest_lifetime():
    assert refresh_delay([3607.0, 600.0]) == pytest.approx(480.0)
    assert token_secret_name("web-1") == "catamaran-token.web-1"
    assert len(token_secret_name("x" * 250)) == 253
