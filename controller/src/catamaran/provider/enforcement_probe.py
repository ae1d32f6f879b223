"""The NetworkPolicy canaries (enforcement.py): kept per placement of the tenants, probed every interval, and their
verdicts handed to the ResourceOffers.

The canaries are read from the manager's one pod watch (a view of the offers' informer); each round applies the
canaries' NetworkPolicy (a no-op once it is there; it comes back if deleted), creates a missing canary, deletes the
canaries of placements no tenant has any more, and connects to each ready canary twice. A canary that changes wakes
the next round early, so a first verdict does not wait for the interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.networking_v1 import NetworkPolicy

from ..constants import MANAGER_COMPONENT, SYSTEM_NAMESPACE
from ..kube.informer import call, changed, error_text
from ..kube.ops import tolerating
from ..logs import fields
from ..objects import now_iso
from . import enforcement
from .enforcement import Canary, Verdict
from .offers import Placement, ResourceOfferController

log = logging.getLogger(__name__)

PROBE_INTERVAL_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 2.0


def _is_canary(pod: dict) -> bool:
    meta = pod["metadata"]
    return (
        meta.get("namespace") == SYSTEM_NAMESPACE
        and (meta.get("labels") or {}).get(enforcement.LABEL_COMPONENT) == enforcement.CANARY_COMPONENT
    )


async def answers(address: str, port: int) -> bool:
    """Whether a TCP connection to address:port is accepted within CONNECT_TIMEOUT_SECONDS."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_SECONDS)
    except (TimeoutError, OSError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def not_probed() -> Callable[[Placement], dict]:
    """The offers' condition when no canary runs: Unknown, since the manager started."""
    condition = enforcement.condition(enforcement.NOT_PROBED, now_iso())
    return lambda placement: condition


def _key(placement: Placement) -> str:
    return enforcement.placement_key(placement.node_selector, placement.tolerations)


def _summarize(pod: dict) -> Canary:
    return enforcement.summarize_canary(pod)


class EnforcementProbe:
    name = "networkpolicy-probe"

    def __init__(
        self,
        client: AsyncClient,
        offers: ResourceOfferController,
        image: str,
        interval: float = PROBE_INTERVAL_SECONDS,
        connect: Callable = answers,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        pull_secrets: list[str] | None = None,
    ):
        self.client = client
        self.offers = offers
        self.image = image
        self.interval = interval
        self.connect = connect
        self.clock = clock
        self.pull_secrets = pull_secrets or []
        self.canaries = offers.pods.view("networkpolicy-canaries", include=_is_canary, transform=_summarize)
        self._conditions: dict[str, dict] = {}  # placement key -> the condition its tenants' offers carry
        self._wake = asyncio.Event()
        # A canary's change, or a tenant's placement: its own status writes on the offers wake nothing.
        self.canaries.on_change(call(self._wake.set, when=changed))
        offers.offers.on_change(call(self._wake.set, when=changed))
        offers.tenants.on_change(call(self._wake.set, when=changed))
        offers.network_policy_condition = self.condition

    def condition(self, placement: Placement) -> dict | None:
        return self._conditions.get(_key(placement))

    def tasks(self) -> list:
        return [self._run()]

    async def _run(self) -> None:
        for informer in (self.offers.pods, self.offers.offers, self.offers.tenants):
            await informer.synced.wait()
        while True:
            self._wake.clear()
            try:
                await self.round()
            except Exception:  # a failed request: the next round tries again
                log.exception("networkpolicy probe round failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
                await asyncio.sleep(1)  # a burst of changes makes one round
            except TimeoutError:
                pass

    def _placements(self) -> dict[str, Placement]:
        """Each distinct placement of the tenants that have a twin namespace here, and of their node pools, by key."""
        placements = {}
        for _, namespace in self.offers.tenants.cache:
            terms = self.offers.terms(namespace)
            for placement in (terms.placement, *(pool.placement for pool in terms.pools)):
                placements[_key(placement)] = placement
        return placements

    async def round(self) -> None:
        wanted = self._placements()
        policy_created, failure = None, None
        if wanted:
            try:
                policy = await self.client.apply(
                    NetworkPolicy.from_dict(enforcement.canary_policy()), field_manager=MANAGER_COMPONENT, force=True
                )
                policy_created = policy.metadata.creationTimestamp
            except ApiError as error:
                where = f"{SYSTEM_NAMESPACE}/{enforcement.CANARY_POLICY}"
                failure = f"cannot apply NetworkPolicy {where}: {error_text(error)}"
        conditions = {}
        for key, placement in wanted.items():
            if failure is not None:
                verdict = Verdict("Unknown", "CanaryFailed", failure)
            else:
                try:
                    verdict = await self._probe(key, placement, policy_created)
                except ApiError as error:  # an admission webhook, a missing namespace, lost rights: said, not hidden
                    verdict = Verdict("Unknown", "CanaryFailed", f"canary pod: {error_text(error)}")
            previous = self._conditions.get(key)
            same = previous is not None and previous["status"] == verdict.status
            conditions[key] = enforcement.condition(verdict, previous["lastTransitionTime"] if same else now_iso())
        await self._remove_unwanted(wanted)
        if conditions != self._conditions:
            self._report_changes(conditions)
            self._conditions = conditions
            self.offers.all_tenants_changed()

    async def _remove_unwanted(self, wanted: dict[str, Placement]) -> None:
        """The canaries of placements no tenant has any more, and their policy once none is wanted."""
        for (_, name), canary in list(self.canaries.cache.items()):
            if canary.placement in wanted or canary.deleting:
                continue
            with tolerating(404):
                await self.client.delete(Pod, name, namespace=SYSTEM_NAMESPACE)
            log.info("networkpolicy canary removed", extra=fields(pod=name))
        if not wanted:
            with tolerating(404):
                await self.client.delete(NetworkPolicy, enforcement.CANARY_POLICY, namespace=SYSTEM_NAMESPACE)

    async def _probe(self, key: str, placement: Placement, policy_created: datetime | None) -> Verdict:
        name = enforcement.canary_name(key)
        canary: Canary | None = self.canaries.get(SYSTEM_NAMESPACE, name)
        if canary is not None and canary.finished:
            with tolerating(404):
                await self.client.delete(Pod, name, namespace=SYSTEM_NAMESPACE)  # the next round makes another
        elif canary is None:
            body = enforcement.canary_pod(key, self.image, self.pull_secrets)
            body["spec"] = placement.apply(body["spec"])
            with tolerating(409):
                await self.client.create(Pod.from_dict(body))
            log.info("networkpolicy canary created", extra=fields(pod=name))
        if (waiting := enforcement.not_probed(canary, name)) is not None:
            return waiting
        assert canary is not None
        open_answered = await self.connect(canary.ip, enforcement.OPEN_PORT)
        guarded_answered = open_answered and await self.connect(canary.ip, enforcement.GUARDED_PORT)
        now = self.clock()
        policy_age = (now - policy_created).total_seconds() if policy_created else 0.0
        settled = min(policy_age, enforcement.seconds_between(canary.ready_since, now)) >= enforcement.SETTLE_SECONDS
        return enforcement.verdict(canary, open_answered, guarded_answered, settled)

    def _report_changes(self, conditions: dict[str, dict]) -> None:
        for key, condition in conditions.items():
            previous = self._conditions.get(key)
            if previous is None or previous["reason"] != condition["reason"]:
                level = logging.WARNING if condition["status"] == "False" else logging.INFO
                log.log(
                    level,
                    "networkpolicy enforcement",
                    extra=fields(placement=key, status=condition["status"], reason=condition["reason"]),
                )
