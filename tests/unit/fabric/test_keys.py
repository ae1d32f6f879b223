"""WireGuard keys (fabric/keys.py)."""

from __future__ import annotations

import base64

import pytest

from catamaran.fabric import keys
from tests.unit.fabric.wireguard_keys import PEER, PRIVATE


def test_keys_are_wireguard_keys_and_bad_ones_are_named_without_their_value():
    assert len(base64.b64decode(PRIVATE)) == 32
    assert keys.public_key(PRIVATE) == keys.public_key(PRIVATE) != PRIVATE
    assert keys.check_public_key(PEER) == PEER
    with pytest.raises(ValueError, match="not base64") as bad:
        keys.public_key("secret!!")
    assert "secret" not in str(bad.value)
    with pytest.raises(ValueError, match="holds 3 bytes, not 32"):
        keys.check_public_key(base64.b64encode(b"abc").decode())
