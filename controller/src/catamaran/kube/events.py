"""Kubernetes Events for the objects Catamaran acts on, aggregated by reason and message."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from .. import metrics
from ..logs import fields

log = logging.getLogger(__name__)


# Informational events waiting to be written; beyond this they are dropped (and counted), never queued forever.
DEFERRED_LIMIT = 10_000


class EventRecorder:
    def __init__(self, client: AsyncClient, component: str, deferred_writers: int = 2):
        self.client = client
        self.component = component
        self.deferred_writers = deferred_writers
        self._deferred: asyncio.Queue | None = None  # made, with its writers, on first use (needs the loop)
        self._writers: list[asyncio.Task] = []

    def later(self, involved: dict, kind_type: str, reason: str, message: str) -> None:
        """Record an informational event off the caller's path: a burst of successes must not slow the work."""
        if self._deferred is None:
            self._deferred = asyncio.Queue(maxsize=DEFERRED_LIMIT)
            loop = asyncio.get_running_loop()
            self._writers = [loop.create_task(self._write_deferred()) for _ in range(self.deferred_writers)]
        try:
            self._deferred.put_nowait((involved, kind_type, reason, message))
        except asyncio.QueueFull:
            metrics.EVENTS_DROPPED.inc()

    async def _write_deferred(self) -> None:
        queue = self._deferred
        assert queue is not None, "writers start with their queue"
        while True:
            event = await queue.get()
            try:
                await self.record(*event)
            except Exception:  # record() logs API errors; anything else must not end the writer
                log.exception("cannot record deferred event")

    async def record(self, involved: dict, kind_type: str, reason: str, message: str) -> None:
        """`involved` holds apiVersion, kind, namespace, name and uid of the object."""
        namespace = involved.get("namespace") or "default"
        digest = hashlib.sha256(f"{involved.get('uid')}/{reason}/{message}".encode()).hexdigest()[:12]
        name = f"{involved['name']}.{digest}"
        now = datetime.datetime.now(datetime.UTC)
        event = Event(
            metadata=ObjectMeta(name=name, namespace=namespace),
            involvedObject=ObjectReference(
                apiVersion=involved.get("apiVersion"),
                kind=involved.get("kind"),
                name=involved["name"],
                namespace=involved.get("namespace"),
                uid=involved.get("uid"),
            ),
            reason=reason,
            message=message[:1024],
            type=kind_type,
            source=EventSource(component=self.component),
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
        )
        try:
            await self.client.create(event)  # most events happen once: create first
            return
        except ApiError as error:
            if error.status.code != 409:
                log.warning("cannot record event", extra=fields(event=name, reason=reason, error=str(error)))
                return
        try:
            existing = await self.client.get(Event, name, namespace=namespace)
            await self.client.patch(
                Event,
                name,
                {"count": (existing.count or 1) + 1, "lastTimestamp": now.isoformat()},
                namespace=namespace,
            )
        except ApiError as error:
            log.warning("cannot update event", extra=fields(event=name, error=str(error)))
