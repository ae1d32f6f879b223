"""Calls straight to a node's kubelet API as the consumer's tests make them: the API server's node proxy refuses a
virtual node's loopback address ("address not allowed"), so tests dial the address the node reports."""

from __future__ import annotations

import base64
import http.client
import ssl
import tempfile
from pathlib import Path

import yaml

from .lab_access import get_json


def node_endpoint(lab, cluster: str, node: str) -> tuple[str, int]:
    status = get_json(lab, cluster, "node", node)["status"]
    address = next(a["address"] for a in status["addresses"] if a["type"] == "InternalIP")
    return address, status["daemonEndpoints"]["kubeletEndpoint"]["Port"]


def admin_tls(lab, cluster: str, with_client_certificate: bool) -> ssl.SSLContext:
    """TLS trusting the cluster's CA, as its admin (the client certificate) or with no identity of its own."""
    config = yaml.safe_load(lab.kubeconfig(cluster).read_text())
    context = ssl.create_default_context(
        cadata=base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    )
    context.check_hostname = False  # the certificate names the node's IP, which is what is dialled
    if with_client_certificate:
        user = config["users"][0]["user"]
        directory = Path(tempfile.mkdtemp())
        (directory / "c.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
        (directory / "c.key").write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(directory / "c.crt", directory / "c.key")
    return context


def kubelet_get(
    lab, cluster: str, node: str, path: str, *, client_certificate: bool = False, token: str | None = None
) -> tuple[int, str]:
    """(status, body) of a GET on the node's kubelet API."""
    host, port = node_endpoint(lab, cluster, node)
    connection = http.client.HTTPSConnection(
        host, port, timeout=10, context=admin_tls(lab, cluster, client_certificate)
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    return response.status, response.read().decode(errors="replace")
