"""Warning Events on a local pod for what its provider reported and the consumer refused or clamped (vk/trust.py
`Refusal`): one per pod and kind of refusal, not one per status update or scrape.

A provider patching its pod in a loop would otherwise have an Event written for every write. Which (pod, kind) pairs
were reported is kept in memory, the least recently seen forgotten first beyond MEMORY: a restarted virtual kubelet
reports a refusal that goes on once more (the Event, named by its reason and message, counts it again).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from ..kube.events import EventRecorder
from ..objects import reference
from .trust import Refusal, sanitised_message

# (pod uid, kind) pairs remembered.
MEMORY = 20_000


class RefusalEvents:
    def __init__(self, events: EventRecorder, provider_id: str, memory: int = MEMORY):
        self.events = events
        self.provider_id = provider_id
        self.memory = memory
        self._reported: OrderedDict[tuple[str, str], None] = OrderedDict()

    def first_of_their_kind(self, pod: dict, refusals: Iterable[Refusal]) -> list[Refusal]:
        """The refusals of a kind not reported yet for this pod (the first of each), remembered as reported now."""
        meta = pod["metadata"]
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}"
        first = []
        for refusal in refusals:
            key = (uid, refusal.kind)
            if key in self._reported:
                self._reported.move_to_end(key)
                continue
            self._reported[key] = None
            first.append(refusal)
        while len(self._reported) > self.memory:
            self._reported.popitem(last=False)
        return first

    async def record(self, pod: dict, refusals: Iterable[Refusal]) -> None:
        for refusal in self.first_of_their_kind(pod, refusals):
            await self.events.record(self._involved(pod), "Warning", refusal.kind, self._message(refusal))

    def record_later(self, pod: dict, refusals: Iterable[Refusal]) -> None:
        """As record, off the caller's path (a scrape must not wait for the API server)."""
        for refusal in self.first_of_their_kind(pod, refusals):
            self.events.later(self._involved(pod), "Warning", refusal.kind, self._message(refusal))

    def _involved(self, pod: dict) -> dict:
        return reference({"apiVersion": "v1", "kind": "Pod", **pod})

    def _message(self, refusal: Refusal) -> str:
        return sanitised_message(f"provider {self.provider_id} {refusal.message}")
