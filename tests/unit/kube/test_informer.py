"""The informer (kube/informer.py): relists, bookmarks, silent watches, how it backs off and says it is failing,
and its views (one pod watch for the manager: the ShadowPod controller's pods are a view of the offers').

Time is virtual (VirtualTimeLoop): a 30 s backoff passes at once, so the tests measure waits without taking them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import selectors

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Container, PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta, Status
from lightkube.resources.core_v1 import ConfigMap, Pod
from prometheus_client import REGISTRY

from catamaran.constants import LABEL_MANAGED_BY, MANAGED_BY_CATAMARAN
from catamaran.kube import informer as informers
from catamaran.kube.informer import FAILING_AFTER, Informer
from catamaran.provider.offers import summarize_pod
from catamaran.provider.shadowpods import _managed, compact_pod


class _SkippingSelector(selectors.DefaultSelector):
    """Never sleeps while a timer is pending: the loop's clock jumps to it instead."""

    def __init__(self, loop: VirtualTimeLoop):
        super().__init__()
        self.loop = loop

    def select(self, timeout=None):
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            return super().select(None)
        self.loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when every task waits, straight to the next timer."""

    def __init__(self):
        self.now = 0.0
        super().__init__(_SkippingSelector(self))

    def time(self) -> float:
        return self.now


def in_virtual_time(scenario):
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(scenario)


async def run_for(informer: Informer, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await informer.run()


# -- an API server behind lightkube's own client, through the informer's real list and watch -----------------------

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://api.test:6443"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "c",
}


def lightkube_client(handler) -> AsyncClient:
    config = KubeConfig.from_dict(KUBECONFIG).get()
    return AsyncClient(config=config, transport=httpx2.MockTransport(handler), trust_env=False)


def config_map_data(name: str, version: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version},
    }


def status_data(code: int, reason: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": reason,
    }


def listing_data(version: str, *items: dict) -> dict:
    return {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": list(items)}


def is_watch(request: httpx2.Request) -> bool:
    return request.url.params.get("watch") in ("true", "1")


class RefusingWatches:
    """An API server whose LIST answers and whose WATCH is refused with 403 (rights lost in an RBAC change)."""

    def __init__(self):
        self.lists: list[float] = []
        self.watches: list[float] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        now = asyncio.get_running_loop().time()
        if is_watch(request):
            self.watches.append(now)
            return httpx2.Response(403, json=status_data(403, "Forbidden"))
        self.lists.append(now)
        return httpx2.Response(200, json=listing_data("10", config_map_data("a", "9")))


def test_a_refused_watch_backs_off_with_jitter_and_makes_the_informer_failing():
    server = RefusingWatches()
    told = []

    async def scenario():
        informer = Informer(lightkube_client(server), ConfigMap, name="refused", namespace="default")
        informers.failure_listeners.append(told.append)
        task = asyncio.get_running_loop().create_task(informer.run())
        try:
            await asyncio.sleep(10)
            early = (len(server.lists), informer.consecutive_failures, informer.failing)
            await asyncio.sleep(590)
            return informer, early
        finally:
            task.cancel()
            informers.failure_listeners.remove(told.append)

    informer, (lists_in_10s, failures_after_10s, failing_after_10s) = in_virtual_time(scenario())
    # Before the fix: 20 LISTs in 10 s (1200 in 10 min), 1 failure in a row, never failing.
    assert lists_in_10s <= 5
    assert failures_after_10s >= FAILING_AFTER
    assert failing_after_10s
    assert told == [informer]  # once, when it started failing
    waits = [later - earlier for earlier, later in itertools.pairwise(server.lists)]
    # Doubling from 0.8 s up to 30 s, each shortened by up to half at random: never in step with other informers.
    for attempt, wait in enumerate(waits, start=1):
        ceiling = min(30.0, 0.8 * 2 ** (attempt - 1))
        assert ceiling / 2 <= wait <= ceiling + 1e-9, (attempt, wait)
    assert len({round(wait, 6) for wait in waits[-10:]}) > 1
    assert len(server.lists) == len(server.watches) <= 45
    assert informer.consecutive_failures == len(server.watches)


class ScriptedWatches:
    """An API server that answers each watch request with the next script: lines to send, then how it ends."""

    def __init__(self, listings: list[dict], watches: list[tuple[list[dict], BaseException | None]]):
        self.listings = listings
        self.watches = watches
        self.watch_requests: list[httpx2.Request] = []
        self.list_requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if not is_watch(request):
            self.list_requests.append(request)
            return httpx2.Response(200, json=self.listings.pop(0))
        self.watch_requests.append(request)
        if not self.watches:
            return httpx2.Response(200, content=forever())
        lines, end = self.watches.pop(0)
        return httpx2.Response(200, content=stream(lines, end))


async def stream(lines: list[dict], end: BaseException | None):
    for line in lines:
        yield json.dumps(line).encode() + b"\n"
    if end is not None:
        raise end


async def forever():
    await asyncio.Event().wait()
    yield b""  # pragma: no cover


def bookmark(version: str) -> dict:
    return {
        "type": "BOOKMARK",
        "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": version}},
    }


def test_the_lightkube_watch_asks_for_bookmarks_follows_them_and_restarts_a_silent_or_expired_watch():
    server = ScriptedWatches(
        listings=[listing_data("10", config_map_data("a", "9")), listing_data("30", config_map_data("a", "9"))],
        watches=[
            ([bookmark("15"), {"type": "ADDED", "object": config_map_data("b", "16")}], httpx2.ReadTimeout("silent")),
            ([bookmark("20")], None),  # ended by the server (timeoutSeconds)
            ([{"type": "ERROR", "object": status_data(410, "Expired")}], None),
        ],
    )
    seen = []
    restarted = restarts("scripted", "inactivity"), restarts("scripted", "gone")

    async def scenario():
        informer = Informer(lightkube_client(server), ConfigMap, name="scripted", labels={"app": "x"}, read_timeout=7)
        informer.on_change(lambda event, key, new, old: seen.append((event, key[1])))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                await informer.run()
        return informer

    informer = in_virtual_time(scenario())
    assert [request.url.params["resourceVersion"] for request in server.watch_requests] == ["10", "16", "20", "30"]
    first = server.watch_requests[0]
    assert first.url.path == "/api/v1/configmaps"  # no namespace: every namespace, not the kubeconfig's
    assert first.url.params["allowWatchBookmarks"] == "true"
    assert first.url.params["timeoutSeconds"] == "290"
    assert first.url.params["labelSelector"] == "app=x"
    assert first.extensions["timeout"]["read"] == 7
    assert len(server.list_requests) == 2
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "b")]
    assert informer.consecutive_failures == 0
    assert (restarts("scripted", "inactivity"), restarts("scripted", "gone")) == (restarted[0] + 1, restarted[1] + 1)


def test_a_plain_informer_lists_and_watches_dicts_as_the_api_writes_them_without_managed_fields():
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]

    def with_fields(name: str, version: str) -> dict:
        data = config_map_data(name, version)
        data["metadata"]["managedFields"] = managed
        data["data"] = {"k": name}
        return data

    server = ScriptedWatches(
        listings=[
            {**listing_data("10", with_fields("a", "8")), "metadata": {"resourceVersion": "10", "continue": "more"}},
            listing_data("10", with_fields("b", "9")),
        ],
        watches=[([{"type": "MODIFIED", "object": with_fields("a", "11")}], None)],
    )
    seen = []

    async def scenario():
        informer = Informer(lightkube_client(server), ConfigMap, name="plain", plain=True)
        informer.on_change(lambda event, key, new, old: seen.append((event, key[1], new)))
        await run_for(informer, 5)
        return informer

    informer = in_virtual_time(scenario())
    assert [request.url.params.get("continue") for request in server.list_requests] == [None, "more"]
    assert [(event, name) for event, name, _ in seen] == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a")]
    assert all(type(new) is dict and "managedFields" not in new["metadata"] for _, _, new in seen)
    assert seen[-1][2] == {**config_map_data("a", "11"), "data": {"k": "a"}}
    assert informer._versions == {("default", "a"): "11", ("default", "b"): "9"}


def restarts(informer: str, reason: str) -> float:
    return REGISTRY.get_sample_value("catamaran_watch_restarts_total", {"informer": informer, "reason": reason}) or 0


# -- the informer's own logic, against an in-memory ListWatch ---------------------------------------------------------


def config_map(name: str, version: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace="default", resourceVersion=version))


def api_error(code: int, reason: str) -> ApiError:
    return ApiError(status=Status(code=code, reason=reason, message=reason))


class Listing:
    def __init__(self, objects: list, version: str):
        self.objects, self.resourceVersion = objects, version

    async def __aiter__(self):
        for obj in self.objects:
            yield obj


class FakeListWatch:
    """kube.informer.ListWatch in memory: lists answer from `listings` in turn (the last one again once they run
    out), with (objects, version) or by raising; watch requests play `watches` in turn, then stay open and quiet.

    A watch is an exception (the request is refused) or steps: an (event, object) to deliver, a number of seconds
    to stay quiet, or an exception that ends the watch."""

    def __init__(self, listings: list, watches: list):
        self.listings = listings
        self.watches = watches
        self.lists: list[float] = []
        self.watched_from: list[str] = []

    def list(self) -> Listing:
        self.lists.append(asyncio.get_running_loop().time())
        answer = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        if isinstance(answer, BaseException):
            raise answer
        return Listing(*answer)

    @contextlib.asynccontextmanager
    async def watch(self, version: str):
        self.watched_from.append(version)
        script = self.watches.pop(0) if self.watches else [float("inf")]
        if isinstance(script, BaseException):
            raise script
        yield self._play(script)

    async def _play(self, steps):
        for step in steps:
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, float | int):
                await asyncio.sleep(step)
            else:
                yield step


def fake_informer(list_watch: FakeListWatch, name: str) -> tuple[Informer, list]:
    informer = Informer(None, ConfigMap, name=name, namespace="default", list_watch=list_watch)
    seen = []
    informer.on_change(lambda event, key, new, old: seen.append((event, key[1])))
    return informer, seen


def test_a_410_relists_at_once_and_announces_only_what_changed_meanwhile():
    fake = FakeListWatch(
        listings=[
            ([config_map("a", "1"), config_map("b", "2"), config_map("same", "3")], "10"),
            ([config_map("a", "12"), config_map("c", "13"), config_map("same", "3")], "20"),
        ],
        watches=[[("MODIFIED", config_map("a", "11")), 5, api_error(410, "Expired")]],
    )
    informer, seen = fake_informer(fake, "gone")
    in_virtual_time(run_for(informer, 60))
    assert seen == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("ADDED", "same"),
        ("MODIFIED", "a"),  # from the watch
        ("MODIFIED", "a"),  # the relist: another version
        ("ADDED", "c"),
        ("DELETED", "b"),
    ]
    assert fake.lists == [0, 5]  # no backoff: an expired version is no failure
    assert fake.watched_from == ["10", "20"]
    assert informer.consecutive_failures == 0
    assert sorted(informer.cache) == [("default", "a"), ("default", "c"), ("default", "same")]
    assert REGISTRY.get_sample_value("catamaran_cached_objects", {"informer": "gone"}) == 3  # counted when scraped


def test_bookmarks_advance_the_version_the_next_watch_starts_from():
    fake = FakeListWatch(
        listings=[([config_map("a", "1")], "10")],
        watches=[
            [("BOOKMARK", "15"), ("MODIFIED", config_map("a", "16")), ("BOOKMARK", "20")],
            [("BOOKMARK", None)],  # a bookmark without a version changes nothing
        ],
    )
    informer, seen = fake_informer(fake, "bookmarks")
    in_virtual_time(run_for(informer, 60))
    assert fake.watched_from == ["10", "20", "20"]
    assert seen == [("ADDED", "a"), ("MODIFIED", "a")]
    assert len(fake.lists) == 1


def test_a_silent_watch_is_watched_again_from_the_last_version_without_counting_as_a_failure():
    fake = FakeListWatch(
        listings=[([config_map("a", "1")], "10")],
        watches=[[("MODIFIED", config_map("a", "11")), 120, TimeoutError()]],
    )
    informer, _ = fake_informer(fake, "silent")
    restarted = restarts("silent", "inactivity")
    in_virtual_time(run_for(informer, 300))
    assert fake.watched_from == ["10", "11"]
    assert len(fake.lists) == 1
    assert informer.consecutive_failures == 0
    assert informer.watches_started == 2
    assert restarts("silent", "inactivity") == restarted + 1


def test_a_failing_list_counts_and_a_successful_list_alone_does_not_end_the_failures():
    fake = FakeListWatch(
        listings=[ConnectionRefusedError("refused"), ([], "10")], watches=[api_error(403, "Forbidden")] * 10
    )
    informer, _ = fake_informer(fake, "list-refused")
    in_virtual_time(run_for(informer, 10))  # the list refused, then lists served and their watches refused
    assert informer.consecutive_failures == len(fake.lists) >= FAILING_AFTER
    assert informer.failing
    assert informer.last_error == "403 Forbidden"


def test_a_watch_accepted_again_ends_the_failing_but_the_backoff_starts_over_only_after_two_healthy_minutes():
    refused = api_error(403, "Forbidden")
    reset = ConnectionResetError("connection reset")
    fake = FakeListWatch(
        listings=[([config_map("a", "1")], "10")],
        watches=[refused, refused, refused, [10, reset], [180, reset]],
    )
    informer, _ = fake_informer(fake, "recovering")
    changes = []

    def told(changed: Informer) -> None:
        if changed is informer:
            changes.append((asyncio.get_running_loop().time(), changed.failing))

    informers.failure_listeners.append(told)
    try:
        in_virtual_time(run_for(informer, 600))
    finally:
        informers.failure_listeners.remove(told)

    watched = [0, 0, 0, 10, 180]  # how long each watch lasted before it failed
    waits = [
        later - earlier - watch for (earlier, later), watch in zip(itertools.pairwise(fake.lists), watched, strict=True)
    ]
    ceilings = [0.8, 1.6, 3.2, 6.4, 0.8]  # 10 s of a working watch did not reset the backoff; 180 s did
    assert len(waits) == len(ceilings)
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling, (waits, ceilings)
    # failing at the third refusal, recovered when the fourth watch was accepted
    assert [failing for _, failing in changes] == [True, False]
    assert changes[0][0] == fake.lists[2]
    assert changes[1][0] == fake.lists[3]
    assert informer.consecutive_failures == 0
    assert not informer.failing
    assert informer.failing_since is None


def pod(name: str, version: str, managed: bool, phase: str = "Running") -> dict:
    """A pod as the offers' informer hands it out (plain)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN} if managed else {"app": "other"}
    return Pod(
        metadata=ObjectMeta(name=name, namespace="twin", uid=f"uid-{name}", labels=labels, resourceVersion=version),
        spec=PodSpec(containers=[Container(name="app", image="pause")], nodeName="node-1"),
        status=PodStatus(phase=phase, podIP="10.0.0.1"),
    ).to_dict()


def test_a_view_follows_its_source_and_reports_objects_entering_and_leaving_it():
    source = Informer(None, Pod, name="pods", transform=summarize_pod)
    view = source.view("managed", include=_managed, transform=compact_pod, packed=True)
    seen = []
    view.on_change(lambda event, key, new, old: seen.append((event, key[1], bool(new), bool(old))))

    source._apply("ADDED", pod("a", "1", managed=True))
    source._apply("ADDED", pod("b", "2", managed=False))
    assert set(source.cache) == {("twin", "a"), ("twin", "b")}
    assert list(view.cache) == [("twin", "a")]
    assert view.get("twin", "a") == {
        "metadata": {
            "name": "a",
            "namespace": "twin",
            "uid": "uid-a",
            "ownerReferences": None,
            "deletionTimestamp": None,
            "deletionGracePeriodSeconds": None,
            "resourceVersion": "1",
        },
        "changeable": {
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
            "annotations": {},
            "activeDeadlineSeconds": None,
        },
        "resources": {"app": {}},
        "ephemeralContainers": [],
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }

    source._apply("MODIFIED", pod("a", "3", managed=True, phase="Succeeded"))
    assert source.get("twin", "a") is None  # a finished pod holds nothing of its node or tenant
    assert view.get("twin", "a")["status"]["phase"] == "Succeeded"  # but its status still reaches the ShadowPod

    source._apply("MODIFIED", pod("b", "4", managed=True))  # relabelled: enters the view
    source._apply("MODIFIED", pod("a", "5", managed=False))  # leaves it
    source._apply("DELETED", pod("b", "6", managed=True))
    assert seen == [
        ("ADDED", "a", True, False),
        ("MODIFIED", "a", True, True),
        ("ADDED", "b", True, False),
        ("DELETED", "a", False, True),
        ("DELETED", "b", False, True),
    ]
    assert len(view.cache) == 0
    assert view.synced is source.synced


def test_a_relist_replaces_the_view_and_announces_only_differences():
    source = Informer(None, Pod, name="pods", transform=summarize_pod)
    view = source.view("managed", include=_managed, transform=compact_pod)
    source._apply("ADDED", pod("kept", "1", managed=True))
    source._apply("ADDED", pod("gone", "2", managed=True))
    seen = []
    view.on_change(lambda event, key, new, old: seen.append((event, key[1])))
    fresh = {("twin", "kept"): compact_pod(pod("kept", "1", managed=True))}
    view._replace(fresh, {("twin", "kept"): "1", ("twin", "gone"): "2"}, {("twin", "kept"): "1"})
    assert seen == [("DELETED", "gone")]
    assert list(view.cache) == [("twin", "kept")]


def test_keys_in_a_namespace_follow_the_cache_without_a_walk():
    from catamaran.kube.informer import _Cached

    cached = _Cached("pods", packed=False)
    cached._store(("a", "one"), 1)
    cached._store(("a", "two"), 2)
    cached._store(("b", "one"), 3)
    assert sorted(cached.keys_in("a")) == [("a", "one"), ("a", "two")]
    cached._drop(("a", "one"))
    assert cached.keys_in("a") == [("a", "two")]
    cached._reset({("c", "x"): 4})
    assert (cached.keys_in("a"), cached.keys_in("c")) == ([], [("c", "x")])


def test_named_handlers_enqueue_or_call_only_for_the_changes_they_admit():
    from catamaran.kube.informer import call, changed, enqueue, present

    class Queue:
        def __init__(self):
            self.added = []

        def add(self, key, delay=0):
            self.added.append((key, delay))

    queue, calls = Queue(), []
    enqueue(queue, key=lambda key: key[1], delay=1.0, when=present)("ADDED", ("ns", "a"), {"x": 1}, None)
    enqueue(queue, when=present)("DELETED", ("ns", "b"), None, {"x": 1})
    assert queue.added == [("a", 1.0)]
    call(calls.append, key=lambda key: key[0], when=changed)("MODIFIED", ("ns", "a"), {"x": 1}, {"x": 1})
    call(calls.append, key=lambda key: key[0], when=changed)("MODIFIED", ("ns", "a"), {"x": 2}, {"x": 1})
    assert calls == ["ns"]
