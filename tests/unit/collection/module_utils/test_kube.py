"""plugins/module_utils/kube.py: watches never hand a half-read stream to the next request; a certificate that
is not trusted is told from a cluster that cannot be reached; each kind of kubeconfig user reaches a real TLS server
with its credential, and a plain one without importing the kubernetes client."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import tempfile
import warnings

import pytest

from catamaran import certs
from catamaran_lab.paths import REPO_ROOT
from catamaran_lab.pki import create_ca, issue
from tests.integration.fake_https import QuietHandler, serve_https

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


class Http:
    """The urllib3 pool a watch asks: its one request answered with the stream."""

    def __init__(self, stream: WatchStream):
        self.stream = stream

    def request(self, *args, **kwargs):
        assert kwargs["preload_content"] is False  # read as it comes, never whole
        self.stream.status = 200
        return self.stream


def crd(name: str, established: bool) -> dict:
    conditions = [{"type": "Established", "status": "True"}] if established else []
    return {"metadata": {"name": name, "resourceVersion": "7"}, "status": {"conditions": conditions}}


@pytest.mark.parametrize("established_at", [0, 2], ids=["left-mid-stream", "read-to-the-end"])
def test_a_watch_closes_its_connection_however_it_ends(established_at):
    events = [{"type": "MODIFIED", "object": crd("a", established=i == established_at)} for i in range(3)]
    stream = WatchStream(events)
    cluster = Cluster.__new__(Cluster)
    cluster._http = Http(stream)
    cluster.label, cluster.request_timeout, cluster.server, cluster._authorization = "c", 10, "https://c", None

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

    class Handler(QuietHandler):
        def do_GET(self):
            if self.path.startswith("/apis/offloading.catamaran.io/"):
                self.reply(b"404 page not found\n", "text/plain", status=404)
                return
            self.reply(json.dumps({"kind": "APIVersions", "versions": ["v1"]}).encode())

    ca_key, ca_cert = certs.make_ca("server-ca")
    key, cert = certs.make_serving_cert(ca_key, ca_cert, ["127.0.0.1"])
    (tmp_path / "ca.crt").write_bytes(ca_cert)
    (tmp_path / "server.crt").write_bytes(cert)
    (tmp_path / "server.key").write_bytes(key)
    server = serve_https(Handler, tmp_path / "server.crt", tmp_path / "server.key")
    yield f"https://127.0.0.1:{server.server_address[1]}", tmp_path / "ca.crt"
    server.shutdown()
    server.server_close()


def kubeconfig_document(cluster: dict, user: dict) -> dict:
    """A kubeconfig of one context, `lab`, for `cluster` and `user`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "lab",
    }


def kubeconfig_for(path, server: str, **cluster) -> str:
    path.write_text(json.dumps(kubeconfig_document({"server": server, **cluster}, {"token": "t0ken"})))
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


@pytest.fixture
def echo_server(tmp_path):
    """A real HTTPS server on 127.0.0.1, serving as `api.example` only, that answers GET /api with what the client
    proved: the common name of its certificate (asked for, not required) and its Authorization header."""
    pki = tmp_path / "pki"
    pki.mkdir()
    create_ca(pki / "ca.crt", pki / "ca.key", "echo-ca")
    server_cert, server_key = issue(pki / "ca.crt", pki / "ca.key", pki / "server", common_name="api.example",
                                    server_names=("api.example",))  # fmt: skip

    class Handler(QuietHandler):
        def do_GET(self):
            proved = {"cn": self.client_cn(), "authorization": self.headers.get("Authorization")}
            self.reply(json.dumps(proved).encode())

    server = serve_https(Handler, server_cert, server_key, client_ca=pki / "ca.crt")
    yield f"https://127.0.0.1:{server.server_address[1]}", pki
    server.shutdown()
    server.server_close()


def b64_of(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def echo_kubeconfig(server: str, pki, user: dict) -> dict:
    cluster = {"server": server, "certificate-authority-data": b64_of(pki / "ca.crt"), "tls-server-name": "api.example"}
    return kubeconfig_document(cluster, user)


def test_a_client_certificate_given_as_content_is_presented_and_its_files_are_gone_once_loaded(
    echo_server, tmp_path, monkeypatch
):
    server, pki = echo_server
    cert, key = issue(pki / "ca.crt", pki / "ca.key", pki / "alice", common_name="alice")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    user = {"client-certificate-data": b64_of(cert), "client-key-data": b64_of(key)}
    # tls-server-name: the server's certificate names api.example, not the address dialled.
    cluster = Cluster("east", resolve({"kubeconfig": echo_kubeconfig(server, pki, user)}, environ={}))
    assert list(scratch.iterdir()) == []  # the key passed through a file of this process only, removed at once
    assert cluster.request("GET", "/api") == {"cn": "alice", "authorization": None}


EXEC_CREDENTIAL = {
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": "from-exec"},
}


@pytest.mark.parametrize(
    ("user", "authorization"),
    [
        ({"token": "t0ken"}, "Bearer t0ken"),
        ({"username": "ann", "password": "pw"}, "Basic " + base64.b64encode(b"ann:pw").decode()),
        # An exec plugin: the one kind of user the kubernetes client still loads (its import costs 0.3 s).
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "sh",
                    "args": ["-c", f"echo '{json.dumps(EXEC_CREDENTIAL)}'"],
                    "interactiveMode": "Never",
                }
            },
            "Bearer from-exec",
        ),
    ],
    ids=["token", "basic", "exec-plugin"],
)
def test_each_kind_of_kubeconfig_user_reaches_the_server_with_its_credential(echo_server, user, authorization):
    server, pki = echo_server
    cluster = Cluster("east", resolve({"kubeconfig": echo_kubeconfig(server, pki, user)}, environ={}))
    assert cluster.request("GET", "/api") == {"cn": "", "authorization": authorization}


def test_a_module_reaching_a_cluster_through_a_plain_kubeconfig_never_imports_the_kubernetes_client(tmp_path):
    """The point of reading kubeconfigs ourselves: the library's import was half of every module run's CPU."""
    path = kubeconfig_for(tmp_path / "kc", "https://127.0.0.1:6443")
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from ansible_collections.catamaran.federation.plugins.module_utils import common, kube;"
        "kube.Cluster('east', kube.connection.resolve({'kubeconfig': sys.argv[2]}, environ={}));"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe, str(REPO_ROOT / ".collections"), path], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
