"""The provider's pod IPs as the consumer shows them: checked against the ranges the provider announces and the
consumer's own, translated into the remap range, and what is refused said on the virtual node and the
ForeignCluster (conditions and Events). The pure rules are vk/ip_translation.py's IPTranslator."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from ..kube.informer import Informer, call
from ..kube.ops import patch_status, patch_status_if_unchanged
from ..kube.resources import ForeignCluster
from ..logs import fields
from ..objects import as_dict, now_iso, reference, set_condition
from .context import PeeringContext
from .ip_translation import IPTranslator
from .local_ranges import LocalRanges

log = logging.getLogger(__name__)

# On the virtual node and the ForeignCluster: True while some provider pod IPs cannot be remapped.
UNTRANSLATED_CONDITION = "catamaran.io/PodIPsUntranslated"
# On the virtual node and the ForeignCluster: True while every pod IP of the provider is refused, for an overlap
# with the consumer's own ranges (reasons in ip_translation.py) or because it announces no pod range.
REFUSED_CONDITION = "catamaran.io/PodIPsRefused"
NO_PROVIDER_RANGES = "NoProviderRanges"
NO_CONSENTED_RANGES = "NoConsentedRanges"
PROVIDER_RANGES_ACCEPTED = "ProviderRangesAccepted"
# On the ForeignCluster (and the virtual node): True while the provider announces pod ranges the consumer did not
# consent to at peering (spec.networking.podCIDRs); they are neither shown nor routed, and each is named with why.
CONSENT_CONDITION = "catamaran.io/PodCIDRsRefused"
RANGES_NOT_CONSENTED = "RangesNotConsented"
WITHIN_CONSENT = "WithinConsent"
NO_CONSENT_RECORDED = "NoConsentRecorded"


class PodIPs:
    """The translator every local pod's status goes through, kept current with both sides' ranges."""

    def __init__(
        self,
        peering: PeeringContext,
        node_ip: str,
        remap_cidr: str | None,
        nodes: Informer,
        requeue_all: Callable[[], None],
        consented: list[str] | None = None,
    ):
        self.peering = peering
        self.remap_cidr = remap_cidr
        self.consented = consented  # ip_translation.consented_pod_cidrs of the ForeignCluster; changed by a new consent
        self.nodes = nodes  # the virtual nodes, whose (re)creation wakes the report loop
        self._requeue_all = requeue_all  # every local pod is looked at again when the translator changes
        # None until both the provider's announced pod ranges and the consumer's own are known: until then the
        # local pods keep the IPs they show, so a restart neither drops them nor shows unchecked ones.
        self.translate: IPTranslator | None = None
        self.provider_cidrs: list[str] | None = None  # as the ResourceOffer announces them; None: not seen yet
        self.network_down: str | None = None  # why the network fabric's tunnel is down, as its gateway reports it
        self.local_ranges = LocalRanges(peering.local, node_ip)
        self.local_ranges.listeners.append(self._retranslate)
        self._changed = asyncio.Event()
        nodes.on_change(call(self._changed.set))

    def tasks(self):
        return [*self.local_ranges.tasks(), self._report_loop()]

    def update_network(self, problem: str | None) -> None:
        """The tunnel went down or came back: every pod's readiness follows it."""
        if problem != self.network_down:
            self.network_down = problem
            self._requeue_all()

    def update_pod_cidrs(self, provider_cidrs: list[str]) -> None:
        self.provider_cidrs = list(provider_cidrs)
        self._retranslate()

    def update_consent(self, consented: list[str] | None) -> None:
        """A new consent (the peering ran again with other ranges): every pod IP is judged again by it."""
        if consented != self.consented:
            self.consented = consented
            self._retranslate()

    def _retranslate(self) -> None:
        """A new translator when the provider's ranges or the consumer's change; every pod is looked at again."""
        if self.provider_cidrs is None or not self.local_ranges.synced.is_set():
            return
        translator = IPTranslator(self.provider_cidrs, self.remap_cidr, self.local_ranges.ranges(), self.consented)
        if self.translate is not None and translator.same_as(self.translate):
            return
        if translator.ignored:
            log.warning("provider pod ranges ignored", extra=fields(ignored=", ".join(translator.ignored)))
        if translator.refused:
            log.warning("provider pod ranges not consented", extra=fields(refused=refused_text(translator.refused)))
        if translator.conflict:
            log.warning("provider pod IPs refused", extra=fields(problem=translator.conflict[1]))
        elif translator.problem:
            log.warning("pod IPs cannot all be translated", extra=fields(problem=translator.problem))
        self.translate = translator
        self._changed.set()
        self._requeue_all()

    async def _report_loop(self) -> None:
        """What the translator refuses, as conditions on the virtual node and the ForeignCluster (and Events).

        The node's own status loop keeps conditions it does not know, but may overwrite one written
        meanwhile; the node watch wakes this loop again, so the condition is put back.
        """
        reported: dict[str, dict] = {}  # on the ForeignCluster, by type
        reported_network: dict | None = None
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self.translate is None:
                continue
            wanted = translation_conditions(self.translate, self.local_ranges.unread)
            network = {"remotePodCIDRs": self.translate.seen_ranges()}
            try:
                await self._node_conditions(wanted)
                changed = [c for c in wanted if reported.get(c["type"]) != c]
                if changed:
                    await self._foreign_conditions(changed)
                    reported.update((c["type"], c) for c in changed)
                if network != reported_network:
                    # What the gateway routes into this peering's tunnel (fabric/gateway.py).
                    namespace, name = self.peering.foreign_cluster
                    meta = {"name": name, "namespace": namespace}
                    await patch_status(self.peering.local, ForeignCluster, meta, {"network": network})
                    reported_network = network
            except ApiError as error:
                log.warning("cannot report pod IP translation", extra=fields(error=str(error)[:300]))
                await asyncio.sleep(2)
                self._changed.set()

    async def _node_conditions(self, wanted: list[dict]) -> None:
        for name in sorted(self.peering.node_names):  # every virtual node of the peering shows them
            if self.nodes.get(None, name) is not None:  # one not created yet wakes this loop when it is
                await self._conditions_of(name, wanted)

    async def _conditions_of(self, name: str, wanted: list[dict]) -> None:
        current = await self.peering.local.get(Node, name)
        conditions = [c.to_dict() for c in (current.status.conditions or [])] if current.status else []
        existing = {c["type"]: c for c in conditions}
        now = now_iso()
        stale = []
        for wanted_condition in wanted:
            previous = existing.get(wanted_condition["type"]) or {}
            if all(previous.get(k) == wanted_condition[k] for k in ("status", "reason", "message")):
                continue
            same_status = previous.get("status") == wanted_condition["status"]
            since = previous.get("lastTransitionTime") if same_status else None
            stale.append({**wanted_condition, "lastTransitionTime": since or now, "lastHeartbeatTime": now})
        if stale:
            # Strategic merge: conditions merge by type, so the node's other conditions stay as they are.
            await self.peering.local.patch(
                Node.Status, name, {"status": {"conditions": stale}}, patch_type=PatchType.STRATEGIC
            )

    async def _foreign_conditions(self, changed: list[dict]) -> None:
        namespace, name = self.peering.foreign_cluster

        def change(foreign: dict) -> dict | None:
            current = (foreign.get("status") or {}).get("conditions") or []
            conditions = current
            for wanted in changed:
                conditions = set_condition(
                    conditions, wanted["type"], wanted["status"], wanted["reason"], wanted["message"]
                )
            return {"conditions": conditions} if conditions != current else None

        foreign = await patch_status_if_unchanged(self.peering.local, ForeignCluster, name, namespace, change)
        refusals = [wanted for wanted in changed if wanted["status"] == "True"]
        if refusals and foreign is None:
            foreign = as_dict(await self.peering.local.get(ForeignCluster, name, namespace=namespace))
        for wanted in refusals:
            await self.peering.events.record(reference(foreign), "Warning", wanted["reason"], wanted["message"])


def translation_conditions(translate: IPTranslator, unread: list[str]) -> list[dict]:
    """The conditions saying what of the provider's pod IPs the consumer refuses or cannot translate.

    `unread`: the consumer's own ranges this virtual kubelet may not read, so the overlap check went without."""
    conditions = []
    if translate.target is not None and translate.sources:
        conditions.append(_untranslated_condition(translate.problem))
    if translate.conflict is not None:
        reason, message = translate.conflict
        conditions.append({"type": REFUSED_CONDITION, "status": "True", "reason": reason, "message": message})
    elif not translate.sources and translate.refused:
        message = (
            f"no pod range the provider announces is consented ({CONSENT_CONDITION} names them), so no pod IP it"
            " reports is shown on the consumer's pods"
        )
        conditions.append(
            {"type": REFUSED_CONDITION, "status": "True", "reason": NO_CONSENTED_RANGES, "message": message}
        )
    elif not translate.sources:
        message = (
            "the provider announces no pod range (its ResourceOffer's status.podCIDRs), so no pod IP it reports is"
            " shown on the consumer's pods"
        )
        conditions.append(
            {"type": REFUSED_CONDITION, "status": "True", "reason": NO_PROVIDER_RANGES, "message": message}
        )
    else:
        shown = f" as {translate.target}" if translate.target is not None else ""
        message = f"pod IPs inside the provider's pod ranges {', '.join(map(str, translate.sources))} are shown{shown}"
        if unread:
            message += f"; checked without the consumer's {', '.join(unread)}"
        conditions.append(
            {"type": REFUSED_CONDITION, "status": "False", "reason": PROVIDER_RANGES_ACCEPTED, "message": message}
        )
    if translate.ignored:
        ignored = f"; ignored announced ranges: {', '.join(translate.ignored)}"
        conditions[-1]["message"] += ignored
    return [consent_condition(translate), *conditions]


def consent_condition(translate: IPTranslator) -> dict:
    """Whether every range the provider announces lies inside what the consumer consented to, naming each refused
    range and why: it is neither shown in pod IPs nor routed into the provider's tunnel."""
    if translate.consented is None:
        return {
            "type": CONSENT_CONDITION,
            "status": "False",
            "reason": NO_CONSENT_RECORDED,
            "message": "no consented ranges recorded (spec.networking.podCIDRs): the announced ranges are checked"
            " against the consumer's own ranges only",
        }
    consented = ", ".join(translate.consented) or "none"
    if translate.refused:
        return {
            "type": CONSENT_CONDITION,
            "status": "True",
            "reason": RANGES_NOT_CONSENTED,
            "message": f"refused announced pod ranges: {refused_text(translate.refused)}; consented: {consented}"
            " (a new consent is a new peering run with the provider's pod_cidrs)",
        }
    return {
        "type": CONSENT_CONDITION,
        "status": "False",
        "reason": WITHIN_CONSENT,
        "message": f"every announced pod range lies inside the consented ones ({consented})",
    }


def refused_text(refused: list[tuple[str, str, str]]) -> str:
    return "; ".join(f"{cidr} ({why})" for cidr, _, why in refused)


def _untranslated_condition(problem: str) -> dict:
    if problem:
        return {"type": UNTRANSLATED_CONDITION, "status": "True", "reason": "RemapRangeTooSmall", "message": problem}
    return {
        "type": UNTRANSLATED_CONDITION,
        "status": "False",
        "reason": "RemapRangeFits",
        "message": "every provider pod IP is translated into the remap range",
    }
