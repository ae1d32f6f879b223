"""The pod ranges a consumer consented to at peering (spec.networking.podCIDRs), as issue 37's tests use them."""

from __future__ import annotations

CONSENT = ["10.102.0.0/16"]
