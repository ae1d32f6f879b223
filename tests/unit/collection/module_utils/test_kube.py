"""plugins/module_utils/kube.py: watches never hand a half-read stream to the next request; a certificate that
is not trusted is told from a cluster that cannot be reached."""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import sys
import threading
import warnings

import pytest

from catamaran import certs
from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.connection import resolve
from ansible_collections.catamaran.federation.plugins.module_utils.kube import (
    Cluster,
    ClusterError,
    ClusterUnreachable,
)


class WatchStream:
    """A urllib3 response to a watch: its events, then (unless the reader stops early) the end of the stream."""

    def __init__(self, events: list[dict]):
        self.lines = [json.dumps(event).encode() + b"\n" for event in events]
        self.read = 0
        self.closed = False
        self.released = False

    def stream(self, amount):
        for line in self.lines:
            self.read += 1
            yield line

    def close(self):
        self.closed = True

    def release_conn(self):
        self.released = True


class Api:
    """The kubernetes ApiClient's two calls a watch makes."""

    def __init__(self, stream: WatchStream):
        self.stream = stream

    def param_serialize(self, *args, **kwargs):
        return ()

    def call_api(self, *args, **kwargs):
        return type("Response", (), {"status": 200, "response": self.stream})()


def crd(name: str, established: bool) -> dict:
    conditions = [{"type": "Established", "status": "True"}] if established else []
    return {"metadata": {"name": name, "resourceVersion": "7"}, "status": {"conditions": conditions}}


@pytest.mark.parametrize("established_at", [0, 2], ids=["left-mid-stream", "read-to-the-end"])
def test_a_watch_closes_its_connection_however_it_ends(established_at):
    events = [{"type": "MODIFIED", "object": crd("a", established=i == established_at)} for i in range(3)]
    stream = WatchStream(events)
    cluster = Cluster.__new__(Cluster)
    cluster._api = Api(stream)
    cluster.label, cluster.request_timeout = "c", 10

    def established(items):
        return any(c["status"] == "True" for i in items for c in i["status"]["conditions"])

    finished, version = cluster._watch_once("/apis/x", {}, "1", 5, established, {})
    assert (finished, version, stream.read) == (True, "7", established_at + 1)
    # Left open, a watch stopped mid-stream goes back to the pool with unread events: the next request on that
    # connection reads them first and waits out its read timeout (10 s after every CRD of a fresh install).
    assert (stream.closed, stream.released) == (True, True)


@pytest.fixture
def tls_server(tmp_path):
    """A real HTTPS server on 127.0.0.1 that answers GET /api as an API server would, and 404 (`page not found`, as
    an API server for a group it does not serve) under /apis/offloading.catamaran.io."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/apis/offloading.catamaran.io/"):
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "19")
                self.end_headers()
                self.wfile.write(b"404 page not found\n")
                return
            body = json.dumps({"kind": "APIVersions", "versions": ["v1"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ca_key, ca_cert = certs.make_ca("server-ca")
    key, cert = certs.make_serving_cert(ca_key, ca_cert, ["127.0.0.1"])
    (tmp_path / "ca.crt").write_bytes(ca_cert)
    (tmp_path / "server.crt").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", tmp_path / "ca.crt"
    server.shutdown()
    server.server_close()


def kubeconfig_for(path, server: str, **cluster) -> str:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "lab",
    }
    path.write_text(json.dumps(document))
    return str(path)


def test_an_untrusted_certificate_stops_with_its_reason_and_is_never_taken_for_an_unreachable_cluster(
    tls_server, tmp_path
):
    server, _ = tls_server
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(certs.make_ca("other-ca")[1])
    options = resolve(
        {"kubeconfig": kubeconfig_for(tmp_path / "kc", server, **{"certificate-authority": str(other_ca)})}
    )
    cluster = Cluster("east", options)
    assert cluster.verifies_tls
    with pytest.raises(ClusterError) as raised:
        cluster.check()
    assert not isinstance(raised.value, ClusterUnreachable)
    assert raised.value.reason == "TLSError"
    message = str(raised.value)
    assert message.startswith(f"east: the TLS handshake with {server} (kubeconfig ")
    assert "certificate verify failed" in message


def test_the_right_ca_or_insecure_skip_tls_verify_connects_and_a_closed_port_is_unreachable(tls_server, tmp_path):
    server, ca = tls_server
    trusted = resolve({"kubeconfig": kubeconfig_for(tmp_path / "ok", server, **{"certificate-authority": str(ca)})})
    Cluster("east", trusted).check()
    insecure = Cluster(
        "east", resolve({"kubeconfig": kubeconfig_for(tmp_path / "in", server, **{"insecure-skip-tls-verify": True})})
    )
    assert not insecure.verifies_tls
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # urllib3's InsecureRequestWarning; the module warns in its own words
        insecure.check()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"https://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ClusterUnreachable, match="east: cannot reach"):
        Cluster("east", resolve({"kubeconfig": kubeconfig_for(tmp_path / "cl", closed)}, environ={})).check()


def test_a_kind_the_server_does_not_serve_has_no_objects(tls_server, tmp_path):
    """A plan (check mode) of a new federation reads the provider before the crds step has installed anything."""
    server, ca = tls_server
    cluster = Cluster(
        "east", resolve({"kubeconfig": kubeconfig_for(tmp_path / "kc", server, **{"certificate-authority": str(ca)})})
    )
    assert cluster.list("offloading.catamaran.io/v1alpha1", "ResourceOffer") == []
    assert cluster.get("offloading.catamaran.io/v1alpha1", "ResourceOffer", "offer", "tenant") is None
