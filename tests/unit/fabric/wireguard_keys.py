"""WireGuard keys for the fabric tests."""

from __future__ import annotations

from catamaran.fabric import keys

PRIVATE = keys.generate_private_key()
PEER = keys.public_key(keys.generate_private_key())
