"""One list+watch per resource type, with a local cache and change notifications.

Follows the usual informer hygiene: list, then watch from the list's resourceVersion; relist on
410 Gone; reconnect with backoff when the API server is unreachable; server-side timeouts so a
silently dead connection is replaced. Selectors are applied by the server. A `transform` may
shrink each object before it is cached, which keeps memory bounded for large lists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lightkube import ALL_NS, AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource

from .. import metrics
from ..logs import fields

log = logging.getLogger(__name__)

Key = tuple[str | None, str]
Handler = Callable[[str, Key, Any, Any], None]


def object_key(obj) -> Key:
    meta = obj.metadata
    return (meta.namespace, meta.name)


class Informer:
    def __init__(
        self,
        client: AsyncClient,
        resource,
        *,
        name: str,
        namespace: str | None = None,
        labels: dict | None = None,
        fields: dict | None = None,
        transform: Callable[[Any], Any] | None = None,
        server_timeout: int = 290,
    ):
        self.client = client
        self.resource = resource
        self.name = name
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.transform = transform or (lambda obj: obj)
        self.server_timeout = server_timeout
        self.cache: dict[Key, Any] = {}
        self.synced = asyncio.Event()
        self.healthy = False
        self.last_error: str | None = None  # why the last list or watch failed, for status reports
        self._versions: dict[Key, str] = {}
        self._handlers: list[Handler] = []

    def on_change(self, handler: Handler) -> None:
        """`handler(event, key, new, old)`; event is ADDED, MODIFIED or DELETED, `new` is None on delete."""
        self._handlers.append(handler)

    def get(self, namespace: str | None, name: str):
        return self.cache.get((namespace, name))

    def _selectors(self) -> dict:
        selectors = {"labels": self.labels, "fields": self.fields}
        if self.namespace is not None:
            selectors["namespace"] = self.namespace
        elif issubclass(self.resource, NamespacedResource):
            selectors["namespace"] = ALL_NS  # lightkube's None would mean the kubeconfig's namespace
        return selectors

    async def run(self) -> None:
        backoff = 0.5
        while True:
            try:
                version = await self._relist()
                backoff = 0.5
                async for event, obj in self.client.watch(
                    self.resource,
                    resource_version=version,
                    server_timeout=self.server_timeout,
                    **self._selectors(),
                ):
                    self._apply(event, obj)
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.status.code == 410:
                    metrics.WATCH_RESTARTS.labels(self.name, "gone").inc()
                    continue
                self._unhealthy(error, backoff)
            except Exception as error:  # unreachable server, reset connection, decoding trouble
                self._unhealthy(error, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30)

    def _unhealthy(self, error: Exception, backoff: float) -> None:
        self.healthy = False
        status = getattr(error, "status", None)
        self.last_error = (getattr(status, "message", None) or str(error) or type(error).__name__)[:300]
        metrics.WATCH_RESTARTS.labels(self.name, type(error).__name__).inc()
        log.warning(
            "watch interrupted; relisting",
            extra=fields(informer=self.name, error=str(error)[:300], retry_in=backoff),
        )

    async def _relist(self) -> str:
        listing = self.client.list(self.resource, chunk_size=500, **self._selectors())
        fresh: dict[Key, Any] = {}
        versions: dict[Key, str] = {}
        async for obj in listing:
            key = object_key(obj)
            versions[key] = obj.metadata.resourceVersion
            fresh[key] = obj
        old_cache, old_versions = self.cache, self._versions
        self.cache, self._versions = {}, {}
        for key, obj in fresh.items():
            stored = self.transform(obj)
            self.cache[key] = stored
            self._versions[key] = versions[key]
            if key not in old_cache:
                self._notify("ADDED", key, stored, None)
            elif old_versions.get(key) != versions[key]:
                self._notify("MODIFIED", key, stored, old_cache[key])
        for key, old in old_cache.items():
            if key not in fresh:
                self._notify("DELETED", key, None, old)
        metrics.CACHED_OBJECTS.labels(self.name).set(len(self.cache))
        self.healthy = True
        self.synced.set()
        return listing.resourceVersion

    def _apply(self, event: str, obj) -> None:
        key = object_key(obj)
        metrics.WATCH_EVENTS.labels(self.name, event).inc()
        old = self.cache.get(key)
        if event == "DELETED":
            self.cache.pop(key, None)
            self._versions.pop(key, None)
            self._notify("DELETED", key, None, old)
        else:
            stored = self.transform(obj)
            self.cache[key] = stored
            self._versions[key] = obj.metadata.resourceVersion
            self._notify(event, key, stored, old)
        metrics.CACHED_OBJECTS.labels(self.name).set(len(self.cache))

    def _notify(self, event: str, key: Key, new, old) -> None:
        for handler in self._handlers:
            try:
                handler(event, key, new, old)
            except Exception:
                log.exception("informer handler failed", extra=fields(informer=self.name, key=str(key)))


class NamespacedInformers:
    """One informer per namespace for one kind, started and stopped as namespaces come and go.

    A tenant credential may list only inside its own namespaces, so a cluster-wide watch is not an
    option; a namespace's informer is cancelled once the namespace (and the right to list there) is gone.
    """

    def __init__(self, make: Callable[[str], Informer]):
        self.make = make
        self._informers: dict[str, Informer] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    def watch(self, namespace: str) -> Informer:
        informer = self._informers.get(namespace)
        if informer is None:
            informer = self._informers[namespace] = self.make(namespace)
            self._tasks[namespace] = asyncio.get_running_loop().create_task(informer.run())
        return informer

    def unwatch(self, namespace: str) -> None:
        task = self._tasks.pop(namespace, None)
        if task is not None:
            task.cancel()
        self._informers.pop(namespace, None)

    def get(self, namespace: str) -> Informer | None:
        return self._informers.get(namespace)

    def __contains__(self, namespace: str) -> bool:
        return namespace in self._informers
