"""One list+watch per resource type, with a local cache and change notifications.

Follows the usual informer hygiene: list, then watch from the list's resourceVersion; relist on
410 Gone; reconnect with backoff when the API server is unreachable. Selectors are applied by the
server. A `transform` may shrink each object before it is cached, which keeps memory bounded for
large lists.

A half-open connection delivers nothing and raises nothing, so every watch asks for bookmarks (the
API server sends one about every minute, even when nothing changes) and gives up on a read that
waits longer than `read_timeout`; it then watches again from the last resourceVersion it saw.
An informer that keeps failing says so (`failing`, `last_error`, `failing_since`), for readiness
and for the status of whatever depends on it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx2
import msgspec
from lightkube import ALL_NS, AsyncClient
from lightkube.core import decoders
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource
from lightkube.core.selector import build_selector

from .. import metrics
from ..logs import fields

log = logging.getLogger(__name__)

Key = tuple[str | None, str]
Handler = Callable[[str, Key, Any, Any], None]

# A watch that delivered nothing, not even a bookmark, for this long is taken for dead and replaced.
# The API server sends a bookmark about every 60 s, so a healthy quiet watch never reaches it.
READ_TIMEOUT_SECONDS = 120.0
# This many failed list or watch attempts in a row make an informer `failing`: one failure is often an
# API server restarting; several mean lost rights or a server that stays away.
FAILING_AFTER = 3

_informers: weakref.WeakSet[Informer] = weakref.WeakSet()
# Called with the informer whenever it starts or stops failing.
failure_listeners: list[Callable[[Informer], None]] = []


class _Bookmark(msgspec.Struct):
    metadata: dict


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class PackedCache(Mapping):
    """Objects kept as compact JSON bytes and decoded on each read.

    A pod as Python dicts takes 13-17 KiB, its JSON under 3 KiB: at ten thousand pods that is the
    difference between a process within its memory budget and one far over it. Reads cost a decode
    (tens of microseconds), paid only by the keys a reconciler actually looks at.
    """

    def __init__(self) -> None:
        self._data: dict[Key, bytes] = {}

    def __getitem__(self, key: Key) -> Any:
        return _decode(self._data[key])

    def __setitem__(self, key: Key, value: Any) -> None:
        self._data[key] = _encode(value)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[Key]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def pop(self, key: Key, default: Any = None) -> Any:
        raw = self._data.pop(key, None)
        return default if raw is None else _decode(raw)


def object_key(obj) -> Key:
    meta = obj.metadata
    return (meta.namespace, meta.name)


def running_informers() -> list[Informer]:
    """The informers of this process whose run() is active, by name."""
    return sorted((i for i in _informers if i.running), key=lambda i: i.name)


def describe_failure(informer: Informer) -> str:
    return (
        f"informer {informer.name}: {informer.consecutive_failures} failures in a row since "
        f"{informer.failing_since}: {informer.last_error}"
    )


def error_text(error: Exception) -> str:
    """A short reason for status messages: the API status (code and message) when there is one."""
    status = getattr(error, "status", None)
    message = getattr(status, "message", None)
    if message:
        code = getattr(status, "code", None)
        return (f"{code} {message}" if code else message)[:300]
    return (str(error) or type(error).__name__)[:300]


class _Cached:
    """A cache of transformed objects and the handlers told of its changes: an Informer's, or a view's."""

    def __init__(self, name: str, packed: bool):
        self.name = name
        # `packed`: the transformed objects (plain JSON data) are stored as bytes, see PackedCache.
        self.packed = packed
        self.cache: dict[Key, Any] | PackedCache = self._empty_cache()
        self._handlers: list[Handler] = []

    def on_change(self, handler: Handler) -> None:
        """`handler(event, key, new, old)`; event is ADDED, MODIFIED or DELETED, `new` is None on delete."""
        self._handlers.append(handler)

    def get(self, namespace: str | None, name: str):
        return self.cache.get((namespace, name))

    def _empty_cache(self) -> dict[Key, Any] | PackedCache:
        return PackedCache() if self.packed else {}

    def _notify(self, event: str, key: Key, new, old) -> None:
        for handler in self._handlers:
            try:
                handler(event, key, new, old)
            except Exception:
                log.exception("informer handler failed", extra=fields(informer=self.name, key=str(key)))


class Informer(_Cached):
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
        read_timeout: float = READ_TIMEOUT_SECONDS,
        packed: bool = False,
    ):
        super().__init__(name, packed)
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.transform = transform or (lambda obj: obj)
        self.server_timeout = server_timeout
        self.read_timeout = read_timeout
        self.synced = asyncio.Event()
        self.healthy = False
        self.running = False
        self.last_error: str | None = None  # why the last list or watch failed, for status reports
        self.consecutive_failures = 0
        self.failing_since: str | None = None  # when the current run of failures began (UTC)
        self.watches_started = 0
        self._versions: dict[Key, str] = {}
        self._views: list[InformerView] = []
        _informers.add(self)

    @property
    def failing(self) -> bool:
        return self.consecutive_failures >= FAILING_AFTER

    def view(
        self, name: str, *, include: Callable[[Any], bool], transform: Callable[[Any], Any], packed: bool = False
    ) -> InformerView:
        """A second cache of the objects `include` accepts, fed by this informer's own list and watch.

        Two controllers that need the same kind in different shapes share one request to the server
        (one list+watch per resource type) and keep each its own compact cache."""
        created = InformerView(self, name, include, transform, packed)
        self._views.append(created)
        return created

    def _selectors(self) -> dict:
        selectors = {"labels": self.labels, "fields": self.fields}
        if self.namespace is not None:
            selectors["namespace"] = self.namespace
        elif issubclass(self.resource, NamespacedResource):
            selectors["namespace"] = ALL_NS  # lightkube's None would mean the kubeconfig's namespace
        return selectors

    async def run(self) -> None:
        self.running = True
        try:
            await self._run()
        finally:
            self.running = False

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                version = await self._relist()
                self._succeeded()
                backoff = 0.5
                while True:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.status.code == 410:
                    metrics.WATCH_RESTARTS.labels(self.name, "gone").inc()
                    continue
                self._failed(error, backoff)
            except Exception as error:  # unreachable server, reset connection, decoding trouble
                self._failed(error, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30)

    async def _watch(self, version: str) -> str:
        """One watch request from `version` until the server ends it or it goes quiet; the last version seen.

        lightkube's watch asks for no bookmarks and reads without a timeout, so the request is built here,
        on the client's own connection pool, credentials and TLS settings.
        """
        if not isinstance(self.client, AsyncClient):
            return await self._watch_plain(version)
        generic = self.client._client
        request = generic.prepare_request(
            "list",
            res=self.resource,
            namespace=self._selectors().get("namespace"),
            watch=True,
            params={
                "timeoutSeconds": self.server_timeout,
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                "labelSelector": build_selector(self.labels) if self.labels else None,
                "fieldSelector": build_selector(self.fields, for_fields=True) if self.fields else None,
            },
        )
        http = generic._client
        timeout = httpx2.Timeout(15.0, read=self.read_timeout)
        self.watches_started += 1
        response = await http.send(
            http.build_request(request.method, request.url, params=request.params, timeout=timeout), stream=True
        )
        try:
            if response.status_code >= 400:
                await response.aread()
                generic.raise_for_status(response)
            self._succeeded()
            async for line in response.aiter_lines():
                if line:
                    version = self._handle_line(line, version)
        except httpx2.ReadTimeout:
            metrics.WATCH_RESTARTS.labels(self.name, "inactivity").inc()
            log.info(
                "watch silent for its read timeout; watching again",
                extra=fields(informer=self.name, read_timeout=self.read_timeout),
            )
        finally:
            await response.aclose()
        return version

    async def _watch_plain(self, version: str) -> str:
        """Any other client (the unit tests' in-memory API servers): its watch(), with the same read timeout."""
        self.watches_started += 1
        stream = aiter(
            self.client.watch(
                self.resource, resource_version=version, server_timeout=self.server_timeout, **self._selectors()
            )
        )
        self._succeeded()
        while True:
            try:
                event, obj = await asyncio.wait_for(anext(stream), self.read_timeout)
            except StopAsyncIteration:
                return version
            except TimeoutError:
                metrics.WATCH_RESTARTS.labels(self.name, "inactivity").inc()
                return version
            self._apply(event, obj)
            version = obj.metadata.resourceVersion or version

    def _handle_line(self, line: str, version: str) -> str:
        event = decoders.decode_watch_event(line)
        if event.type == "ERROR":
            raise ApiError(status=decoders.decode_status(event.object))
        if event.type == "BOOKMARK":
            metrics.WATCH_EVENTS.labels(self.name, "BOOKMARK").inc()
            bookmark = msgspec.json.decode(event.object, type=_Bookmark)
            return bookmark.metadata.get("resourceVersion") or version
        obj = decoders.decode_object(event.object, self.resource)
        self._apply(event.type, obj)
        return obj.metadata.resourceVersion or version

    def _succeeded(self) -> None:
        self.healthy = True
        if self.consecutive_failures == 0:
            return
        was_failing = self.failing
        self.consecutive_failures = 0
        self.failing_since = None
        if was_failing:
            log.info("informer recovered", extra=fields(informer=self.name))
            self._tell_listeners()

    def _failed(self, error: Exception, backoff: float) -> None:
        self.healthy = False
        self.last_error = error_text(error)
        if self.consecutive_failures == 0:
            self.failing_since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.consecutive_failures += 1
        metrics.WATCH_RESTARTS.labels(self.name, type(error).__name__).inc()
        log.warning(
            "watch interrupted; relisting",
            extra=fields(
                informer=self.name, error=self.last_error, failures=self.consecutive_failures, retry_in=backoff
            ),
        )
        if self.consecutive_failures == FAILING_AFTER:
            self._tell_listeners()

    def _tell_listeners(self) -> None:
        for listener in list(failure_listeners):
            try:
                listener(self)
            except Exception:
                log.exception("informer failure listener failed", extra=fields(informer=self.name))

    async def _relist(self) -> str:
        listing = self.client.list(self.resource, chunk_size=500, **self._selectors())
        # Transformed as they arrive: a list of full objects is what would otherwise set the memory peak.
        fresh = self._empty_cache()
        fresh_views = [view._empty_cache() for view in self._views]
        versions: dict[Key, str] = {}
        async for obj in listing:
            key = object_key(obj)
            versions[key] = obj.metadata.resourceVersion
            fresh[key] = self.transform(obj)
            for view, view_fresh in zip(self._views, fresh_views, strict=True):
                if view.include(obj):
                    view_fresh[key] = view.transform(obj)
        old_cache, old_versions = self.cache, self._versions
        self.cache, self._versions = fresh, versions
        _announce(self._notify, old_cache, fresh, old_versions, versions)
        for view, view_fresh in zip(self._views, fresh_views, strict=True):
            view._replace(view_fresh, old_versions, versions)
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
        for view in self._views:
            view._apply(key, None if event == "DELETED" else obj)


class InformerView(_Cached):
    """A filtered, transformed cache fed by an Informer (see Informer.view); it has no request of its own."""

    def __init__(self, source: Informer, name: str, include, transform, packed: bool):
        super().__init__(name, packed)
        self.source = source
        self.include = include
        self.transform = transform

    @property
    def synced(self) -> asyncio.Event:
        return self.source.synced

    def _apply(self, key: Key, obj) -> None:
        """`obj` changed (None: deleted); it enters, stays in or leaves this view."""
        old = self.cache.get(key)
        if obj is not None and self.include(obj):
            stored = self.transform(obj)
            self.cache[key] = stored
            self._notify("ADDED" if old is None else "MODIFIED", key, stored, old)
        elif old is not None:
            self.cache.pop(key, None)
            self._notify("DELETED", key, None, old)
        metrics.CACHED_OBJECTS.labels(self.name).set(len(self.cache))

    def _replace(self, fresh, old_versions: dict[Key, str], versions: dict[Key, str]) -> None:
        old_cache, self.cache = self.cache, fresh
        _announce(self._notify, old_cache, fresh, old_versions, versions)
        metrics.CACHED_OBJECTS.labels(self.name).set(len(self.cache))


def _announce(notify, old_cache, fresh, old_versions: dict[Key, str], versions: dict[Key, str]) -> None:
    """After a relist: ADDED, MODIFIED (another resourceVersion) and DELETED against the previous cache."""
    for key in fresh:
        if key not in old_cache:
            notify("ADDED", key, fresh[key], None)
        elif old_versions.get(key) != versions[key]:
            notify("MODIFIED", key, fresh[key], old_cache[key])
    for key in old_cache:
        if key not in fresh:
            notify("DELETED", key, None, old_cache[key])


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
