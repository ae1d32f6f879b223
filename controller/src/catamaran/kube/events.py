"""Kubernetes Events for the objects Catamaran acts on, aggregated by reason and message."""

from __future__ import annotations

import datetime
import hashlib
import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from ..logs import fields

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, client: AsyncClient, component: str):
        self.client = client
        self.component = component

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
