"""kube/request_builder.py builds the very request httpx2's own build_request makes of lightkube's BasicRequest: same
method, URL, headers, body and timeout, for every kind of call the controller makes and for server addresses with a
path prefix or an IPv6 host. The builder reaches into httpx2's parsed URL, so this is where a change there shows."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from lightkube import KubeConfig
from lightkube.resources.core_v1 import Namespace, Pod, Secret
from lightkube.resources.rbac_authorization_v1 import ClusterRole
from lightkube.types import PatchType

from catamaran.kube import request_builder
from catamaran.kube.clients import async_client, generic_client, http_client
from catamaran.kube.resources import ShadowPod


def _config(server: str) -> KubeConfig:
    return KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "home"}}],
            "current-context": "x",
        }
    )


POD = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}}, "spec": {"containers": []}}

CALLS = [
    ("get", {"res": Pod, "name": "p", "namespace": "ns"}),
    ("get", {"res": ClusterRole, "name": "system:node:worker-1"}),
    ("post", {"obj": Pod.from_dict(POD)}),
    ("post", {"res": ShadowPod, "obj": ShadowPod.from_dict({**POD, "spec": {"pod": {}}}), "namespace": "ns"}),
    (
        "patch",
        {
            "res": Pod.Status,
            "name": "p",
            "namespace": "ns",
            "obj": {"status": {"phase": "Running"}},
            "headers": {"Content-Type": PatchType.MERGE.value},
        },
    ),
    ("put", {"obj": Secret.from_dict({"metadata": {"name": "s", "namespace": "ns"}, "data": {"k": "dg=="}})}),
    ("delete", {"res": Namespace, "name": "n"}),
    (
        "list",
        {
            "res": Pod,
            "namespace": "ns",
            "params": {
                "labelSelector": "app in (a, b),tier!=db,!gone",
                "fieldSelector": "spec.nodeName=vk-1,status.phase!=Failed",
                "limit": 500,
                "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ==",
            },
        },
    ),
    ("list", {"res": Pod, "namespace": "*", "watch": True, "params": {"allowWatchBookmarks": True}}),
]


@pytest.mark.parametrize(
    "server", ["https://10.0.0.1:6443", "https://api.example:443/prefix/path", "https://[fd00::1]"]
)
@pytest.mark.parametrize(("method", "call"), CALLS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CALLS)])
def test_builds_what_httpx2_builds(server, method, call):
    async def scenario():
        client = async_client(_config(server), None, "tests")
        generic = generic_client(client)
        http = http_client(client)
        basic = generic.prepare_request(method, **call)
        built = request_builder.build(http, basic)
        # lightkube's own build, as it was before install() replaced it on this client
        reference = type(generic).build_adapter_request(generic, basic)
        assert (built.method, str(built.url)) == (reference.method, str(reference.url))
        assert built.url == reference.url
        assert built.url.path == reference.url.path
        assert built.url.params == reference.url.params
        assert built.headers.multi_items() == reference.headers.multi_items()
        assert built.content == reference.content
        assert built.extensions == reference.extensions
        await client.close()

    asyncio.run(scenario())


def test_a_timeout_of_the_call_replaces_the_clients():
    async def scenario():
        client = async_client(_config("https://10.0.0.1:6443"), None, "tests", timeout=15)
        basic = generic_client(client).prepare_request("get", res=Pod, name="p", namespace="ns")
        basic.timeout = httpx2.Timeout(3)
        assert request_builder.build(http_client(client), basic).extensions["timeout"]["read"] == 3
        basic.timeout = None
        assert request_builder.build(http_client(client), basic).extensions["timeout"]["read"] == 15
        await client.close()

    asyncio.run(scenario())


def test_the_client_sends_what_the_builder_builds(monkeypatch):
    """install() is in effect on every client async_client makes: the request that reaches the transport is the
    builder's, with its URL (a prefix and a quoted name show it) and the client's credentials."""
    seen: list[httpx2.Request] = []
    built: list[httpx2.Request] = []
    build = request_builder.build
    monkeypatch.setattr(request_builder, "build", lambda http, basic: built.append(build(http, basic)) or built[-1])

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p q"}})

    async def scenario():
        client = async_client(_config("https://api.example/prefix"), None, "tests")
        http_client(client)._transport = httpx2.MockTransport(answer)
        pod = await client.get(Pod, "p q", namespace="ns")
        assert pod.metadata.name == "p q"
        assert str(seen[0].url) == "https://api.example/prefix/api/v1/namespaces/ns/pods/p%20q"
        assert seen[0].headers["Authorization"] == "Bearer t"
        assert seen == built
        await client.close()

    asyncio.run(scenario())
