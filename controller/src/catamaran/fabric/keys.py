# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""WireGuard keys: Curve25519, base64 as `wg` reads and prints them; shared by the gateway and the collection
(symlinked as module_utils/fabric_keys.py). Pure."""

from __future__ import annotations

import base64
import binascii

try:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
except ImportError:  # the controller requires it; the collection's modules report it (HAS_CRYPTOGRAPHY)
    HAS_CRYPTOGRAPHY = False
else:
    HAS_CRYPTOGRAPHY = True

KEY_BYTES = 32


def generate_private_key() -> str:
    return _encode(X25519PrivateKey.generate().private_bytes_raw())


def public_key(private_key: str) -> str:
    """The public half of a base64 private key; ValueError names what is wrong with a bad one (never the key)."""
    raw = _decode(private_key, "private key")
    public = X25519PrivateKey.from_private_bytes(raw).public_key()
    return _encode(public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def checked_private_key(value: str) -> str:
    _decode(value, "private key")
    return value


def check_public_key(value: str) -> str:
    _decode(value, "public key")
    return value


def _encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _decode(value: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the WireGuard {what} is not base64") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"the WireGuard {what} holds {len(raw)} bytes, not {KEY_BYTES}")
    return raw
