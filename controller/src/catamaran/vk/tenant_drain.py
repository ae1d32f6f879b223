"""A provider that drains this tenant (its ResourceOffer's spec.cordon.drain) has the pods bound to the virtual node
evicted here, on the consumer, as `kubectl drain` evicts a node's pods: through the Eviction API, so the consumer's
PodDisruptionBudgets hold (a refused eviction is tried again, as kubectl does, every few seconds) and the consumer's
controllers make the pods again on other nodes (the virtual node is tainted while cordoned: node.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from ..logs import fields
from ..objects import reference
from ..steering import is_daemonset_pod
from .context import PeeringContext
from .pools import Cordon

log = logging.getLogger(__name__)

BLOCKED_RETRY_S = 5  # kubectl drain's interval between evictions a PodDisruptionBudget refused
EVICTED_RECHECK_S = 1
DRAINING_RECHECK_S = 30


def evictable(pods: list[dict]) -> list[dict]:
    """The pods a drain evicts: not already going, and not a DaemonSet's (never offloaded; kubectl skips them too)."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and not is_daemonset_pod(p)]


class TenantDrain:
    def __init__(self, peering: PeeringContext, pods_on_node: Callable[[], list[dict]]):
        self.peering = peering
        self.pods_on_node = pods_on_node
        self.cordon: Cordon | None = None
        self._wake = asyncio.Event()
        self._told_blocked: set[str] = set()  # pod UIDs whose refused eviction was reported

    def update(self, cordon: Cordon | None) -> None:
        was_draining = self.draining
        self.cordon = cordon
        if self.draining != was_draining:
            self._wake.set()

    @property
    def draining(self) -> bool:
        return bool(self.cordon and self.cordon.drain)

    def tasks(self):
        return [self._run()]

    async def _run(self) -> None:
        while True:
            # While draining, a pod bound here meanwhile (by name, past the taint) is found within a while.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), DRAINING_RECHECK_S if self.draining else None)
            self._wake.clear()
            while self.draining and (pods := evictable(self.pods_on_node())):
                self._told_blocked &= {pod["metadata"]["uid"] for pod in pods}  # bounded by the pods still here
                blocked = 0
                for pod in pods:
                    blocked += not await self._evict(pod)
                await asyncio.sleep(BLOCKED_RETRY_S if blocked else EVICTED_RECHECK_S)

    async def _evict(self, pod: dict) -> bool:
        """Evict one pod; False when a PodDisruptionBudget (or the API) refused it for now."""
        meta = pod["metadata"]
        why = self.cordon.reason if self.cordon else ""
        eviction = Pod.Eviction(metadata=ObjectMeta(name=meta["name"], namespace=meta["namespace"]))
        try:
            await self.peering.local.create(eviction, meta["name"], namespace=meta["namespace"])
        except ApiError as error:
            if error.status.code == 404:
                return True
            if meta["uid"] not in self._told_blocked:
                self._told_blocked.add(meta["uid"])
                await self._event(
                    pod,
                    "Warning",
                    "ProviderDrainBlocked",
                    f"provider {self.peering.provider_id} drains this tenant; the eviction was refused for now "
                    f"({error.status.code}: {error.status.message}), tried again every {BLOCKED_RETRY_S}s",
                )
            return False
        self._told_blocked.discard(meta["uid"])
        log.info(
            "pod evicted: the provider drains this tenant", extra=fields(pod=f"{meta['namespace']}/{meta['name']}")
        )
        await self._event(
            pod, "Normal", "ProviderDrain", f"evicted: provider {self.peering.provider_id} drains this tenant: {why}"
        )
        return True

    async def _event(self, pod: dict, kind: str, reason: str, message: str) -> None:
        await self.peering.events.record(reference({"apiVersion": "v1", "kind": "Pod", **pod}), kind, reason, message)
