"""Whether this cluster's network gateway runs: its Lease (GATEWAY_LEASE in FABRIC_NAMESPACE), renewed while it does.

A gateway that is gone (its pod evicted, its node drained, its process stopped) writes no NetworkReady condition, so
the last one it wrote would stand. The Lease is read as client-go's leader election reads one: by when this process
saw it change, on its own monotonic clock, so the two nodes' clocks need not agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from ..constants import FABRIC_NAMESPACE, GATEWAY_LEASE
from ..kube.informer import Informer

LEASE = f"{FABRIC_NAMESPACE}/{GATEWAY_LEASE}"


@dataclass(frozen=True)
class Renewal:
    renew_time: str
    holder: str
    duration: float


def _renewal(lease: Lease) -> Renewal:
    spec = lease.spec
    renewed = spec.renewTime.isoformat() if spec and spec.renewTime else ""
    return Renewal(renewed, (spec and spec.holderIdentity) or "", float((spec and spec.leaseDurationSeconds) or 0))


class GatewayLease:
    def __init__(self, client: AsyncClient, clock=time.monotonic):
        self.clock = clock
        self.informer = Informer(
            client,
            Lease,
            name="gateway-lease",
            namespace=FABRIC_NAMESPACE,
            fields={"metadata.name": GATEWAY_LEASE},
            transform=_renewal,
        )
        self.seen: Renewal | None = None
        self.seen_at = clock()
        self.informer.on_change(lambda event, key, new, old: self.observe(new))

    def observe(self, renewal: Renewal | None) -> None:
        if renewal != self.seen:
            self.seen, self.seen_at = renewal, self.clock()

    def problem(self) -> str | None:
        """Why the gateway is taken for gone, or None (running, or not known yet)."""
        if not self.informer.synced.is_set():
            return None
        if self.seen is None:
            return f"this cluster's network gateway is not running (no Lease {LEASE})"
        if self.clock() - self.seen_at > self.seen.duration:
            # No running count in the message: it is every pod's Ready message, rewritten whenever it changes.
            return (
                f"this cluster's network gateway ({self.seen.holder}) has not renewed its Lease {LEASE} since "
                f"{self.seen.renew_time or 'it was made'} (lapsed after {self.seen.duration:.0f} s)"
            )
        return None
