"""The lab's promises, checked in every cluster against its real kube-apiserver."""

from __future__ import annotations

import ipaddress
import json
import time

import pytest

from catamaran_lab.config import MANAGED_NODE_LABEL, PROVIDER_LABEL, REGION_LABEL
from catamaran_lab.kwok import container_log_content

from .lab_access import get_json, wait_for
from .manifests import deployment, unmanaged_node

pytestmark = pytest.mark.integration


def running_pods(lab, cluster, namespace, selector):
    pods = get_json(lab, cluster.name, "pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP")]


def test_nodes_are_labelled_for_their_cluster(lab, cluster):
    nodes = get_json(lab, cluster.name, "nodes", "-l", f"{MANAGED_NODE_LABEL}=true")["items"]
    assert len(nodes) == len(cluster.nodes)
    for node in nodes:
        assert node["metadata"]["labels"][REGION_LABEL] == cluster.region
        assert node["metadata"]["labels"][PROVIDER_LABEL] == cluster.provider
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready
        assert ready[0]["status"] == "True"


def test_clusters_have_distinct_regions_and_pod_ranges(lab_config_in_use):
    clusters = lab_config_in_use.clusters
    assert len({c.region for c in clusters}) == len(clusters)
    assert len({c.provider for c in clusters}) == len(clusters)
    if not lab_config_in_use.overlapping_pod_cidrs:
        ranges = [ipaddress.ip_network(c.pod_cidr) for c in clusters]
        assert not any(a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])


def test_extended_resources_are_allocatable(lab, lab_config_in_use):
    declared = {
        node.name: node.allocatable["nvidia.com/gpu"]
        for cluster in lab_config_in_use.clusters
        for node in cluster.nodes
        if "nvidia.com/gpu" in node.allocatable
    }
    assert declared, "lab/lab.yaml should give some node a GPU"
    for cluster in lab_config_in_use.clusters:
        for node in get_json(lab, cluster.name, "nodes")["items"]:
            if node["metadata"]["name"] in declared:
                assert node["status"]["allocatable"]["nvidia.com/gpu"] == declared[node["metadata"]["name"]]


def test_deployment_pods_run_on_kwok_nodes(lab, cluster, namespace):
    lab.kubectl(cluster.name, "-n", namespace, "apply", "-f", "-", input=json.dumps(deployment("web", 4)))
    pods = wait_for(
        lambda: len(p := running_pods(lab, cluster, namespace, "app=web")) == 4 and p,
        what="4 Running pods of Deployment web",
    )
    worker_names = {node.name for node in cluster.nodes}
    pod_range = ipaddress.ip_network(cluster.pod_cidr)
    for pod in pods:
        assert pod["spec"]["nodeName"] in worker_names
        assert ipaddress.ip_address(pod["status"]["podIP"]) in pod_range
        assert all(s["ready"] for s in pod["status"]["containerStatuses"])

    # Garbage collection through the ReplicaSet: deleting the Deployment removes its pods.
    lab.kubectl(cluster.name, "-n", namespace, "delete", "deployment", "web")
    wait_for(
        lambda: not get_json(lab, cluster.name, "pods", "-n", namespace, "-l", "app=web")["items"],
        what="pods of the deleted Deployment to be collected",
    )


def test_logs_and_exec_reach_kwok_pods(lab, cluster, namespace):
    lab.kubectl(cluster.name, "-n", namespace, "apply", "-f", "-", input=json.dumps(deployment("shell", 1)))
    pod = wait_for(lambda: running_pods(lab, cluster, namespace, "app=shell"), what="a Running pod")[0]
    name = pod["metadata"]["name"]

    logs = lab.kubectl(cluster.name, "-n", namespace, "logs", name)
    assert logs.stdout == container_log_content(cluster)

    tail = lab.kubectl(cluster.name, "-n", namespace, "logs", name, "--tail=1")
    assert tail.stdout == container_log_content(cluster).splitlines(keepends=True)[-1]

    marker = f"exec-in-{cluster.name}"
    executed = lab.kubectl(cluster.name, "-n", namespace, "exec", name, "--", "sh", "-c", f"echo {marker}; pwd")
    output, workdir = executed.stdout.splitlines()
    assert output == marker
    # kwok runs exec commands on the host, in the lab's per-cluster working directory.
    assert workdir == str(lab.cluster_dir(cluster.name) / "exec")

    # kwok reports a failing command as an error naming its exit status (not as kubelet's exit code).
    failed = lab.kubectl(cluster.name, "-n", namespace, "exec", name, "--", "sh", "-c", "exit 3", check=False)
    assert failed.returncode != 0
    assert "exit status 3" in failed.stderr


def test_kwok_leaves_unselected_nodes_alone(lab, cluster, namespace):
    """A node without the lab label (like a Catamaran virtual node) gets no help from kwok."""
    suffix = namespace.removeprefix("smoke-")
    managed, unmanaged = f"managed-{suffix}", f"unmanaged-{suffix}"
    nodes = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": managed, "labels": {MANAGED_NODE_LABEL: "true"}}},
            unmanaged_node(unmanaged),
        ],
    }
    pods = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"on-{node}"},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
            }
            for node in (managed, unmanaged)
        ],
    }
    lab.kubectl(cluster.name, "apply", "-f", "-", input=json.dumps(nodes))
    try:
        lab.kubectl(cluster.name, "-n", namespace, "apply", "-f", "-", input=json.dumps(pods))
        # The control: kwok picks up the labelled node and its pod at once.
        wait_for(lambda: _ready_status(get_json(lab, cluster.name, "node", managed)) == "True", what="managed node")
        wait_for(
            lambda: (
                get_json(lab, cluster.name, "pod", "-n", namespace, f"on-{managed}")["status"].get("phase") == "Running"
            ),
            what="pod on the managed node",
        )
        # Give kwok several of its heartbeat periods to (wrongly) touch the other node.
        time.sleep(5)
        node = get_json(lab, cluster.name, "node", unmanaged)
        assert _ready_status(node) != "True"
        assert not node["status"].get("nodeInfo", {}).get("kubeletVersion", "").startswith("kwok")
        pod = get_json(lab, cluster.name, "pod", "-n", namespace, f"on-{unmanaged}")
        assert pod["status"].get("phase") == "Pending"
        assert not pod["status"].get("podIP")
    finally:
        lab.kubectl(cluster.name, "delete", "node", managed, unmanaged, "--wait=false", check=False)


def _ready_status(node: dict) -> str | None:
    for condition in node.get("status", {}).get("conditions", []):
        if condition["type"] == "Ready":
            return condition["status"]
    return None


def test_node_lifecycle_taints_a_silent_node_and_evicts_its_pods(lab, lab_config_in_use):
    """kube-controller-manager runs for real: a node nobody heartbeats is tainted and emptied."""
    cluster = lab_config_in_use.clusters[0]
    node_name = "silent-node"
    namespace = "lifecycle-check"
    lab.kubectl(cluster.name, "create", "namespace", namespace, check=False)
    lab.kubectl(cluster.name, "apply", "-f", "-", input=json.dumps(unmanaged_node(node_name)))
    try:
        wait_for(
            lambda: lab.kubectl(cluster.name, "-n", namespace, "get", "sa", "default", check=False).returncode == 0
        )
        lab.kubectl(
            cluster.name,
            "-n",
            namespace,
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "evictable"},
                    "spec": {
                        "nodeName": node_name,
                        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                        "tolerations": [
                            {
                                "key": "node.kubernetes.io/unreachable",
                                "operator": "Exists",
                                "effect": "NoExecute",
                                "tolerationSeconds": 1,
                            }
                        ],
                    },
                }
            ),
        )
        taints = wait_for(
            lambda: [
                t
                for t in get_json(lab, cluster.name, "node", node_name)["spec"].get("taints", [])
                if t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoExecute"
            ],
            timeout=120,
            what="the node lifecycle controller's unreachable taint",
        )
        assert taints
        # No kubelet confirms the deletion, so the evicted pod stays Terminating, marked by the taint manager.
        pod = wait_for(
            lambda: (
                (p := get_json(lab, cluster.name, "pod", "-n", namespace, "evictable"))["metadata"].get(
                    "deletionTimestamp"
                )
                and p
            ),
            timeout=60,
            what="taint-based eviction of the pod",
        )
        reasons = {c.get("reason") for c in pod["status"].get("conditions", []) if c["type"] == "DisruptionTarget"}
        assert reasons == {"DeletionByTaintManager"}
    finally:
        lab.kubectl(
            cluster.name, "-n", namespace, "delete", "pod", "evictable", "--force", "--grace-period=0", check=False
        )
        lab.kubectl(cluster.name, "delete", "node", node_name, "--wait=false", check=False)
        lab.kubectl(cluster.name, "delete", "namespace", namespace, "--wait=false", check=False)
