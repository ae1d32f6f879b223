"""The virtual kubelet's API server (vk/kubelet/server.py): one route table, the verb each route needs."""

from __future__ import annotations

import pytest

from catamaran.vk.kubelet.http import HttpError, Request
from tests.unit.vk.kubelet.kubelet_requests import NODE


def test_one_route_table_decides_paths_methods_and_metrics_labels():
    from catamaran.vk.kubelet.server import ROUTES, KubeletServer

    assert ROUTES["exec"].matches(["ns", "pod", "app"])
    assert ROUTES["exec"].matches(["ns", "pod", "uid", "app"])
    assert not ROUTES["containerLogs"].matches(["ns", "pod"])
    assert ROUTES["stats"].matches(["summary"])
    assert not ROUTES["stats"].matches(["container"])
    assert "DELETE" not in ROUTES["pods"].methods
    assert ROUTES["portForward"].methods >= {"GET", "POST"}  # SPDY upgrades POST, WebSocket upgrades GET
    for route in ROUTES.values():
        assert callable(getattr(KubeletServer, route.serve)), route


# -- what the kubelet API asks of its callers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "verb"),
    [
        ("exec", "create"),
        ("attach", "create"),
        ("portForward", "create"),
        ("containerLogs", "get"),
        ("stats", "get"),
        ("metrics", "get"),
        ("pods", "get"),
        ("healthz", "get"),
    ],
)
def test_each_route_needs_its_own_verb_whatever_the_method(endpoint, verb):
    from catamaran.vk.kubelet.server import ROUTES

    assert ROUTES[endpoint].verb == verb


def test_paths_of_no_route_such_as_run_need_create():
    from catamaran.vk.kubelet.server import ROUTES, UNROUTED_VERB

    assert "run" not in ROUTES
    assert UNROUTED_VERB == "create"


class ReviewingClient:
    """The consumer's API server answering TokenReviews (every token is `viewer`'s) and SubjectAccessReviews
    (`viewer` holds only `get` on every node subresource)."""

    def __init__(self):
        self.reviews: list[dict] = []

    async def create(self, review):
        if review.kind == "TokenReview":
            return {"status": {"authenticated": True, "user": {"username": "viewer", "groups": ["viewers"]}}}
        attributes = review.spec.resourceAttributes
        self.reviews.append({"verb": attributes.verb, "subresource": attributes.subresource})
        return {"status": {"allowed": attributes.verb == "get"}}


class Written:
    def __init__(self):
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


def kubelet_server(client: ReviewingClient):
    import socket
    from types import SimpleNamespace

    from catamaran.vk.kubelet.server import KubeletServer

    peering = SimpleNamespace(local=client, node_name=NODE, provider_id="p", events=None)
    return KubeletServer(
        peering,
        socket.socket(),
        certificate=None,
        channel=None,
        local_pod=lambda namespace, name: None,
        pods_on_node=list,
        twin_of=lambda namespace: None,
        node_published=None,
    )


def test_a_websocket_get_to_exec_needs_create_on_the_nodes_proxy():
    import asyncio

    client = ReviewingClient()
    server = kubelet_server(client)
    headers = {
        "authorization": ["Bearer token-of-viewer"],
        "connection": ["Upgrade"],
        "upgrade": ["websocket"],
        "sec-websocket-protocol": ["v5.channel.k8s.io"],
    }
    upgrade = Request("GET", "/exec/shop/web/app", {"command": ["sh"], "output": ["1"]}, headers, None, None)
    with pytest.raises(HttpError) as refused:
        asyncio.run(server.handle(upgrade))
    assert refused.value.status == 403
    assert client.reviews == [{"verb": "create", "subresource": "proxy"}]
    assert "verb=create" in refused.value.message
    server.sock.close()


def test_a_stats_post_needs_only_get():
    import asyncio
    import json

    client = ReviewingClient()
    server = kubelet_server(client)
    written = Written()
    post = Request("POST", "/stats/summary", {}, {"authorization": ["Bearer token-of-viewer"]}, None, written)
    asyncio.run(server.handle(post))
    assert client.reviews == [{"verb": "get", "subresource": "stats"}]
    assert json.loads(written.data.split(b"\r\n\r\n", 1)[1])["node"]["nodeName"] == NODE
    server.sock.close()
