"""Each lab cluster's real node runs real containers: processes, logs, exec, volumes, Secrets, Services.

kwok would call any of these pods Running; here a missing mount, a wrong Secret or a dead Service would
fail, because a real kubelet, containerd, runc, CNI bridge and kube-proxy do the work.
"""

from __future__ import annotations

import json

import pytest

from catamaran_lab.config import MANAGED_NODE_LABEL, NODE_KIND_LABEL, REAL_NODE_TAINT

from .lab_access import get_json, wait_for
from .manifests import http_service, real_pod

pytestmark = pytest.mark.integration

PAGE = "served by a real container\n"


def apply(lab, cluster, namespace, *objects):
    document = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    lab.kubectl(cluster.name, "-n", namespace, "apply", "-f", "-", input=json.dumps(document))


def running(lab, cluster, namespace, name):
    pod = get_json(lab, cluster.name, "pod", "-n", namespace, name)
    statuses = pod["status"].get("containerStatuses") or []
    return pod if pod["status"].get("phase") == "Running" and statuses and statuses[0]["ready"] else None


def test_real_node_is_ready_tainted_and_not_kwoks(lab, cluster, real_node):
    node = get_json(lab, cluster.name, "node", real_node.name)
    labels = node["metadata"]["labels"]
    assert labels[NODE_KIND_LABEL] == "real"
    assert MANAGED_NODE_LABEL not in labels
    assert REAL_NODE_TAINT in [{k: t[k] for k in ("key", "value", "effect")} for t in node["spec"]["taints"]]
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == lab.cache.pins.kubernetes
    assert info["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.node_ip
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert ready["reason"] == "KubeletReady"


def test_real_pod_mounts_config_reads_secrets_logs_and_execs(lab, cluster, real_node, namespace):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "page"}, "data": {"index.html": PAGE}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"token": "s3cr3t"}}
    pod = real_pod(
        "web",
        ["sh", "-c", 'echo "started on $NODE"; echo "token=$TOKEN"; exec httpd -f -p 8080 -h /www'],
        container={
            "env": [
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
            "volumeMounts": [{"name": "page", "mountPath": "/www"}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
        },
        volumes=[{"name": "page", "configMap": {"name": "page"}}],
    )
    apply(lab, cluster, namespace, config_map, secret, pod)
    running_pod = wait_for(lambda: running(lab, cluster, namespace, "web"), timeout=90, what="web Running and Ready")
    assert running_pod["spec"]["nodeName"] == real_node.name
    assert running_pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")

    logs = wait_for(
        lambda: (out := lab.kubectl(cluster.name, "-n", namespace, "logs", "web").stdout) and "token=" in out and out,
        what="the container's output in kubectl logs",
    )
    assert f"started on {real_node.name}" in logs
    assert "token=s3cr3t" in logs
    page = lab.kubectl(cluster.name, "-n", namespace, "exec", "web", "--", "cat", "/www/index.html")
    assert page.stdout == PAGE
    whoami = lab.kubectl(cluster.name, "-n", namespace, "exec", "web", "--", "id", "-u")
    assert whoami.stdout.strip() == "65534"
    failed = lab.kubectl(cluster.name, "-n", namespace, "exec", "web", "--", "sh", "-c", "exit 7", check=False)
    assert failed.returncode == 7, failed.stderr


def test_cluster_ip_service_reaches_a_real_pod_from_another(lab, cluster, real_node, namespace):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "page"}, "data": {"index.html": PAGE}}
    server = real_pod(
        "server",
        ["httpd", "-f", "-p", "8080", "-h", "/www"],
        container={"volumeMounts": [{"name": "page", "mountPath": "/www"}]},
        volumes=[{"name": "page", "configMap": {"name": "page"}}],
    )
    client = real_pod("client", ["sleep", "3600"])
    service = http_service("server")
    apply(lab, cluster, namespace, config_map, server, client, service)
    for name in ("server", "client"):
        wait_for(lambda name=name: running(lab, cluster, namespace, name), timeout=90, what=f"{name} Running")
    cluster_ip = get_json(lab, cluster.name, "service", "-n", namespace, "server")["spec"]["clusterIP"]

    def fetch():
        result = lab.kubectl(
            cluster.name, "-n", namespace, "exec", "client", "--",
            "timeout", "5", "wget", "-qO-", f"http://{cluster_ip}/", check=False,
        )  # fmt: skip
        return result.stdout if result.returncode == 0 else None

    # kube-proxy programs the Service's rules shortly after its endpoints appear.
    assert wait_for(fetch, timeout=60, what=f"the page through Service IP {cluster_ip}") == PAGE
