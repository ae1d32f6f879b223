"""The informer's list and watch: relists, bookmarks, silent watches, and how it backs off and says it is failing.

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
from lightkube.models.meta_v1 import ObjectMeta, Status
from lightkube.resources.core_v1 import ConfigMap
from prometheus_client import REGISTRY

from catamaran.kube import informer as informers
from catamaran.kube.informer import FAILING_AFTER, Informer


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
