"""The lab's kubelet API contract, per cluster: verified kubelet certificates, the CSR signer, metrics-server.

A small HTTPS server in the test plays a kubelet the way Catamaran's virtual kubelets do: a serving
certificate obtained through a `kubernetes.io/kubelet-serving` CSR, listening on 127.0.0.1, reported in
its Node's status. The API server and metrics-server must reach it with the cluster CA and their own
client identities, and must refuse a kubelet whose certificate the CA did not sign.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import subprocess
import uuid

import pytest
import yaml
from cryptography import x509

from catamaran.certs import make_ca, make_serving_cert
from catamaran.vk.kubelet.certificate import csr_manifest, serving_request
from catamaran_lab.kwok import USAGE_CPU_ANNOTATION, container_log_content
from catamaran_lab.pki import KUBE_APISERVER_KUBELET_CLIENT, METRICS_SERVER_KUBELET_CLIENT

from .fake_https import FakeHTTPS
from .lab_access import get_json, require_real_node, wait_for
from .manifests import deployment, real_pod, unmanaged_node

pytestmark = pytest.mark.integration

LOOPBACK = ipaddress.ip_address("127.0.0.1")


def kubelet_serving_certificate(lab, cluster: str, node: str, tmp_path) -> tuple:
    """What a virtual kubelet does: a CSR for system:node:<node> at 127.0.0.1, approved, signed by the cluster."""
    key_pem, request_pem = serving_request(node, [str(LOOPBACK)])
    name = f"{node}-serving"
    csr = csr_manifest(node, request_pem, None)
    csr["metadata"] = {"name": name}
    lab.kubectl(cluster, "create", "-f", "-", input=json.dumps(csr))
    try:
        lab.kubectl(cluster, "certificate", "approve", name)
        issued = wait_for(
            lambda: get_json(lab, cluster, "csr", name)["status"].get("certificate"),
            timeout=30,
            what="kube-controller-manager to sign the approved kubelet-serving CSR",
        )
    finally:
        lab.kubectl(cluster, "delete", "csr", name, check=False)
    cert_path, key_path = tmp_path / f"{node}.crt", tmp_path / f"{node}.key"
    cert_path.write_bytes(base64.b64decode(issued))
    key_path.write_bytes(key_pem)
    return cert_path, key_path


def impostor_certificate(tmp_path) -> tuple:
    """A serving certificate for 127.0.0.1 from a CA of its own, not the cluster's."""
    ca_key, ca_cert = make_ca("impostor")
    key_pem, cert_pem = make_serving_cert(ca_key, ca_cert, [str(LOOPBACK)])
    cert_path, key_path = tmp_path / "impostor.crt", tmp_path / "impostor.key"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(key_pem)
    return cert_path, key_path


class FakeKubelet:
    """HTTPS on 127.0.0.1: container logs and a minimal /metrics/resource, noting each client's certificate CN."""

    LOG = "written by the fake kubelet\n"
    METRICS = (
        "# TYPE node_cpu_usage_seconds_total counter\n"
        "node_cpu_usage_seconds_total {cpu}\n"
        "# TYPE node_memory_working_set_bytes gauge\n"
        "node_memory_working_set_bytes 134217728\n"
    )

    def __init__(self, cert, key, ca):
        self.callers: list[tuple[str, str]] = []  # (path, client CN)
        self.started = datetime.datetime.now(datetime.UTC)
        self.server = FakeHTTPS(self.answer, cert, key, client_ca=ca)
        self.port = self.server.port

    def answer(self, path: str, client_cn: str) -> tuple[bytes, str] | None:
        self.callers.append((path, client_cn))
        if path.startswith("/containerLogs/"):
            return self.LOG.encode(), "text/plain"
        if path == "/metrics/resource":
            seconds = (datetime.datetime.now(datetime.UTC) - self.started).total_seconds()
            return self.METRICS.format(cpu=1 + 0.2 * seconds).encode(), "text/plain"
        return None

    def close(self):
        self.server.close()


def report_kubelet(lab, cluster: str, node: str, port: int) -> None:
    """The Node's status as a kubelet reports it: InternalIP 127.0.0.1 and the kubelet port."""
    status = {
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }
    }
    lab.kubectl(cluster, "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def test_a_kubelet_with_a_csr_certificate_is_verified_and_an_impostor_refused(lab, cluster, namespace, tmp_path):
    ca = lab.ca_file(cluster.name)
    # The same CA three ways: the file in the lab's state, the kubeconfig, and every namespace's ConfigMap.
    kubeconfig = yaml.safe_load(lab.kubeconfig(cluster.name).read_text())
    assert base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]) == ca.read_bytes()
    root_ca = get_json(lab, cluster.name, "configmap", "-n", "default", "kube-root-ca.crt")["data"]["ca.crt"]
    assert root_ca.encode() == ca.read_bytes()

    node = f"tls-check-{uuid.uuid4().hex[:6]}"
    lab.kubectl(cluster.name, "apply", "-f", "-", input=json.dumps(unmanaged_node(node)))
    servers = []
    try:
        cert, key = kubelet_serving_certificate(lab, cluster.name, node, tmp_path)
        issued = x509.load_pem_x509_certificate(cert.read_bytes())
        ca_cert = x509.load_pem_x509_certificate(ca.read_bytes())
        assert issued.issuer == ca_cert.subject
        issued.verify_directly_issued_by(ca_cert)

        # A pod bound to the node: its logs go through the API server's kubelet client. (Node proxy, the
        # other way in, refuses loopback addresses whatever the certificate: "address not allowed".)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bound"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
        }
        lab.kubectl(cluster.name, "-n", namespace, "apply", "-f", "-", input=json.dumps(pod))
        logs = f"/api/v1/namespaces/{namespace}/pods/bound/log?container=app"

        impostor = FakeKubelet(*impostor_certificate(tmp_path), ca)
        servers.append(impostor)
        report_kubelet(lab, cluster.name, node, impostor.port)
        refused = wait_for(
            lambda: (r := lab.kubectl(cluster.name, "get", "--raw", logs, check=False)) and "x509" in r.stderr and r,
            timeout=30,
            what="the API server to refuse a kubelet certificate the cluster CA did not sign",
        )
        assert refused.returncode != 0
        assert not [path for path, _ in impostor.callers if path.startswith("/containerLogs/")]

        kubelet = FakeKubelet(cert, key, ca)
        servers.append(kubelet)
        report_kubelet(lab, cluster.name, node, kubelet.port)
        answer = wait_for(
            lambda: lab.kubectl(cluster.name, "get", "--raw", logs).stdout,
            timeout=30,
            what="the API server to reach a kubelet serving a certificate from a kubelet-serving CSR",
        )
        assert answer == FakeKubelet.LOG
        assert (f"/containerLogs/{namespace}/bound/app", KUBE_APISERVER_KUBELET_CLIENT) in kubelet.callers

        # metrics-server scrapes it too (node status port, InternalIP, verified TLS), as its own identity.
        wait_for(
            lambda: ("/metrics/resource", METRICS_SERVER_KUBELET_CLIENT) in kubelet.callers,
            timeout=60,
            what=f"metrics-server to scrape /metrics/resource as {METRICS_SERVER_KUBELET_CLIENT}",
        )
        usage = wait_for(
            lambda: (
                (r := lab.kubectl(cluster.name, "top", "node", node, "--no-headers", check=False)).returncode == 0
                and r.stdout.split()
            ),
            timeout=90,
            interval=3,
            what=f"kubectl top node {node}",
        )
        assert usage[0] == node
        assert "128Mi" in usage, usage
    finally:
        for server in servers:
            server.close()
        lab.kubectl(cluster.name, "delete", "node", node, "--wait=false", check=False)


def _top(lab, cluster: str, *args: str) -> dict[str, list[str]]:
    result = lab.kubectl(cluster, "top", *args, "--no-headers", check=False)
    return {row.split()[0]: row.split() for row in result.stdout.splitlines()} if result.returncode == 0 else {}


def test_metrics_api_covers_kwok_and_real_nodes_and_their_pods(lab, lab_config_in_use):
    # Every cluster at once: most of the time is metrics-server's scrape interval, which the clusters wait out together.
    clusters = lab_config_in_use.clusters
    namespaces = {}
    try:
        for cluster in clusters:
            require_real_node(cluster)
            namespaces[cluster.name] = f"metrics-{uuid.uuid4().hex[:8]}"
            lab.kubectl(cluster.name, "create", "namespace", namespaces[cluster.name])
        for cluster in clusters:
            get_default_sa = ("-n", namespaces[cluster.name], "get", "sa", "default")
            wait_for(lambda c=cluster.name, a=get_default_sa: lab.kubectl(c, *a, check=False).returncode == 0)
            fake = deployment("busy", 1)
            fake["spec"]["template"]["metadata"]["annotations"] = {USAGE_CPU_ANNOTATION: "250m"}
            real = real_pod("sleeper", ["sleep", "3600"])
            items = {"apiVersion": "v1", "kind": "List", "items": [fake, real]}
            lab.kubectl(cluster.name, "-n", namespaces[cluster.name], "apply", "-f", "-", input=json.dumps(items))
        for cluster in clusters:
            _assert_node_and_pod_metrics(lab, cluster, namespaces[cluster.name])
    finally:
        for cluster_name, name in namespaces.items():
            lab.kubectl(cluster_name, "delete", "namespace", name, "--wait=false", check=False)


def _assert_node_and_pod_metrics(lab, cluster, namespace: str) -> None:
    nodes = [node.name for node in cluster.nodes] + [cluster.real_node.name]
    rows = wait_for(
        lambda: (rows := _top(lab, cluster.name, "node")) and set(nodes) <= set(rows) and rows,
        timeout=90,
        interval=3,
        what=f"kubectl top node to list every kwok node and the real node of {cluster.name}",
    )
    for name in nodes:
        cpu, memory = rows[name][1], rows[name][3]
        assert cpu.endswith("m"), rows[name]
        assert int(cpu[:-1]) > 0, rows[name]
        assert memory.endswith("Mi"), rows[name]
        assert int(memory[:-2]) > 0, rows[name]
    pods = wait_for(
        lambda: (
            (rows := _top(lab, cluster.name, "pod", "-n", namespace))
            and "sleeper" in rows
            and any(name.startswith("busy-") for name in rows)
            and rows
        ),
        timeout=120,
        interval=3,
        what=f"kubectl top pod to list the kwok pod and the real pod of {cluster.name}",
    )
    busy = next(row for name, row in pods.items() if name.startswith("busy-"))
    # kwok's emulation: the annotation's CPU, the lab's default memory per container.
    assert abs(int(busy[1].removesuffix("m")) - 250) <= 5, busy
    assert busy[2] == "16Mi", busy
    all_pods = lab.kubectl(cluster.name, "top", "pod", "-A", "--no-headers").stdout
    assert namespace in all_pods


def test_kwok_pod_logs_follow(lab, cluster, namespace):
    lab.kubectl(cluster.name, "-n", namespace, "apply", "-f", "-", input=json.dumps(deployment("talker", 1)))
    pod = wait_for(
        lambda: [
            p["metadata"]["name"]
            for p in get_json(lab, cluster.name, "pods", "-n", namespace, "-l", "app=talker")["items"]
            if p["status"].get("phase") == "Running"
        ],
        what="a Running kwok pod",
    )[0]
    with pytest.raises(subprocess.TimeoutExpired) as followed:
        lab.kubectl(cluster.name, "-n", namespace, "logs", "-f", pod, timeout=5)
    output = followed.value.stdout
    output = output.decode() if isinstance(output, bytes) else output
    # Every line of the file, then the stream stays open (kwok follows the file).
    assert output == container_log_content(cluster)
    assert len(output.splitlines()) >= 5
