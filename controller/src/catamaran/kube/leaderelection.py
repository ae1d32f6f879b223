"""Leader election on a Lease, as client-go's leaderelection does it: one replica acts, the others wait.

A candidate watches the Lease (no polling) and takes it when it is free (no holder, or released) or when its
record has not changed for a whole lease duration, judged by this process's own monotonic clock since it last saw
the record change, so clocks that disagree between machines do not matter. The leader renews every
`retry_period` (a write of the object it last wrote: no read before it); when it cannot
renew for `renew_deadline` it has lost, and `hold()` raises LeadershipLost: the process exits and starts again
as a candidate (acting on after a lost lease would be two leaders). A leader that stops on purpose releases the
Lease, so a standby takes over at once instead of after a lease duration.

Writes are updates with the record's resourceVersion: of two candidates racing for one Lease, one wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import logging
import random
import time
from dataclasses import dataclass

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from ..logs import fields
from .informer import Informer

log = logging.getLogger(__name__)

# Shorter than client-go's controller defaults (15/10/2 s), so a standby acts within about 12 s of a leader's
# sudden death; a renewal every 2 s is one small write, and 7 s of API server trouble still keeps the lead.
LEASE_DURATION_S = 10.0
RENEW_DEADLINE_S = 7.0
RETRY_PERIOD_S = 2.0


class LeadershipLost(Exception):
    """This process's Lease was not renewed in time: another replica may be acting already."""


@dataclass
class Observed:
    """The Lease's record as last seen, and when (this process's monotonic clock) it last changed."""

    holder: str
    renew_time: str
    duration: float
    changed_at: float


def may_take(observed: Observed | None, identity: str, now: float) -> bool:
    """May `identity` take (or keep) the Lease? Free, its own, or not renewed for a whole lease duration."""
    if observed is None or not observed.holder or observed.holder == identity:
        return True
    return now - observed.changed_at > observed.duration


def refusal(error: ApiError, namespace: str) -> str:
    """The API server's refusal, naming the likely fix when the Lease's namespace does not exist."""
    message = error.status.message or str(error)
    if error.status.code == 404 and error.status.details and error.status.details.kind == "namespaces":
        return f"{message} (create it, or give --leader-elect-namespace the controller's namespace)"
    return message


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElector:
    def __init__(
        self,
        client: AsyncClient,
        name: str,
        namespace: str,
        identity: str,
        *,
        lease_duration: float = LEASE_DURATION_S,
        renew_deadline: float = RENEW_DEADLINE_S,
        retry_period: float = RETRY_PERIOD_S,
    ):
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.observed: Observed | None = None
        self.leading = False
        self._written: Lease | None = None  # the Lease as this process last wrote (or read) it

    async def acquire(self) -> None:
        """Return once this process leads: watch the Lease, and try to take it whenever it may be taken."""
        log.info("waiting to lead", extra=fields(lease=f"{self.namespace}/{self.name}", identity=self.identity))
        changed = asyncio.Event()
        watch = Informer(
            self.client, Lease, name=f"lease {self.name}", namespace=self.namespace, fields={"metadata.name": self.name}
        )
        watch.on_change(lambda event, key, new, old: changed.set())
        watching = asyncio.ensure_future(watch.run())
        try:
            await watch.synced.wait()
            while True:
                changed.clear()
                lease = watch.get(self.namespace, self.name)
                self._observe(lease)
                now = time.monotonic()
                if may_take(self.observed, self.identity, now) and await self._try_write(lease):
                    break
                # Until the record changes, or until it has not changed for a whole lease duration.
                wait = self.observed.changed_at + self.observed.duration - now if self.observed else self.retry_period
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), max(wait, 0) + self.retry_period * random.uniform(0, 0.2))
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        self.leading = True
        log.info("leading", extra=fields(lease=f"{self.namespace}/{self.name}", identity=self.identity))

    async def _try_write(self, lease: Lease | None) -> bool:
        """`_write`, with a refusal or an unreachable API server logged and retried as client-go does: a Lease
        namespace that is missing, or a right to create the Lease not yet granted, may be fixed while it waits."""
        try:
            return await self._write(lease)
        except (ApiError, httpx2.HTTPError) as error:
            reason = (
                refusal(error, self.namespace) if isinstance(error, ApiError) else f"{type(error).__name__}: {error}"
            )
            log.error(
                "cannot take the leader election Lease; retrying",
                extra=fields(lease=f"{self.namespace}/{self.name}", error=reason),
            )
            return False

    async def hold(self) -> None:
        """Renew while leading; raise LeadershipLost once renewals have failed for `renew_deadline`."""
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_period)
            holder = self._written.spec.holderIdentity if self._written and self._written.spec else None
            if self._written is not None and holder != self.identity:
                self.leading = False  # a renewal found another holder: it acts already
                raise LeadershipLost(f"Lease {self.namespace}/{self.name} is held by {holder or 'nobody'} now")
            try:
                renewed = await self._write(self._written)
            except Exception as error:  # an API server away for a moment: retried until the deadline
                log.warning("lease renewal failed", extra=fields(lease=self.name, error=str(error)))
                renewed = False
            if renewed:
                last_renewed = time.monotonic()
            elif time.monotonic() - last_renewed > self.renew_deadline:
                self.leading = False
                raise LeadershipLost(f"Lease {self.namespace}/{self.name} not renewed for {self.renew_deadline:.0f}s")

    async def release(self) -> None:
        """Give the Lease up (a leader that stops on purpose), so a standby need not wait for it to expire."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec and lease.spec.holderIdentity == self.identity:
                lease.spec.holderIdentity = None
                lease.spec.leaseDurationSeconds = 1
                lease.spec.renewTime = _now()
                await self.client.replace(lease)
                log.info("lease released", extra=fields(lease=f"{self.namespace}/{self.name}"))
        except ApiError as error:
            log.warning("lease release failed", extra=fields(lease=self.name, error=str(error.status.message)))

    def _observe(self, lease: Lease | None) -> None:
        spec = (lease.spec if lease else None) or LeaseSpec()
        record = (spec.holderIdentity or "", str(spec.renewTime or ""), float(spec.leaseDurationSeconds or 0))
        if lease is None:
            self.observed = None
        elif (
            self.observed is None or (self.observed.holder, self.observed.renew_time, self.observed.duration) != record
        ):
            self.observed = Observed(*record, changed_at=time.monotonic())

    async def _write(self, lease: Lease | None) -> bool:
        """Take or renew the Lease from its last known state; True when this process holds it after. A stale
        state (another writer came first) fails on its resourceVersion and reads afresh."""
        if lease is None:
            return await self._create()
        spec = copy.deepcopy(lease.spec) or LeaseSpec()
        taking = spec.holderIdentity != self.identity
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = int(self.lease_duration)
        spec.renewTime = _now()
        if taking:
            spec.acquireTime = spec.renewTime
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        try:
            self._written = await self.client.replace(Lease(metadata=lease.metadata, spec=spec))
        except ApiError as error:
            if error.status.code != 409:
                raise
            fresh = await self.client.get(Lease, self.name, namespace=self.namespace)
            self._observe(fresh)
            self._written = fresh
            return False
        return True

    async def _create(self) -> bool:
        stamp = _now()
        lease = Lease(
            metadata=ObjectMeta(name=self.name, namespace=self.namespace),
            spec=LeaseSpec(
                holderIdentity=self.identity,
                leaseDurationSeconds=int(self.lease_duration),
                acquireTime=stamp,
                renewTime=stamp,
                leaseTransitions=0,
            ),
        )
        try:
            self._written = await self.client.create(lease)
        except ApiError as error:
            if error.status.code == 409:
                return False
            raise
        return True
