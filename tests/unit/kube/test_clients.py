"""API clients (kube/clients.py): a swapped token reaches requests and websocket headers, API requests are named by
verb and resource as the API server does, and a watch stream's lines are its events however its chunks fall.
"""

from __future__ import annotations

import asyncio

import httpx2
import pytest
import yaml
from lightkube import KubeConfig

from catamaran.kube.clients import BearerToken, asks_watch, async_client, bearer_token, json_lines, request_kind
from catamaran.vk.kubelet.channel import ProviderChannel
from tests.unit.kubeconfigs import kubeconfig_text


def test_swapped_token_reaches_requests_and_websocket_headers():
    async def scenario():
        # No CA: the default trust store, since building the channel's TLS context needs a real one.
        config = KubeConfig.from_dict(yaml.safe_load(kubeconfig_text("first", ca_data="")))
        client = async_client(config, None, "tests")
        token = bearer_token(client)
        assert isinstance(token, BearerToken)
        assert "first" not in repr(token)
        channel = ProviderChannel(client, config.get())
        http = client._client._client
        assert (await channel._authorization()) == {"Authorization": "Bearer first"}
        token.token = "second"
        request = http.build_request("GET", "/api")
        flow = http.auth.auth_flow(request)
        assert next(flow).headers["Authorization"] == "Bearer second"
        assert (await channel._authorization()) == {"Authorization": "Bearer second"}
        await client.close()

    asyncio.run(scenario())


def test_no_replaceable_token_for_other_credentials():
    config = yaml.safe_load(kubeconfig_text("x", ca_data=""))
    config["users"][0]["user"] = {"username": "u", "password": "p"}

    async def scenario():
        client = async_client(KubeConfig.from_dict(config), None, "tests")
        assert bearer_token(client) is None
        await client.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("method", "path", "watch", "expected"),
    [
        ("GET", "/api/v1/namespaces/a/pods", False, ("LIST", "pods")),
        ("GET", "/api/v1/namespaces/a/pods", True, ("WATCH", "pods")),
        ("GET", "/api/v1/pods", True, ("WATCH", "pods")),
        ("GET", "/api/v1/namespaces/a/pods/p", False, ("GET", "pods")),
        ("PATCH", "/api/v1/namespaces/a/pods/p/status", False, ("PATCH", "pods/status")),
        ("POST", "/apis/offloading.catamaran.io/v1alpha1/namespaces/t/shadowpods", False, ("POST", "shadowpods")),
        (
            "PATCH",
            "/apis/offloading.catamaran.io/v1alpha1/namespaces/t/shadowpods/s/status",
            False,
            ("PATCH", "shadowpods/status"),
        ),
        ("DELETE", "/api/v1/namespaces/a/pods", False, ("DELETECOLLECTION", "pods")),
        ("GET", "/api/v1/namespaces/a", False, ("GET", "namespaces")),
        ("PUT", "/api/v1/namespaces/a/finalize", False, ("PUT", "namespaces/finalize")),
        ("PATCH", "/api/v1/nodes/n/status", False, ("PATCH", "nodes/status")),
        ("GET", "/apis/coordination.k8s.io/v1", False, ("GET", "discovery")),
        ("GET", "/readyz", False, ("GET", "nonresource")),
    ],
)
def test_api_requests_are_named_by_verb_and_resource_as_the_api_server_does(method, path, watch, expected):
    assert request_kind(method, path, watch) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://h/api/v1/pods?watch=true&resourceVersion=5&allowWatchBookmarks=true",
        "https://h/api/v1/pods?labelSelector=a%3Db&watch=1",
        "https://h/api/v1/pods?allowWatchBookmarks=true&watch=false",
        "https://h/api/v1/pods?watchful=true&limit=500",
        "https://h/api/v1/namespaces/watch/pods/watch",
        "https://h/api/v1/pods",
    ],
)
def test_a_watch_is_told_from_the_query_as_httpx2_reads_it(url):
    parsed = httpx2.URL(url)
    assert asks_watch(parsed.query) == (parsed.params.get("watch") in ("true", "1"))


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b'{"a":1}\n{"b":2}\n'], [b'{"a":1}', b'{"b":2}']),
        ([b'{"a"', b":1}\n{", b'"b":', b"2}\n"], [b'{"a":1}', b'{"b":2}']),  # events split across chunks
        ([b'{"a":1}\n\n', b"\n", b'{"b":2}'], [b'{"a":1}', b'{"b":2}']),  # blank lines; the last without its newline
        ([b"x" * 70_000, b"y" * 70_000 + b"\n"], [b"x" * 70_000 + b"y" * 70_000]),  # a line longer than a chunk
        ([], []),
    ],
)
def test_a_watch_streams_lines_are_its_events_however_the_chunks_fall(chunks, lines):
    async def scenario():
        async def stream():
            for chunk in chunks:
                yield chunk

        return [line async for line in json_lines(stream())]

    assert asyncio.run(scenario()) == lines
