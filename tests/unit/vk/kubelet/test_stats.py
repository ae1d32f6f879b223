"""Pure logic of the virtual kubelet's API: request mapping, approval checks, metrics arithmetic."""

from __future__ import annotations

import base64
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from catamaran.consumer.csr import requested_node, review
from catamaran.provider.counters import container_counters, tenant_of
from catamaran.vk.kubelet.auth import subresources_for, user_from_certificate
from catamaran.vk.kubelet.certificate import csr_manifest, serving_request
from catamaran.vk.kubelet.container_logs import log_params
from catamaran.vk.kubelet.http import HttpError, Request
from catamaran.vk.kubelet.stats import (
    ContainerUsage,
    CounterRates,
    PodUsage,
    Snapshot,
    UsageIntegrator,
    counted_containers,
    merged_items,
    resource_metrics,
    summary,
)
from catamaran.vk.kubelet.streams import command_streams, negotiate
from catamaran.vk.trust import usage_ceilings

NODE = "catamaran-cluster-3"


def request(path: str = "/", query: dict | None = None, headers: dict | None = None) -> Request:
    return Request("GET", path, query or {}, headers or {}, reader=None, writer=None)


@pytest.mark.parametrize(
    ("path", "subresources"),
    [
        ("/stats/summary", ["stats"]),
        ("/metrics/resource", ["metrics"]),
        ("/logs/", ["log"]),
        ("/healthz", ["healthz", "proxy"]),
        ("/pods", ["pods", "proxy"]),
        ("/containerLogs/ns/pod/c", ["proxy"]),
        ("/exec/ns/pod/c", ["proxy"]),
        ("/portForward/ns/pod", ["proxy"]),
    ],
)
def test_paths_map_to_the_kubelets_node_subresources(path, subresources):
    assert subresources_for(path) == subresources


def test_a_client_certificate_names_user_and_groups():
    certificate = {
        "subject": (
            (("organizationName", "system:masters"),),
            (("organizationName", "kubeadm:cluster-admins"),),
            (("commonName", "kube-apiserver-kubelet-client"),),
        )
    }
    user = user_from_certificate(certificate)
    assert user.name == "kube-apiserver-kubelet-client"
    assert user.groups == ("system:masters", "kubeadm:cluster-admins")
    assert user_from_certificate({"subject": ((("organizationName", "x"),),)}) is None


def test_log_options_pass_through_by_their_pod_log_names():
    params = log_params(
        request(query={"follow": ["true"], "tailLines": ["5"], "sinceTime": [""], "limitBytes": ["100"], "x": ["1"]}),
        "app",
    )
    assert params == [("container", "app"), ("follow", "true"), ("tailLines", "5"), ("limitBytes", "100")]


def test_stream_protocols_follow_the_callers_preference():
    assert negotiate(["v5.channel.k8s.io", "v4.channel.k8s.io"], ["v4.channel.k8s.io", "v5.channel.k8s.io"]) == (
        "v5.channel.k8s.io"
    )
    assert negotiate(["v3.channel.k8s.io", "v4.channel.k8s.io"], ["v4.channel.k8s.io"]) == "v4.channel.k8s.io"
    with pytest.raises(HttpError) as refused:
        negotiate(["channel.k8s.io"], ["v4.channel.k8s.io"])
    assert refused.value.status == 403


def test_streams_expected_from_the_command_flags():
    tty = command_streams(request(query={"input": ["1"], "output": ["1"], "error": ["1"], "tty": ["1"]}))
    assert tty == {"stdin": True, "stdout": True, "stderr": False, "resize": True}
    plain = command_streams(request(query={"output": ["1"], "error": ["1"]}))
    assert plain == {"stdin": False, "stdout": True, "stderr": True, "resize": False}
    with pytest.raises(HttpError):
        command_streams(request(query={"tty": ["1"]}))


def test_the_serving_request_is_what_the_kubelet_serving_signer_accepts():
    key_pem, request_pem = serving_request(NODE, ["127.0.0.1"])
    parsed = x509.load_pem_x509_csr(request_pem)
    assert parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
    assert parsed.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    sans = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    manifest = csr_manifest(NODE, request_pem, 600)
    assert manifest["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert manifest["spec"]["usages"] == ["digital signature", "server auth"]
    assert manifest["spec"]["expirationSeconds"] == 600
    assert b"PRIVATE KEY" in key_pem


def _csr(common_name: str, organizations: list[str], sans: list, usages=None, username="admin") -> dict:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(subject))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return {
        "metadata": {"name": "csr-1"},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": usages or ["digital signature", "server auth"],
            "username": username,
        },
    }


def _node(kind: str = "virtual-node") -> dict:
    return {
        "metadata": {
            "name": NODE,
            "labels": {"catamaran.io/type": kind, "catamaran.io/remote-cluster-id": "cluster-3"},
        },
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": NODE}]},
    }


LOOPBACK = [x509.IPAddress(ipaddress.ip_address("10.0.0.7"))]


def test_the_virtual_kubelets_own_request_is_approved():
    csr = _csr(f"system:node:{NODE}", ["system:nodes"], [*LOOPBACK, x509.DNSName(NODE)])
    assert requested_node(csr) == NODE
    assert review(csr, _node(), {"admin"}, "catamaran-system").verdict == "approve"
    account = _csr(
        f"system:node:{NODE}",
        ["system:nodes"],
        LOOPBACK,
        username="system:serviceaccount:catamaran-system:catamaran-vk-cluster-3",
    )
    assert review(account, _node(), set(), "catamaran-system").verdict == "approve"


@pytest.mark.parametrize(
    ("csr", "why"),
    [
        (
            _csr(
                f"system:node:{NODE}",
                ["system:nodes"],
                LOOPBACK,
                username="system:serviceaccount:x:catamaran-vk-cluster-3",
            ),
            "requested by",
        ),
        (
            _csr(
                f"system:node:{NODE}",
                ["system:nodes"],
                LOOPBACK,
                username="system:serviceaccount:catamaran-system:catamaran-vk-cluster-2",
            ),
            "requested by",
        ),
        (_csr(f"system:node:{NODE}", ["system:masters"], LOOPBACK), "subject"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], [x509.IPAddress(ipaddress.ip_address("10.9.9.9"))]), "10.9.9.9"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], [x509.DNSName("evil.example")]), "evil.example"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], [x509.RFC822Name("a@b.c")]), "not allowed"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], LOOPBACK, usages=["client auth"]), "usages"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], []), "no subject alternative names"),
    ],
)
def test_a_request_for_a_virtual_node_failing_a_check_is_denied_with_the_reason(csr, why):
    decision = review(csr, _node(), {"admin"}, "catamaran-system")
    assert decision.verdict == "deny"
    assert why in decision.message


def test_requests_for_other_nodes_are_left_alone():
    physical = _csr("system:node:worker-1", ["system:nodes"], LOOPBACK)
    assert review(physical, _node(kind="physical"), {"admin"}, "catamaran-system").verdict == "ignore"
    assert review(physical, None, {"admin"}, "catamaran-system").verdict == "ignore"
    assert review(_csr("someone", ["system:nodes"], LOOPBACK), _node(), {"admin"}, "catamaran-system").verdict == (
        "ignore"
    )


def test_cpu_seconds_are_integrated_and_never_decrease():
    integrator = UsageIntegrator()
    key = ("ns", "pod", "c")
    first = integrator.container(key, 0.5, now=100.0, started=90.0)
    assert first == pytest.approx(5.0)  # 0.5 cores since it started
    assert integrator.container(key, 0.25, now=104.0, started=90.0) == pytest.approx(6.0)
    assert integrator.container(key, 0.0, now=110.0, started=90.0) == pytest.approx(6.0)
    assert integrator.node(1.0, now=100.0) == 0.0
    assert integrator.node(2.0, now=103.0) == pytest.approx(6.0)
    integrator.forget_except(set())
    assert integrator.containers == {}


def _snapshot() -> Snapshot:
    pod = PodUsage("demo", "web-0", "uid-1", 1000.0, [ContainerUsage("web", 0.002, 4_194_304, 1.5, 1001.0)])
    return Snapshot(taken=2000.0, pods=[pod], node_cpu_cores=0.002, node_cpu_seconds=3.0, node_memory_bytes=4_194_304)


def test_resource_metrics_are_the_kubelets_text_format():
    text = resource_metrics(_snapshot())
    assert 'container_cpu_usage_seconds_total{container="web",namespace="demo",pod="web-0"} 1.5 2000000' in text
    assert 'container_memory_working_set_bytes{container="web",namespace="demo",pod="web-0"} 4194304.0 2000000' in text
    assert "node_cpu_usage_seconds_total 3.0 2000000" in text
    assert "node_memory_working_set_bytes 4194304.0 2000000" in text
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    assert text.endswith("resource_scrape_error 0\n")


def test_the_summary_holds_this_nodes_pods_and_its_own_totals():
    result = summary(_snapshot(), NODE, 900.0)
    assert result["node"]["nodeName"] == NODE
    assert result["node"]["cpu"]["usageNanoCores"] == 2_000_000
    assert result["node"]["memory"]["workingSetBytes"] == 4_194_304
    [pod] = result["pods"]
    assert pod["podRef"] == {"name": "web-0", "namespace": "demo", "uid": "uid-1"}
    assert pod["containers"][0]["cpu"]["usageCoreNanoSeconds"] == 1_500_000_000


def test_renewal_counts_from_when_the_certificate_arrived():
    import datetime

    from catamaran.certs import make_ca
    from catamaran.vk.kubelet.certificate import renewal_time

    _, cert = make_ca("x", days=1)  # notBefore backdated by five minutes, as signers do
    start, end = datetime.datetime.now(datetime.UTC), x509.load_pem_x509_certificate(cert).not_valid_after_utc
    due = renewal_time(cert, 0.5, start)
    assert abs((due - (start + (end - start) / 2)).total_seconds()) < 1


def test_a_request_racing_its_nodes_first_status_waits():
    csr = _csr(f"system:node:{NODE}", ["system:nodes"], LOOPBACK)
    unpublished = _node()
    unpublished["status"] = {}
    assert review(csr, unpublished, {"admin"}, "catamaran-system").verdict == "wait"


def test_the_self_signed_fallback_serves_the_published_address(tmp_path):
    import asyncio
    import ssl as ssl_module

    from catamaran.vk.kubelet.certificate import ServingCertificate

    certificate = ServingCertificate(None, NODE, ["10.0.0.7"], self_signed=True, cert_dir=tmp_path)
    asyncio.run(certificate._issue())
    served = x509.load_pem_x509_certificate(certificate.cert_pem)
    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    assert (tmp_path / "kubelet-serving.key").stat().st_mode & 0o777 == 0o600
    assert certificate.context.verify_mode == ssl_module.CERT_OPTIONAL
    assert certificate.ready.is_set()


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


KUBELET_RESOURCE_METRICS = """# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="main",namespace="shop-c1",pod="idle"} 0.020260384 1795592061692
container_cpu_usage_seconds_total{container="main",namespace="other",pod="x"} 7.5 1795592061692
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="main",namespace="shop-c1",pod="idle"} 1.949696e+06 1795592061692
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="main",namespace="shop-c1",pod="idle"} 1.7955920559007473e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 25955.8511718 1795592023121
"""


def test_a_kubelets_counters_are_read_per_pod_with_their_sample_time():
    pods = container_counters(KUBELET_RESOURCE_METRICS)
    assert pods[("shop-c1", "idle")] == [
        {
            "name": "main",
            "cpuSeconds": 0.020260384,
            "sampledAt": 1795592061.692,
            "memoryWorkingSetBytes": 1949696.0,
            "startTime": 1795592055.9007473,
        }
    ]
    assert pods[("other", "x")][0]["cpuSeconds"] == 7.5


@pytest.mark.parametrize(
    ("user", "tenant"),
    [
        ("system:serviceaccount:catamaran-tenant-cluster-1:catamaran-consumer", "cluster-1"),
        ("system:serviceaccount:kube-system:default", None),
        ("system:serviceaccount:catamaran-tenant-cluster-1", None),
        ("admin", None),
    ],
)
def test_only_a_tenant_credential_names_a_tenant(user, tenant):
    assert tenant_of(user) == tenant


def test_counter_rates_come_from_two_samples_and_survive_a_repeated_one():
    rates = CounterRates()
    key = ("ns", "pod", "c")
    assert rates.rate(key, 10.0, at=100.0) == 0.0  # one sample: no rate yet
    assert rates.rate(key, 12.0, at=104.0) == pytest.approx(0.5)
    assert rates.rate(key, 12.0, at=104.0) == pytest.approx(0.5)  # the same sample again (a cached read)
    assert rates.rate(key, 12.0, at=108.0) == 0.0
    rates.forget_except(set())
    assert rates.previous == {}


def test_counted_containers_pass_the_kubelets_counter_and_sample_time_on():
    spec = {"containers": [{"name": "main"}]}
    local = {"metadata": {"namespace": "shop", "name": "idle"}, "spec": spec, "status": {}}
    item = {"containers": [{"name": "main", "cpuSeconds": 0.02, "sampledAt": 1795592061.692, "startTime": 17.0}]}
    ceilings = usage_ceilings(local["spec"], {})
    (usage,), refusals = counted_containers(item, local, 1.0, CounterRates(), ceilings, now=1795592070.0)
    assert refusals == []
    assert (usage.cpu_seconds, usage.sampled_at, usage.start_time) == (0.02, 1795592061.692, 17.0)
    pod = PodUsage("shop", "idle", "uid", 1.0, [usage])
    text = resource_metrics(
        Snapshot(taken=1795592070.0, pods=[pod], node_cpu_cores=0, node_cpu_seconds=0, node_memory_bytes=0)
    )
    # metrics-server takes its rate from the counter's own sample time, not the moment the node answered.
    assert 'container_cpu_usage_seconds_total{container="main",namespace="shop",pod="idle"} 0.02 1795592061692' in text


def test_pods_without_counters_fall_back_to_their_usage_rates():
    counters = {"items": [{"metadata": {"name": "real"}, "containers": []}]}
    rates = {"items": [{"metadata": {"name": "real"}}, {"metadata": {"name": "on-a-fake-node"}}]}
    assert [(item["metadata"]["name"], counted) for item, counted in merged_items(counters, rates)] == [
        ("real", True),
        ("on-a-fake-node", False),
    ]
    assert [counted for _, counted in merged_items(None, rates)] == [False, False]
    assert merged_items(counters, None) == [(counters["items"][0], True)]


def test_websocket_frames_round_trip_masked_and_fragmented():
    import asyncio
    import os
    import struct

    from catamaran.vk.kubelet import websocket

    def masked(opcode: int, payload: bytes, fin: bool = True) -> bytes:
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        length = len(payload)
        head = struct.pack("!B", (0x80 if fin else 0) | opcode)
        if length < 126:
            head += struct.pack("!B", 0x80 | length)
        else:
            head += struct.pack("!BH", 0x80 | 126, length)
        return head + mask + body

    pings = []

    async def ping(payload: bytes) -> None:
        pings.append(payload)

    async def read(data: bytes) -> list:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [await websocket.read_message(reader, ping) for _ in range(3)]

    big = bytes(range(256)) * 2
    # A ping between a message's fragments is answered and the message still comes whole.
    data = masked(websocket.BINARY, b"\x00ls", fin=False) + masked(websocket.PING, b"hi") + masked(0, b" -l")
    data += masked(websocket.TEXT, big) + masked(websocket.CLOSE, b"\x03\xe8")
    expected = [(websocket.BINARY, b"\x00ls -l"), (websocket.TEXT, big), (websocket.CLOSE, b"\x03\xe8")]
    assert asyncio.run(read(data)) == expected
    assert pings == [b"hi"]
    assert websocket.frame(websocket.BINARY, b"\x01out") == b"\x82\x04\x01out"
    assert websocket.frame(websocket.BINARY, big)[:4] == b"\x82\x7e\x02\x00"
    # RFC 6455's own example of the accept key.
    assert websocket.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


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


# -- counters a provider reports ---------------------------------------------------------------------------------


class CountersChannel:
    """A provider's manager serving forged podcounters (and garbage items) for twin `shop-c1`."""

    def __init__(self, containers: list[dict]):
        self.containers = containers

    async def get_json(self, path: str, params=None) -> dict:
        assert path.endswith("/namespaces/shop-c1/podcounters")
        items = [{"metadata": {"name": "web"}, "containers": self.containers}, {"metadata": 7}, "garbage"]
        return {"items": items}


class LaterEvents:
    def __init__(self):
        self.recorded: list[tuple] = []

    def later(self, involved: dict, kind_type: str, reason: str, message: str) -> None:
        self.recorded.append((involved["uid"], kind_type, reason, message))


def test_forged_counters_leave_the_summary_and_the_metrics_whole():
    import asyncio
    import json
    import math

    from catamaran.vk.kubelet.stats import NodeStats
    from catamaran.vk.refusals import RefusalEvents
    from catamaran.vk.trust import MEMORY_BYTES_CEILING, USAGE_CLAMPED, USAGE_REFUSED

    web = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": {
            "containers": [
                {"name": "app", "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "cache"},
                {"name": "worker"},
            ]
        },
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
    }
    forged = [
        {"name": "app", "cpuSeconds": 2.0, "memoryWorkingSetBytes": 1e300, "sampledAt": float("inf")},
        {"name": "cache", "cpuSeconds": 3.0, "memoryWorkingSetBytes": 1e300},
        {"name": "worker", "cpuSeconds": float("nan"), "memoryWorkingSetBytes": 5.0},
        {"name": "ghost", "cpuSeconds": 1.0},
        {"cpuSeconds": 1.0},
    ]
    events = LaterEvents()
    stats = NodeStats(
        CountersChannel(forged),
        lambda: [web],
        lambda namespace: "shop-c1",
        NODE,
        refusals=RefusalEvents(events, "p"),  # type: ignore[arg-type]
        cache_seconds=0,
    )
    snapshot = asyncio.run(stats.snapshot())
    snapshot = asyncio.run(stats.snapshot())  # the same forgeries again: no Event more
    [pod] = snapshot.pods
    assert {c.name: c.memory_bytes for c in pod.containers} == {"app": 2**30, "cache": MEMORY_BYTES_CEILING}
    assert all(math.isfinite(c.cpu_seconds) and math.isfinite(c.start_time) for c in pod.containers)
    json.dumps(summary(snapshot, NODE, 900.0), allow_nan=False)
    text = resource_metrics(snapshot)
    assert "nan" not in text.lower()
    assert "inf" not in text.lower()
    assert sorted(reason for _, _, reason, _ in events.recorded) == [USAGE_CLAMPED, USAGE_REFUSED]
    assert all(uid == "u-1" and kind == "Warning" for uid, kind, _, _ in events.recorded)


def test_the_summarys_nanoseconds_stay_within_int64():
    pods = [PodUsage("shop", f"web-{i}", "u", 1.0, [ContainerUsage("app", 1.0, 1, 2.0**33, 1.0)]) for i in range(4)]
    snapshot = Snapshot(taken=10.0, pods=pods, node_cpu_cores=4.0, node_cpu_seconds=2.0**35, node_memory_bytes=4)
    result = summary(snapshot, NODE, 1.0)
    assert result["node"]["cpu"]["usageCoreNanoSeconds"] == 2**63 - 1
    assert result["pods"][0]["cpu"]["usageCoreNanoSeconds"] == 2**33 * 10**9


def test_a_counter_jumping_ahead_is_shown_rising_at_its_ceiling():
    from catamaran.vk.trust import USAGE_CLAMPED

    local = {"metadata": {"namespace": "shop", "name": "web"}, "spec": {"containers": [{"name": "app"}]}}
    ceilings = usage_ceilings(local["spec"], {"cpu": "2"})  # no limit: twice what the provider can allocate
    rates = CounterRates()

    def sample(seconds: float, at: float):
        item = {"containers": [{"name": "app", "cpuSeconds": seconds, "sampledAt": at}]}
        return counted_containers(item, local, 1.0, rates, ceilings, now=at)

    assert sample(10.0, 100.0) == ([ContainerUsage("app", 0.0, 0, 10.0, 1.0, 100.0)], [])
    (usage,), refusals = sample(1e9, 110.0)
    assert (usage.cpu_seconds, usage.cpu_cores) == (50.0, pytest.approx(4.0))  # 4 cores for 10 s at most
    assert [refusal.kind for refusal in refusals] == [USAGE_CLAMPED]
    (usage,), refusals = sample(60.0, 120.0)  # honest again: 10 s in 10 s
    assert (usage.cpu_seconds, usage.cpu_cores, refusals) == (60.0, pytest.approx(1.0), [])
