"""The consumer's own ranges, read from what the credential allows (vk/local_ranges.py)."""

from __future__ import annotations

import asyncio

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.networking_v1 import ServiceCIDR

from catamaran.vk.local_ranges import LocalRanges
from tests.unit.vk.provider_reports import API_SERVER


class ProbedClient:
    """Answers the one-item lists LocalRanges tries: forbidden, not served, or one object."""

    def __init__(self, answers: dict):
        self.answers = answers

    def list(self, resource, *, chunk_size):
        assert chunk_size == 1
        answer = self.answers[resource]

        async def listing():
            if isinstance(answer, int):
                raise api_error(answer)
            for item in answer:
                yield item

        return listing()


def api_error(code: int) -> ApiError:
    class Response:
        status_code = code

        def json(self):
            return {"kind": "Status", "code": code, "message": "no", "status": "Failure"}

    return ApiError(response=Response())


class Watched:
    """Stands for one of the reflection's cluster-wide informers."""

    def __init__(self, objects: dict):
        self.objects, self.handlers, self.synced = objects, [], asyncio.Event()

    def get(self, namespace, name):
        return self.objects.get((namespace, name))

    def on_change(self, handler):
        self.handlers.append(handler)

    def change(self, key, new):
        old, self.objects[key] = self.objects.get(key), new
        for handler in self.handlers:
            handler("MODIFIED", key, new, old)


def test_the_consumers_ranges_are_read_from_what_the_credential_allows():
    """Deployment mode: nodes are forbidden, ServiceCIDRs not served; the kubernetes Service comes from the
    reflection's watches. Listeners hear once when all has listed, then on each change."""
    kubernetes = ("default", "kubernetes")
    services = Watched({kubernetes: {"spec": {"clusterIP": "10.0.0.1"}}})
    slices = Watched({kubernetes: {"endpoints": [{"addresses": [API_SERVER]}]}})
    ranges = LocalRanges(ProbedClient({Node: 403, ServiceCIDR: 404}), "10.0.0.9")
    ranges.follow_kubernetes_service(services, slices)
    told = []
    ranges.listeners.append(lambda: told.append({what for _, what in ranges.ranges()}))

    async def scenario():
        for informer in (services, slices):
            informer.synced.set()
        await asyncio.wait_for(ranges._run(), 5)
        slices.change(("default", "other"), {"endpoints": [{"addresses": ["10.9.9.9"]}]})  # not the API server's
        slices.change(kubernetes, {"endpoints": [{"addresses": ["172.31.40.166"]}]})

    asyncio.run(scenario())
    assert ranges.unread == ["Nodes (forbidden to this credential)", "ServiceCIDRs (not served by this API server)"]
    assert len(told) == 2
    assert told[0] == {"virtual node's address", "kubernetes Service's cluster IP", "API server's address"}
    assert ("172.31.40.166/32", "API server's address") in {(str(n), what) for n, what in ranges.ranges()}
