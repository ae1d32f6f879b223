"""An in-memory API server (FakeCluster) and a client typed like lightkube's AsyncClient over it (FakeClient).

Modelled on controller-runtime's fake client and client-go's fake clientsets: one store per cluster keyed by
(kind, namespace, name), with the API server's rules for what the reconcilers rely on, so a reconciler runs against
it unchanged and a test asserts on the objects it leaves:

- metadata: uid, resourceVersion (one counter per cluster), creationTimestamp, generateName; a create into a
  namespace that does not exist is refused (404), into one being deleted too (403).
- errors: lightkube's ApiError built from an HTTP response carrying the API server's Status body (code, reason,
  message and details as the API server words them): 404 NotFound, 409 AlreadyExists, 409 Conflict (a stale
  resourceVersion in a patch), 422 Invalid (pod updates the API server refuses), 415 (a strategic merge patch on a
  custom resource). `fail()` makes a verb answer with any other error, once or more (client-go's reactors).
- delete: immediate, unless the object has finalizers or is a pod bound to a node that is not finished and gets a
  grace period above 0 (its own terminationGracePeriodSeconds by default): then deletionTimestamp and
  deletionGracePeriodSeconds are set and it stays, until `finish_pod()` (the kubelet) or the last finalizer goes.
  A second delete with a shorter grace period shortens it. Foreground cascading adds the foregroundDeletion
  finalizer; `collect_garbage()` is the garbage collector, run when a test says so: dependents of gone owners are
  deleted, blocking dependents of owners deleted in the foreground first, then those owners.
- patch: JSON merge patch (RFC 7386), JSON patch (RFC 6902: add, remove, replace, test), strategic merge patch
  (lists of dicts merged by the keys in STRATEGIC_MERGE_KEYS, others replaced; no $patch directives) on built-in
  kinds only. A resourceVersion in the patch is a precondition. The status subresource changes only the status, the
  main resource never does (for kinds with a status subresource: lightkube gives their class a `.Status`); the
  ephemeralcontainers subresource changes only spec.ephemeralContainers, and only by adding; the resize subresource
  only containers' resources (requests never removed), counting the pod's generation. A pod's spec changes
  only as ValidatePodUpdate allows (images, activeDeadlineSeconds lowered, tolerations added). A patch changing
  nothing writes nothing. Server-side apply is not modelled (NotImplementedError).
- replace (PUT): the whole object, its resourceVersion required and a precondition; `delete_with_uid` stands in
  for kube/ops.py's delete with a uid precondition (which goes beneath lightkube's client).
- TokenRequest (serviceaccounts/token): the ServiceAccount must exist, and the bound object (Pod or Secret) too,
  with the uid the reference names (404 and 409 otherwise, as the API server answers); tokens are opaque strings
  numbered per cluster, expiring after the requested seconds.
- Eviction (pods/eviction): the pod deleted with its grace period (no PodDisruptionBudget is modelled).
- list and watch: namespace, label selector and field selector (equalities, on any dotted path); a watch (through
  FakeListWatch, which the informers use in place of kube/clients.py's LightkubeListWatch) sees every change after
  the version it starts from, ADDED/DELETED as an object enters or leaves its selector.
- `actions`: every request, for assertions on what a reconciler asked (client-go's Actions()).

Every request yields to the event loop once, as a real one does. `settle()` waits until every watch has handed
its events over and every informer handled them, so a test reads caches that agree with the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import itertools
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import NamespacedResource, NamespacedSubResource
from lightkube.generic_resource import get_generic_resource
from lightkube.resources.core_v1 import Event, Namespace, Pod, Secret, ServiceAccount
from lightkube.types import CascadeType, PatchType

from catamaran.kube.clients import plain_object

Obj = dict[str, Any]

TERMINAL_PHASES = ("Succeeded", "Failed")
DEFAULT_POD_GRACE_SECONDS = 30
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
REPLACE = "replace"  # _patch's stand-in patch type for a PUT of the whole object
# The lists a strategic merge patch merges by key (patchMergeKey in the API's types), for the kinds the tests use.
STRATEGIC_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "conditions": "type",
    "ownerReferences": "uid",
}
REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
POD_UPDATE_FORBIDDEN = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing"
    " tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


# -- kinds ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What the API server knows of a resource type."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    resource: type  # the lightkube class of the whole object
    status_subresource: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The resource as the API server's messages name it: `pods`, `shadowpods.offloading.catamaran.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def custom(self) -> bool:
        return self.resource.__module__ == "lightkube.generic_resource"


_kinds: dict[tuple[str, str], Kind] = {}


def kind_of(res) -> tuple[Kind, str | None]:
    """The Kind of a lightkube resource class and the subresource it names (`status`, `ephemeralcontainers`)."""
    info = res._api_info
    key = (info.resource.group, info.resource.kind)
    known = _kinds.get(key)
    if known is None:
        main = res if info.action is None else _main_resource(res)
        known = _kinds[key] = Kind(
            group=info.resource.group,
            version=info.resource.version,
            kind=info.resource.kind,
            plural=info.plural,
            namespaced=issubclass(main, NamespacedResource | NamespacedSubResource),
            resource=main,
            status_subresource=hasattr(main, "Status"),
        )
    return known, info.action


def _main_resource(subresource):
    info = subresource._api_info
    main = getattr(sys.modules[subresource.__module__], info.resource.kind, None)
    if main is not None and main._api_info.action is None:
        return main
    group, version = info.resource.group, info.resource.version
    return get_generic_resource(f"{group}/{version}" if group else version, info.resource.kind)


def typed(kind: Kind, data: Obj):
    """The stored object as lightkube hands it out (validated against the kind's model)."""
    return kind.resource.from_dict(copy.deepcopy(data))


def handed_out(kind: Kind, data: Obj, plain: bool):
    """The stored object as an informer's ListWatch hands it out: typed, or plain as clients.plain_object makes it."""
    return plain_object(copy.deepcopy(data)) if plain else typed(kind, data)


# -- errors -----------------------------------------------------------------------------------------------------------


def api_error(code: int, message: str, *, reason: str | None = None, kind: Kind | None = None, name=None) -> ApiError:
    """The ApiError lightkube raises for this answer: its status decoded from the Status body of a real response."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    details: Obj = {"name": name} if name else {}
    if kind is not None:
        details.update({"group": kind.group} if kind.group else {}, kind=kind.plural)
    if details:
        body["details"] = details
    request = httpx2.Request("GET", "https://fake.invalid/")
    return ApiError(request=request, response=httpx2.Response(code, json=body, request=request))


def not_found(kind: Kind, name: str) -> ApiError:
    return api_error(404, f'{kind.qualified} "{name}" not found', kind=kind, name=name)


def invalid(kind: Kind, name: str, detail: str) -> ApiError:
    return api_error(422, f'{kind.kind} "{name}" is invalid: {detail}', kind=kind, name=name)


# -- patches ----------------------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: null removes a key, objects merge, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A merge patch whose lists named in STRATEGIC_MERGE_KEYS merge item by item on their key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise NotImplementedError(f"strategic merge patch directive {key} is not modelled")
        merge_key = STRATEGIC_MERGE_KEYS.get(key)
        if value is None:
            result.pop(key, None)
        elif merge_key and isinstance(value, list) and isinstance(result.get(key), list):
            merged = result[key]
            for item in value:
                existing = next((i for i in merged if i.get(merge_key) == item.get(merge_key)), None)
                if existing is None:
                    merged.append(copy.deepcopy(item))
                else:
                    strategic_merge_patch(existing, item)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def json_patch(target: Obj, operations: list[Obj], fail: Callable[[str], Exception]) -> Obj:
    """RFC 6902's add, remove, replace and test; `fail(message)` is raised for an operation that cannot apply."""
    for operation in operations:
        op, path = operation["op"], operation["path"]
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
        node: Any = target
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.get(part)
            if node is None:
                raise fail(f"the server rejected our request due to an error in our request: {op} {path}")
        if op == "test":
            current = node[int(last)] if isinstance(node, list) else node.get(last)
            if current != operation["value"]:
                raise fail(f"the server rejected our request due to an error in our request: test {path} failed")
        elif op in ("add", "replace"):
            if isinstance(node, list):
                if last == "-":
                    node.append(copy.deepcopy(operation["value"]))
                elif op == "add":
                    node.insert(int(last), copy.deepcopy(operation["value"]))
                else:
                    node[int(last)] = copy.deepcopy(operation["value"])
            else:
                if op == "replace" and last not in node:
                    raise fail(f"the server rejected our request due to an error in our request: replace {path}")
                node[last] = copy.deepcopy(operation["value"])
        elif op == "remove":
            if isinstance(node, list):
                node.pop(int(last))
            elif node.pop(last, KeyError) is KeyError:
                raise fail(f"the server rejected our request due to an error in our request: remove {path}")
        else:
            raise NotImplementedError(f"JSON patch operation {op} is not modelled")
    return target


def pod_update_problem(old: Obj, new: Obj) -> str | None:
    """Why the API server refuses a pod spec update (ValidatePodUpdate), for the changes the tests make."""
    before, after = old.get("spec") or {}, copy.deepcopy(new.get("spec") or {})
    was, deadline = before.get("activeDeadlineSeconds"), after.get("activeDeadlineSeconds")
    if deadline is None and was is not None:
        return 'spec.activeDeadlineSeconds: Invalid value: "null": must not update from a positive integer to nil value'
    if deadline is not None and was is not None and deadline > was:
        return f"spec.activeDeadlineSeconds: Invalid value: {deadline}: must be less than or equal to previous value"
    after["activeDeadlineSeconds"] = was
    if after.get("activeDeadlineSeconds") is None:
        after.pop("activeDeadlineSeconds", None)
    for kind in ("containers", "initContainers"):
        for container, previous in zip(after.get(kind) or [], before.get(kind) or [], strict=False):
            container["image"] = previous.get("image")
    tolerations = after.get("tolerations") or []
    if tolerations[: len(before.get("tolerations") or [])] == (before.get("tolerations") or []):
        after["tolerations"] = before.get("tolerations")
        if after["tolerations"] is None:
            after.pop("tolerations")
    return None if after == before else POD_UPDATE_FORBIDDEN


def pod_resize_problem(old: Obj, new: Obj) -> str | None:
    """Why the API server refuses a `pods/resize` (only containers' resources change, requests stay, QoS class
    aside), for the changes the tests make."""
    before, after = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
    for kind in ("containers", "initContainers"):
        for container, previous in zip(after.get(kind) or [], before.get(kind) or [], strict=False):
            was = previous.get("resources") or {}
            now = container.get("resources") or {}
            if set(was.get("requests") or {}) - set(now.get("requests") or {}):
                where = f"spec.{kind}[{previous['name']}].resources.requests"
                return f"{where}: Forbidden: resource requests cannot be removed"
            container["resources"] = was
    if after != before:
        return "spec: Forbidden: only cpu and memory resources are mutable"
    return None


# -- watches and lists ------------------------------------------------------------------------------------------------


def _path(obj: Obj, dotted: str) -> str:
    node: Any = obj
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


@dataclass
class Selection:
    """What one list or watch asks for."""

    kind: Kind
    namespace: str | None
    labels: dict | None
    fields: dict | None

    def __post_init__(self):
        for selector in (self.labels, self.fields):
            if any(not isinstance(value, str) for value in (selector or {}).values()):
                raise NotImplementedError(f"only equality selectors are modelled: {selector}")

    def matches(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if any(labels.get(key) != value for key, value in (self.labels or {}).items()):
            return False
        return all(_path(obj, key) == value for key, value in (self.fields or {}).items())


@dataclass
class Change:
    version: int
    event: str  # ADDED, MODIFIED or DELETED
    kind: Kind
    new: Obj | None
    old: Obj | None


class Watch:
    """One open watch: the changes after its start version that its selection sees, as (event, object): typed, or
    `plain`."""

    def __init__(self, cluster: FakeCluster, selection: Selection, plain: bool = False):
        self.cluster = cluster
        self.selection = selection
        self.plain = plain
        self.queue: asyncio.Queue = asyncio.Queue()
        self.offered = 0
        self.taken = 0

    def offer(self, change: Change) -> None:
        if change.kind != self.selection.kind:
            return
        was = change.old is not None and self.selection.matches(change.old)
        now = change.new is not None and self.selection.matches(change.new)
        if change.event == "DELETED":
            event, obj = ("DELETED", change.old) if was else (None, None)
        elif was and now:
            event, obj = "MODIFIED", change.new
        elif now:
            event, obj = "ADDED", change.new
        elif was:
            event, obj = "DELETED", change.new  # it left the selection: the API server sends its new state
        else:
            event, obj = None, None
        if event is not None:
            self.offered += 1
            self.queue.put_nowait((event, handed_out(change.kind, obj, self.plain)))

    @property
    def pending(self) -> bool:
        return self.offered != self.taken

    async def events(self) -> AsyncIterator[tuple[str, Any]]:
        while True:
            item = await self.queue.get()
            self.cluster.activity += 1
            yield item
            self.taken += 1  # the consumer handled it and asks for the next


class Listing:
    """A list's objects, read when iterated (as lightkube sends the request); then its `resourceVersion`."""

    def __init__(self, cluster: FakeCluster, selection: Selection, plain: bool = False):
        self.cluster = cluster
        self.selection = selection
        self.plain = plain
        self.resourceVersion = ""

    def __aiter__(self):
        return self._items()

    async def _items(self):
        self.cluster.activity += 1
        self.cluster._react("list", self.selection.kind, None, None)
        items = [handed_out(self.selection.kind, obj, self.plain) for obj in self.cluster._selected(self.selection)]
        self.resourceVersion = str(self.cluster.version)
        for item in items:
            yield item


class FakeListWatch:
    """An informer's list and watch (kube.informer.ListWatch) against a FakeCluster, through its FakeClient.

    Installed in place of kube/clients.py's LightkubeListWatch (same signature), so the real Informer classes,
    those the controllers build inside themselves included, list and watch the fake:
    `monkeypatch.setattr(catamaran.kube.informer, "LightkubeListWatch", FakeListWatch)`."""

    def __init__(
        self, client, resource, *, namespace, labels, fields, server_timeout=290, read_timeout=120.0, plain=False
    ):
        if not isinstance(client, FakeClient):
            raise TypeError(f"an informer under test was given {client!r}, not a FakeClient")
        self.cluster = client.cluster
        kind, _ = kind_of(resource)
        self.selection = Selection(kind, namespace, labels, fields)
        self.plain = plain

    def list(self) -> Listing:
        return Listing(self.cluster, self.selection, self.plain)

    @contextlib.asynccontextmanager
    async def watch(self, version: str):
        await asyncio.sleep(0)
        self.cluster._react("watch", self.selection.kind, None, None)
        watch = self.cluster._open_watch(self.selection, int(version or 0), self.plain)
        try:
            yield watch.events()
        finally:
            self.cluster._close_watch(watch)


# -- the cluster ------------------------------------------------------------------------------------------------------


@dataclass
class Action:
    """One request, as client-go's fake records them."""

    verb: str  # get, create, delete, patch (lists and watches are counted in `activity` only)
    kind: str
    namespace: str | None
    name: str | None
    subresource: str | None = None
    body: Any = None
    patch_type: PatchType | None = None
    grace_period: int | None = None
    cascade: CascadeType | None = None


@dataclass
class Reactor:
    verb: str
    kind: Kind
    subresource: str | None
    name: str | None
    error: ApiError
    times: int | None

    def catches(self, verb: str, kind: Kind, subresource: str | None, name: str | None) -> bool:
        return (
            self.verb == verb
            and self.kind == kind
            and self.subresource == subresource
            and self.name in (None, name)
            and self.times != 0
        )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeCluster:
    """One API server's objects, watches and history; `client()` talks to it."""

    name: str = "cluster"
    namespaces_must_exist: bool = True
    version: int = 0
    activity: int = 0  # requests, list reads, watch events handed over: what settle() waits to see stop
    actions: list[Action] = field(default_factory=list)
    _objects: dict[tuple, Obj] = field(default_factory=dict)
    _history: list[Change] = field(default_factory=list)
    _watches: list[Watch] = field(default_factory=list)
    _reactors: list[Reactor] = field(default_factory=list)
    _uids: Any = field(default_factory=itertools.count)

    def __post_init__(self):

        if self.namespaces_must_exist:
            self.add(Namespace, {"metadata": {"name": "default"}})

    def client(self) -> FakeClient:
        return FakeClient(self)

    # -- what tests set up and read -------------------------------------------------------------------------------

    def add(self, res, data: Obj) -> Obj:
        """Store an object as a test's starting point (controller-runtime's WithObjects): its status, uid,
        finalizers and deletionTimestamp are kept; watches see it ADDED."""
        kind, _ = kind_of(res)
        return copy.deepcopy(self._create(kind, copy.deepcopy(data), None, seed=True))

    def read(self, res, name: str, namespace: str | None = None) -> Obj | None:
        """The stored object (a copy), None when there is none."""
        kind, _ = kind_of(res)
        found = self._objects.get(self._key(kind, namespace, name))
        return copy.deepcopy(found)

    def all(self, res, namespace: str | None = None) -> list[Obj]:
        kind, _ = kind_of(res)
        return [copy.deepcopy(o) for o in self._selected(Selection(kind, namespace, None, None))]

    def update(self, res, name: str, namespace: str | None, change: Callable[[Obj], None]) -> Obj:
        """Change a stored object as another actor would (the kubelet writing a pod's status); watches see it."""
        kind, _ = kind_of(res)
        key = self._key(kind, namespace, name)
        if key not in self._objects:
            raise not_found(kind, name)
        new = copy.deepcopy(self._objects[key])
        change(new)
        return copy.deepcopy(self._commit(kind, key, new))

    def finish_pod(self, name: str, namespace: str) -> None:
        """The kubelet: a terminating pod's containers have ended, and it deletes the pod for good."""

        kind, _ = kind_of(Pod)
        key = self._key(kind, namespace, name)
        pod = self._objects.get(key)
        if pod is None or not pod["metadata"].get("deletionTimestamp"):
            raise AssertionError(f"pod {namespace}/{name} is not terminating")
        self._delete(kind, key, grace=0, cascade=None)

    def fail(self, verb: str, res, code: int, message: str, *, name: str | None = None, times: int | None = 1):
        """Answer `verb` (get, list, watch, create, delete, patch) on `res` with this error, `times` times
        (None: always). The reason is the API server's for the code."""
        kind, subresource = kind_of(res)
        error = api_error(code, message, kind=kind, name=name)
        self._reactors.insert(0, Reactor(verb, kind, subresource, name, error, times))

    def requests(self, verb: str, res=None) -> list[Action]:
        """The recorded requests of one verb (and kind)."""
        kind = kind_of(res)[0].kind if res is not None else None
        return [a for a in self.actions if a.verb == verb and kind in (None, a.kind)]

    def events(self, namespace: str | None = None) -> list[Obj]:

        return self.all(Event, namespace)

    def collect_garbage(self) -> None:
        """The garbage collector, until it has nothing left to do: dependents whose owners are all gone are deleted
        (as a background delete would), so are those of an owner deleted in the foreground, which goes once its
        blocking ones (blockOwnerDeletion) are gone; an owner deleted with orphan lets its dependents go first."""
        while self._collect_once():
            pass

    # -- the API server -------------------------------------------------------------------------------------------

    def _key(self, kind: Kind, namespace: str | None, name: str) -> tuple:
        return (kind.group, kind.kind, namespace if kind.namespaced else None, name)

    def _selected(self, selection: Selection) -> list[Obj]:
        kind = selection.kind
        found = [
            (namespace or "", name, obj)
            for (group, kind_name, namespace, name), obj in self._objects.items()
            if (group, kind_name) == (kind.group, kind.kind) and selection.matches(obj)
        ]
        return [obj for _, _, obj in sorted(found, key=lambda entry: entry[:2])]

    def _react(self, verb: str, kind: Kind, subresource: str | None, name: str | None) -> None:
        for reactor in self._reactors:
            if reactor.catches(verb, kind, subresource, name):
                if reactor.times is not None:
                    reactor.times -= 1
                raise reactor.error

    def _request(self, action: Action, kind: Kind, subresource: str | None = None) -> None:
        self.activity += 1
        self.actions.append(action)
        self._react(action.verb, kind, subresource, action.name)

    def _token_request(self, request: Obj, account: str, namespace: str) -> Obj:
        kind, _ = kind_of(ServiceAccount)
        self._request(Action("create", kind.kind, namespace, account, "token", body=request), kind, "token")
        self._existing(kind, namespace, account)
        spec = request.get("spec") or {}
        bound = spec.get("boundObjectRef")
        if bound:
            res = {"Pod": Pod, "Secret": Secret}[bound["kind"]]
            _, found = self._existing(kind_of(res)[0], namespace, bound["name"])
            if bound.get("uid") and bound["uid"] != found["metadata"]["uid"]:
                raise api_error(
                    409,
                    f"the UID in the bound object reference ({bound['uid']}) does not match the UID in record. The"
                    " object might have been deleted and then recreated",
                    reason="Conflict",
                )
        seconds = int(spec.get("expirationSeconds") or 3600)
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
        token = f"{self.name}-token-{next(self._uids)}"
        return {**request, "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}

    def _evict(self, name: str, namespace: str) -> None:
        """The Eviction API without PodDisruptionBudgets (none is modelled): the pod deleted with its grace period."""
        kind, _ = kind_of(Pod)
        self._request(Action("create", kind.kind, namespace, name, "eviction"), kind, "eviction")
        key, _ = self._existing(kind, namespace, name)
        self._delete(kind, key, None, None)

    def _open_watch(self, selection: Selection, version: int, plain: bool = False) -> Watch:
        self.activity += 1
        watch = Watch(self, selection, plain)
        for change in self._history:
            if change.version > version:
                watch.offer(change)
        self._watches.append(watch)
        return watch

    def _close_watch(self, watch: Watch) -> None:
        self.activity += 1
        with contextlib.suppress(ValueError):
            self._watches.remove(watch)

    def _commit(self, kind: Kind, key: tuple, new: Obj | None) -> Obj | None:
        """Store (or with None remove) an object under a new resourceVersion, and tell the watches."""
        old = self._objects.get(key)
        self.version += 1
        if new is None:
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self.version)
            del self._objects[key]
            change = Change(self.version, "DELETED", kind, None, gone)
        else:
            new["metadata"]["resourceVersion"] = str(self.version)
            self._objects[key] = new
            change = Change(self.version, "ADDED" if old is None else "MODIFIED", kind, new, old)
        self._history.append(change)
        for watch in list(self._watches):
            watch.offer(change)
        return new

    def _create(self, kind: Kind, data: Obj, namespace: str | None, seed: bool = False) -> Obj:
        meta = data.setdefault("metadata", {})
        if kind.namespaced:
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise api_error(
                    400, "the namespace of the provided object does not match the namespace sent on the request"
                )
            namespace = meta.get("namespace") or namespace
            if not namespace:
                raise ValueError(f"a {kind.kind} needs a namespace")
            meta["namespace"] = namespace
        else:
            namespace = None
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(kind, "", "metadata.name: Required value: name or generateName is required")
            meta["name"] = f"{meta['generateName']}{next(self._uids):05x}"
        name = meta["name"]
        if not seed:
            if meta.get("resourceVersion"):
                raise api_error(500, "resourceVersion should not be set on objects to be created")
            for dropped in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "creationTimestamp"):
                meta.pop(dropped, None)
            if kind.status_subresource:
                data.pop("status", None)
                if kind.kind == "Pod" and not kind.group:
                    data["status"] = {"phase": "Pending"}
        if namespace is not None and self.namespaces_must_exist:
            home = self._objects.get(self._key(kind_of(Namespace)[0], None, namespace))
            if home is None:
                raise api_error(404, f'namespaces "{namespace}" not found', kind=kind_of(Namespace)[0], name=namespace)
            if home["metadata"].get("deletionTimestamp") and not seed:
                raise api_error(
                    403,
                    f'{kind.qualified} "{name}" is forbidden: unable to create new content in namespace {namespace}'
                    " because it is being terminated",
                    kind=kind,
                    name=name,
                )
        key = self._key(kind, namespace, name)
        if key in self._objects:
            raise api_error(
                409, f'{kind.qualified} "{name}" already exists', reason="AlreadyExists", kind=kind, name=name
            )
        data["apiVersion"], data["kind"] = kind.api_version, kind.kind
        meta.setdefault("uid", f"{self.name}-uid-{next(self._uids)}")
        meta.setdefault("creationTimestamp", _now())
        return self._commit(kind, key, data)

    def _existing(self, kind: Kind, namespace: str | None, name: str) -> tuple[tuple, Obj]:
        key = self._key(kind, namespace, name)
        found = self._objects.get(key)
        if found is None:
            raise not_found(kind, name)
        return key, found

    def _delete(self, kind: Kind, key: tuple, grace: int | None, cascade: CascadeType | None) -> None:
        obj = copy.deepcopy(self._objects[key])
        meta, spec = obj["metadata"], obj.get("spec") or {}
        if grace is not None and grace < 0:
            raise invalid(kind, meta["name"], f"metadata.deletionGracePeriodSeconds: Invalid value: {grace}")
        pod = (kind.group, kind.kind) == ("", "Pod")
        if pod:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_SECONDS) if grace is None else grace
            finished = (obj.get("status") or {}).get("phase") in TERMINAL_PHASES
            graceful = grace > 0 and bool(spec.get("nodeName")) and not finished
        else:
            grace, graceful = 0, False
        finalizers = list(meta.get("finalizers") or [])
        policy = {CascadeType.FOREGROUND: FOREGROUND, CascadeType.ORPHAN: ORPHAN}.get(cascade)
        if meta.get("deletionTimestamp"):
            # Already going: a shorter grace period shortens the wait, nothing else changes.
            if pod and grace < (meta.get("deletionGracePeriodSeconds") or 0):
                if grace == 0 and not finalizers:
                    self._commit(kind, key, None)
                else:
                    meta["deletionGracePeriodSeconds"] = grace
                    self._commit(kind, key, obj)
            return
        if policy and policy not in finalizers:
            finalizers.append(policy)
        if not graceful and not finalizers:
            self._commit(kind, key, None)
            return
        meta["deletionTimestamp"] = _now()
        meta["deletionGracePeriodSeconds"] = grace if graceful else 0
        if finalizers:
            meta["finalizers"] = finalizers
        self._commit(kind, key, obj)

    def _patch(self, kind: Kind, subresource: str | None, key: tuple, body: Any, patch_type: PatchType) -> Obj:
        old = self._objects[key]
        name = old["metadata"]["name"]
        new = copy.deepcopy(old)
        if patch_type == PatchType.APPLY:
            raise NotImplementedError("server-side apply is not modelled")
        if patch_type == REPLACE:
            if not (body.get("metadata") or {}).get("resourceVersion"):
                raise invalid(
                    kind, name, "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                )
            new = copy.deepcopy(body)
        elif patch_type == PatchType.JSON:
            new = json_patch(new, body, lambda message: api_error(422, message, kind=kind, name=name))
        elif patch_type == PatchType.STRATEGIC:
            if kind.custom:
                raise api_error(
                    415,
                    "the body of the request was in an unknown format - accepted media types include:"
                    " application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                )
            new = strategic_merge_patch(new, body)
        else:
            new = merge_patch(new, body)
        wanted_version = ((body if isinstance(body, dict) else {}).get("metadata") or {}).get("resourceVersion")
        if wanted_version and wanted_version != old["metadata"]["resourceVersion"]:
            raise api_error(
                409,
                f'Operation cannot be fulfilled on {kind.qualified} "{name}": the object has been modified; please'
                " apply your changes to the latest version and try again",
                kind=kind,
                name=name,
            )
        if subresource == "status":
            result = copy.deepcopy(old)
            result["status"] = new.get("status")
            if result["status"] is None:
                result.pop("status")
        elif subresource == "ephemeralcontainers":
            result = copy.deepcopy(old)
            before = (old.get("spec") or {}).get("ephemeralContainers") or []
            after = (new.get("spec") or {}).get("ephemeralContainers") or []
            if after[: len(before)] != before:
                raise invalid(
                    kind, name, "spec.ephemeralContainers: Forbidden: existing ephemeral containers may not be changed"
                )
            result.setdefault("spec", {})["ephemeralContainers"] = after
        elif subresource == "resize":
            result = copy.deepcopy(old)
            if problem := pod_resize_problem(old, new):
                raise invalid(kind, name, problem)
            for kind_name in ("containers", "initContainers"):
                for container, changed in zip(
                    result["spec"].get(kind_name) or [], new["spec"].get(kind_name) or [], strict=False
                ):
                    container["resources"] = changed.get("resources") or {}
            if result != old:
                result["metadata"]["generation"] = int(old["metadata"].get("generation") or 1) + 1
        elif subresource is None:
            result = new
            for immutable in ("uid", "name", "namespace", "creationTimestamp", "deletionTimestamp", "resourceVersion"):
                if immutable in old["metadata"]:
                    result["metadata"][immutable] = old["metadata"][immutable]
                else:
                    result["metadata"].pop(immutable, None)
            if kind.status_subresource:
                result.pop("status", None)
                if "status" in old:
                    result["status"] = copy.deepcopy(old["status"])
            if (kind.group, kind.kind) == ("", "Pod") and (problem := pod_update_problem(old, result)):
                raise invalid(kind, name, problem)
            added = set(result["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if old["metadata"].get("deletionTimestamp") and added:
                raise invalid(
                    kind,
                    name,
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                )
        else:
            raise NotImplementedError(f"the {subresource} subresource is not modelled")
        if result == old:
            return old  # nothing changed: no write, no new resourceVersion, no event
        if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            pod_terminating = (kind.group, kind.kind) == ("", "Pod") and result["metadata"].get(
                "deletionGracePeriodSeconds"
            )
            if not pod_terminating:
                self._commit(kind, key, None)
                return result
        return self._commit(kind, key, result)

    def _collect_once(self) -> bool:
        by_uid = {obj["metadata"]["uid"]: obj for obj in self._objects.values()}
        for key, obj in list(self._objects.items()):
            meta = obj["metadata"]
            refs = meta.get("ownerReferences") or []
            if not refs:
                continue
            kind = _kinds[key[:2]]
            owners = [by_uid.get(ref["uid"]) for ref in refs]
            orphaning = [
                ref
                for ref, owner in zip(refs, owners, strict=True)
                if owner and ORPHAN in _finalizers(owner, deleting=True)
            ]
            if orphaning:
                kept = copy.deepcopy(obj)
                kept["metadata"]["ownerReferences"] = [r for r in refs if r not in orphaning] or None
                if kept["metadata"]["ownerReferences"] is None:
                    del kept["metadata"]["ownerReferences"]
                self._commit(kind, key, kept)
                return True
            if meta.get("deletionTimestamp"):
                continue
            # An owner deleted in the foreground has all its dependents deleted; it waits for the blocking ones.
            foreground = any(owner and FOREGROUND in _finalizers(owner, deleting=True) for owner in owners)
            if foreground or all(owner is None for owner in owners):
                self._delete(kind, key, grace=None, cascade=None)
                return True
        for key, obj in list(self._objects.items()):
            uid = obj["metadata"]["uid"]
            for policy in (FOREGROUND, ORPHAN):
                if policy not in _finalizers(obj, deleting=True):
                    continue
                dependents = [
                    other
                    for other in self._objects.values()
                    for ref in other["metadata"].get("ownerReferences") or []
                    if ref["uid"] == uid and (policy == ORPHAN or ref.get("blockOwnerDeletion"))
                ]
                if dependents:
                    continue
                released = copy.deepcopy(obj)
                released["metadata"]["finalizers"] = [f for f in _finalizers(obj) if f != policy]
                if released["metadata"]["finalizers"]:
                    self._commit(_kinds[key[:2]], key, released)
                else:
                    self._commit(_kinds[key[:2]], key, None)
                return True
        return False


def _finalizers(obj: Obj, deleting: bool = False) -> list[str]:
    meta = obj["metadata"]
    if deleting and not meta.get("deletionTimestamp"):
        return []
    return list(meta.get("finalizers") or [])


class FakeClient:
    """The verbs of lightkube's AsyncClient the controllers use, against a FakeCluster: typed objects in and out."""

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster

    def __repr__(self) -> str:
        return f"FakeClient({self.cluster.name})"

    async def get(self, res, name: str, *, namespace: str | None = None):
        await asyncio.sleep(0)
        kind, subresource = kind_of(res)
        self.cluster._request(Action("get", kind.kind, namespace, name, subresource), kind, subresource)
        _, found = self.cluster._existing(kind, namespace, name)
        return typed(kind, found)

    def list(self, res, *, namespace=None, chunk_size=None, labels=None, fields=None) -> Listing:
        kind, _ = kind_of(res)
        return Listing(self.cluster, Selection(kind, None if namespace == "*" else namespace, labels, fields))

    async def create(self, obj, name=None, *, namespace=None, field_manager=None, dry_run=False):
        await asyncio.sleep(0)
        if name is not None and type(obj)._api_info.action == "token" and not dry_run:
            return type(obj).from_dict(self.cluster._token_request(obj.to_dict(), name, namespace))
        if name is not None and type(obj)._api_info.action == "eviction" and not dry_run:
            return self.cluster._evict(name, namespace)
        if name is not None or dry_run:
            raise NotImplementedError(
                "creating another subresource than a token or an eviction, or a dry run, is not modelled"
            )
        kind, _ = kind_of(type(obj))
        data = obj.to_dict()
        meta = data.get("metadata") or {}
        self.cluster._request(
            Action("create", kind.kind, meta.get("namespace") or namespace, meta.get("name"), body=data), kind
        )
        return typed(kind, self.cluster._create(kind, copy.deepcopy(data), namespace))

    async def apply(self, obj, name=None, *, namespace=None, field_manager=None, force=False, dry_run=False):
        """Server-side apply, as far as the controllers rely on it: created when missing, else the applied fields
        merged in (field ownership is not modelled: one manager applies each object)."""
        await asyncio.sleep(0)
        if name is not None or dry_run:
            raise NotImplementedError("applying a subresource, or a dry run, is not modelled")
        kind, _ = kind_of(type(obj))
        data = obj.to_dict()
        meta = data.get("metadata") or {}
        namespace = meta.get("namespace") or namespace
        self.cluster._request(Action("apply", kind.kind, namespace, meta.get("name"), body=data), kind)
        if self.cluster.read(kind.resource, meta["name"], namespace) is None:
            return typed(kind, self.cluster._create(kind, copy.deepcopy(data), namespace))
        key, _ = self.cluster._existing(kind, namespace, meta["name"])
        return typed(kind, self.cluster._patch(kind, None, key, data, PatchType.MERGE))

    async def replace(self, obj, name=None, *, namespace=None, field_manager=None, dry_run=False):
        await asyncio.sleep(0)
        if dry_run:
            raise NotImplementedError("a dry run is not modelled")
        kind, _ = kind_of(type(obj))
        data = obj.to_dict()
        meta = data.get("metadata") or {}
        name, namespace = name or meta.get("name"), namespace or meta.get("namespace")
        self.cluster._request(Action("replace", kind.kind, namespace, name, body=data), kind)
        key, _ = self.cluster._existing(kind, namespace, name)
        return typed(kind, self.cluster._patch(kind, None, key, data, REPLACE))

    async def delete(self, res, name: str, *, namespace=None, grace_period=None, cascade=None, dry_run=False):
        await asyncio.sleep(0)
        if dry_run:
            raise NotImplementedError("a dry run is not modelled")
        kind, _ = kind_of(res)
        action = Action("delete", kind.kind, namespace, name, grace_period=grace_period, cascade=cascade)
        self.cluster._request(action, kind)
        key, _ = self.cluster._existing(kind, namespace, name)
        self.cluster._delete(kind, key, grace_period, cascade)

    async def patch(
        self,
        res,
        name: str,
        obj,
        *,
        namespace=None,
        patch_type=PatchType.STRATEGIC,
        field_manager=None,
        force=False,
        dry_run=False,
    ):
        await asyncio.sleep(0)
        if dry_run:
            raise NotImplementedError("a dry run is not modelled")
        kind, subresource = kind_of(res)
        body = obj.to_dict() if hasattr(obj, "to_dict") else copy.deepcopy(obj)
        action = Action("patch", kind.kind, namespace, name, subresource, body=body, patch_type=patch_type)
        self.cluster._request(action, kind, subresource)
        key, _ = self.cluster._existing(kind, namespace, name)
        return typed(kind, self.cluster._patch(kind, subresource, key, body, patch_type))


async def delete_with_uid(client: FakeClient, resource, name: str, namespace: str, uid: str) -> None:
    """kube/ops.py's delete_with_uid against a fake: 409 when the object of that name is another one."""
    kind, _ = kind_of(resource)
    found = client.cluster.read(resource, name, namespace)
    if found is not None and found["metadata"]["uid"] != uid:
        raise api_error(
            409,
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {found['metadata']['uid']}",
            reason="Conflict",
            kind=kind,
            name=name,
        )
    await client.delete(resource, name, namespace=namespace)


async def settle(*clusters: FakeCluster, quiet_rounds: int = 3, limit: int = 100_000) -> None:
    """Run the event loop until the clusters see no request and every watch has been read to its end for
    `quiet_rounds` turns in a row: informers started meanwhile have listed, and every handler has run."""
    quiet = 0
    for _ in range(limit):
        before = sum(c.activity for c in clusters)
        await asyncio.sleep(0)
        busy = any(w.pending for c in clusters for w in c._watches)
        if busy or sum(c.activity for c in clusters) != before:
            quiet = 0
        else:
            quiet += 1
            if quiet >= quiet_rounds:
                return
    raise AssertionError("the fake clusters never settled")


# -- expectations -----------------------------------------------------------------------------------------------------


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()  # expected: no such object, or no such key (or a null one)
PRESENT = object()  # expected: some value, whatever it is


def assert_matches(actual: Any, expected: Any, path: str = "") -> None:
    """`actual` has what `expected` says: a dict's keys (others may be there too), a list item by item (as many),
    ABSENT nothing, PRESENT anything, a callable a value it accepts, anything else itself."""
    where = path or "the object"
    if expected is ABSENT:
        assert actual is None, f"{where}: expected nothing, found {actual!r}"
    elif expected is PRESENT:
        assert actual is not None, f"{where}: expected a value, found none"
    elif callable(expected):
        assert expected(actual), f"{where}: {actual!r} is not what {getattr(expected, '__name__', expected)} wants"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, found {actual!r}"
        for key, value in expected.items():
            assert_matches(actual.get(key), value, f"{path}.{key}" if path else key)
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, found {actual!r}"
        assert len(actual) == len(expected), f"{where}: expected {expected!r}, found {actual!r}"
        for index, (item, wanted) in enumerate(zip(actual, expected, strict=True)):
            assert_matches(item, wanted, f"{path}[{index}]")
    else:
        assert actual == expected, f"{where}: expected {expected!r}, found {actual!r}"
