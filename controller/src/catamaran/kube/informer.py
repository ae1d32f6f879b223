"""One list+watch per resource type, with a local cache and change notifications.

Follows the usual informer hygiene: list, then watch from the list's resourceVersion; relist at once on
410 Gone; otherwise retry with jittered exponential backoff, which starts over only once watches have
worked for a while (a list that works followed by a watch that is refused is no recovery). Selectors are
applied by the server. A `transform` may shrink each object before it is cached, which keeps memory
bounded for large lists. The requests themselves go through a ListWatch (kube/clients.py for lightkube).

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
from collections import ChainMap
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from .. import metrics
from ..logs import fields
from .backoff import Backoff
from .clients import LightkubeListWatch
from .echoes import resource_version

log = logging.getLogger(__name__)

Key = tuple[str | None, str]
Handler = Callable[[str, Key, Any, Any], None]
# (event, key, new, old) -> whether a handler acts on that change.
Predicate = Callable[[str, Key, Any, Any], bool]


def changed(event: str, key: Key, new: Any, old: Any) -> bool:
    """The cached form differs (a resync or a change to fields the transform drops is no change)."""
    return new != old


def present(event: str, key: Key, new: Any, old: Any) -> bool:
    """The object exists after the change (not a deletion)."""
    return new is not None


def enqueue(queue, *, key: Callable[[Key], Any] = lambda key: key, delay: float = 0, when: Predicate | None = None):
    """A handler adding `key(k)` of each change `when` admits to a work queue (controller-runtime's
    EnqueueRequestForObject, or with `key` its map function)."""

    def handler(event: str, k: Key, new: Any, old: Any) -> None:
        if when is None or when(event, k, new, old):
            queue.add(key(k), delay)

    return handler


def call(
    callback: Callable[..., Any], *, key: Callable[[Key], Any] | None = None, when: Predicate | None = None
) -> Handler:
    """A handler calling `callback()` (with `key`, `callback(key(k))`) on each change `when` admits: requeue
    everything, wake a loop, tell another controller."""

    def handler(event: str, k: Key, new: Any, old: Any) -> None:
        if when is None or when(event, k, new, old):
            callback() if key is None else callback(key(k))

    return handler


# A watch that delivered nothing, not even a bookmark, for this long is taken for dead and replaced.
# The API server sends a bookmark about every 60 s, so a healthy quiet watch never reaches it.
READ_TIMEOUT_SECONDS = 120.0
# This many failed list or watch attempts in a row make an informer `failing`: one failure is often an
# API server restarting; several mean lost rights or a server that stays away.
FAILING_AFTER = 3
# client-go's reflector: waits double from 0.8 s up to 30 s, and start over after two minutes of working watches.
BACKOFF_INITIAL_SECONDS = 0.8
BACKOFF_CAP_SECONDS = 30.0
BACKOFF_RESET_AFTER_SECONDS = 120.0

_informers: weakref.WeakSet[Informer] = weakref.WeakSet()
# Called with the informer whenever it starts or stops failing.
failure_listeners: list[Callable[[Informer], None]] = []


class Listing(Protocol):
    """The objects of one list, read chunk by chunk; `resourceVersion` is the list's version once they are read."""

    resourceVersion: str

    def __aiter__(self) -> AsyncIterator[Any]: ...


class ListWatch(Protocol):
    """An informer's requests to the API server, for its one resource type and selectors."""

    def list(self) -> Listing: ...

    def watch(self, version: str) -> AbstractAsyncContextManager[AsyncIterable[tuple[str, Any]]]:
        """A watch from `version`: entering sends it, and raises (ApiError) when the server refuses it.

        Then (event type, object) until the server ends the watch; a BOOKMARK's object is the resourceVersion it
        carries. An ERROR event raises ApiError; a watch silent for its read timeout raises TimeoutError."""
        ...


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

    def get(self, key: Key, default: Any = None) -> Any:  # Mapping's get would raise and catch KeyError on a miss
        raw = self._data.get(key)
        return default if raw is None else _decode(raw)

    def pop(self, key: Key, default: Any = None) -> Any:
        raw = self._data.pop(key, None)
        return default if raw is None else _decode(raw)


def object_key(obj) -> Key:
    """(namespace, name) of a lightkube model or a plain object."""
    if isinstance(obj, dict):
        meta = obj["metadata"]
        return (meta.get("namespace"), meta["name"])
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
        self._by_namespace: dict[str | None, set[Key]] = {}  # the cache's keys per namespace
        self._handlers: list[Handler] = []
        # Counted when scraped rather than set on every event (a lock each time); 0 once this cache is gone.
        this = weakref.ref(self)
        metrics.labelled(metrics.CACHED_OBJECTS, name).set_function(lambda: len(c.cache) if (c := this()) else 0)

    def on_change(self, handler: Handler) -> None:
        """`handler(event, key, new, old)`; event is ADDED, MODIFIED or DELETED, `new` is None on delete."""
        self._handlers.append(handler)

    def get(self, namespace: str | None, name: str):
        return self.cache.get((namespace, name))

    def keys_in(self, namespace: str | None) -> list[Key]:
        """The cached objects' keys in one namespace, without a walk over the whole cache."""
        return list(self._by_namespace.get(namespace, ()))

    def _store(self, key: Key, value: Any) -> None:
        self.cache[key] = value
        self._by_namespace.setdefault(key[0], set()).add(key)

    def _drop(self, key: Key) -> None:
        self.cache.pop(key, None)
        keys = self._by_namespace.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_namespace[key[0]]

    def _reset(self, fresh) -> Any:
        """Replace the whole cache (after a relist); the previous one is returned."""
        old, self.cache = self.cache, fresh
        self._by_namespace = {}
        for key in fresh:
            self._by_namespace.setdefault(key[0], set()).add(key)
        return old

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
        plain: bool = False,
        list_watch: ListWatch | None = None,
    ):
        """`client` makes the requests, unless `list_watch` is given (then `client` is unused). `plain`: the objects
        `transform` and views are given are dicts as the API writes them, without managed fields (clients.plain_object),
        not lightkube models: about half the CPU per event for a pod, where the transform wants a dict anyway."""
        super().__init__(name, packed)
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.transform = transform or (lambda obj: obj)
        self.read_timeout = read_timeout
        self.list_watch: ListWatch = list_watch or LightkubeListWatch(
            client,
            resource,
            namespace=namespace,
            labels=labels,
            fields=fields,
            server_timeout=server_timeout,
            read_timeout=read_timeout,
            plain=plain,
        )
        self.synced = asyncio.Event()
        self.healthy = False
        self.running = False
        self.last_error: str | None = None  # why the last list or watch failed, for status reports
        self.consecutive_failures = 0
        self.failing_since: str | None = None  # when the current run of failures began (UTC)
        self.watches_started = 0
        self._backoff = Backoff(
            initial=BACKOFF_INITIAL_SECONDS, cap=BACKOFF_CAP_SECONDS, reset_after=BACKOFF_RESET_AFTER_SECONDS
        )
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

    async def run(self) -> None:
        self.running = True
        try:
            await self._run()
        finally:
            self.running = False

    async def _run(self) -> None:
        while True:
            try:
                version = await self._relist()
                while True:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiError as error:
                if error.status.code == 410:
                    metrics.labelled(metrics.WATCH_RESTARTS, self.name, "gone").inc()
                    continue
                retry_in = self._failed(error)
            except Exception as error:  # unreachable server, reset connection, decoding trouble
                retry_in = self._failed(error)
            await asyncio.sleep(retry_in)

    async def _watch(self, version: str) -> str:
        """One watch from `version` until the server ends it or it goes quiet; the last version seen."""
        self.watches_started += 1
        async with self.list_watch.watch(version) as events:
            self._succeeded()
            try:
                async for event, obj in events:
                    if event == "BOOKMARK":
                        metrics.labelled(metrics.WATCH_EVENTS, self.name, "BOOKMARK").inc()
                        version = obj or version
                    else:
                        self._apply(event, obj)
                        version = resource_version(obj) or version
            except TimeoutError:
                metrics.labelled(metrics.WATCH_RESTARTS, self.name, "inactivity").inc()
                log.info(
                    "watch silent for its read timeout; watching again",
                    extra=fields(informer=self.name, read_timeout=self.read_timeout),
                )
        return version

    def _succeeded(self) -> None:
        """A watch was accepted: only that ends a run of failures, since a list alone says nothing of the watch."""
        self.healthy = True
        self._backoff.healthy(asyncio.get_running_loop().time())
        if self.consecutive_failures == 0:
            return
        was_failing = self.failing
        self.consecutive_failures = 0
        self.failing_since = None
        if was_failing:
            log.info("informer recovered", extra=fields(informer=self.name))
            self._tell_listeners()

    def _failed(self, error: Exception) -> float:
        """Records the failure; how long to wait before listing again."""
        retry_in = self._backoff.failed(asyncio.get_running_loop().time())
        self.healthy = False
        self.last_error = error_text(error)
        if self.consecutive_failures == 0:
            self.failing_since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.consecutive_failures += 1
        metrics.labelled(metrics.WATCH_RESTARTS, self.name, type(error).__name__).inc()
        log.warning(
            "watch interrupted; relisting",
            extra=fields(
                informer=self.name, error=self.last_error, failures=self.consecutive_failures, retry_in=retry_in
            ),
        )
        if self.consecutive_failures == FAILING_AFTER:
            self._tell_listeners()
        return retry_in

    def _tell_listeners(self) -> None:
        for listener in list(failure_listeners):
            try:
                listener(self)
            except Exception:
                log.exception("informer failure listener failed", extra=fields(informer=self.name))

    async def _relist(self) -> str:
        listing = self.list_watch.list()
        # Transformed as they arrive: a list of full objects is what would otherwise set the memory peak.
        fresh = self._empty_cache()
        fresh_views = [view._empty_cache() for view in self._views]
        versions: dict[Key, str] = {}
        async for obj in listing:
            key = object_key(obj)
            versions[key] = resource_version(obj) or ""
            fresh[key] = self.transform(obj)
            for view, view_fresh in zip(self._views, fresh_views, strict=True):
                if view.include(obj):
                    view_fresh[key] = view.transform(obj)
        old_versions, self._versions = self._versions, versions
        old_cache = self._reset(fresh)
        _announce(self._notify, old_cache, fresh, old_versions, versions)
        for view, view_fresh in zip(self._views, fresh_views, strict=True):
            view._replace(view_fresh, old_versions, versions)
        self.healthy = True
        self.synced.set()
        return listing.resourceVersion

    def _apply(self, event: str, obj) -> None:
        key = object_key(obj)
        metrics.labelled(metrics.WATCH_EVENTS, self.name, event).inc()
        old = self.cache.get(key)
        if event == "DELETED":
            self._drop(key)
            self._versions.pop(key, None)
            self._notify("DELETED", key, None, old)
        else:
            stored = self.transform(obj)
            self._store(key, stored)
            self._versions[key] = resource_version(obj) or ""
            self._notify(event, key, stored, old)
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
            self._store(key, stored)
            self._notify("ADDED" if old is None else "MODIFIED", key, stored, old)
        elif old is not None:
            self._drop(key)
            self._notify("DELETED", key, None, old)

    def _replace(self, fresh, old_versions: dict[Key, str], versions: dict[Key, str]) -> None:
        old_cache = self._reset(fresh)
        _announce(self._notify, old_cache, fresh, old_versions, versions)


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


class InformerUnion:
    """Several informers whose objects never share a key, read as one (get, cache, keys_in, on_change): the pods
    bound to each of a peering's virtual nodes, each node's a field-selected watch as a kubelet's own.

    Its sources run while `run` does. A source may join at any time (its objects arrive as its own events) and leave
    (it is stopped, and DELETED is told for each object it held). `synced` is set by `sync` once the sources known
    then have listed.
    """

    def __init__(self, name: str):
        self.name = name
        self.synced = asyncio.Event()
        self._sources: dict[str, Informer] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._handlers: list[Handler] = []
        self._running = False

    def on_change(self, handler: Handler) -> None:
        self._handlers.append(handler)
        for source in self._sources.values():
            source.on_change(handler)

    def add(self, key: str, informer: Informer) -> None:
        """`informer` as the source named `key`, running from now on if the union runs."""
        if key in self._sources:
            raise ValueError(f"{self.name}: source {key} is there already")
        for handler in self._handlers:
            informer.on_change(handler)
        self._sources[key] = informer
        if self._running:
            self._tasks[key] = asyncio.get_running_loop().create_task(informer.run())

    async def run(self) -> None:
        self._running = True
        for key, informer in self._sources.items():
            self._tasks[key] = asyncio.get_running_loop().create_task(informer.run())
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            self._running = False
            for task in self._tasks.values():
                task.cancel()
            self._tasks.clear()

    def remove(self, key: str) -> None:
        """Stop the source named `key`; its objects leave the union."""
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
        informer = self._sources.pop(key, None)
        if informer is None:
            return
        for object_key in list(informer.cache):
            informer._notify("DELETED", object_key, None, informer.cache.get(object_key))

    def source(self, key: str) -> Informer | None:
        return self._sources.get(key)

    async def sync(self) -> None:
        """Wait until every present source has listed, then set `synced`."""
        for informer in list(self._sources.values()):
            await informer.synced.wait()
        self.synced.set()

    def get(self, namespace: str | None, name: str):
        for source in self._sources.values():
            found = source.get(namespace, name)
            if found is not None:
                return found
        return None

    @property
    def cache(self) -> Mapping[Key, Any]:
        """Every source's cache at once (read-only)."""
        return ChainMap(*(source.cache for source in self._sources.values()))  # type: ignore[arg-type]

    def keys_in(self, namespace: str | None) -> list[Key]:
        return [key for source in self._sources.values() for key in source.keys_in(namespace)]


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
