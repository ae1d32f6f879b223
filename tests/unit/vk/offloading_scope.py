"""A taint and a time shared by the tests of which pods a virtual kubelet offloads."""

from __future__ import annotations

NOW = "2024-01-01T00:00:00Z"


COSTLY = {"key": "example.com/costly", "value": "true", "effect": "NoSchedule"}
