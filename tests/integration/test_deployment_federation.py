"""A federation in deployment mode on real nodes: site.yml, from the installed artifact, runs every Catamaran
process as a pod from the engine-less image (`make image`), as users install it.

cluster-1 consumes cluster-2. Each cluster's manager, and cluster-1's virtual kubelet for cluster-2, run on
their cluster's real node; the lab's API servers (on the host) reach them at their pod IPs, through their
Services' endpoints (the lab turns on aggregator routing). So what is proven here goes through pods only:
  - the API server calls the pod webhook through its Service;
  - the virtual kubelet pod dials the provider's API server from the pod network and serves the kubelet API
    (logs, exec, port-forward, stats) with a serving certificate from a CSR the consumer's manager pod approved;
  - `kubectl top` reads an offloaded pod's figures from the virtual kubelet pod, which reads them from the
    provider's manager pod through its aggregated API;
  - the kubelet restarts a virtual kubelet whose event loop is blocked, and no remote pod is recreated.

The network stays flat (no gateways): the fabric's own gateways do not run as pods yet.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest

from catamaran.constants import SYSTEM_NAMESPACE, default_twin_namespace, virtual_node_name
from catamaran.health import TEST_HOOKS_ENV
from catamaran.steering import VIRTUAL_NODE_TOLERATION
from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT

from .conftest import get_json, require_real_node, wait_for
from .federation import node_ready
from .manifests import BUSYBOX
from .playbooks import hosts, lab_inventory, run_playbook, write_inventory

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NAMESPACE = "deployed-app"
VIRTUAL_NODE = virtual_node_name(PROVIDER)
SERVE = (
    'mkdir -p /tmp/www && echo "served from $HOSTNAME" > /tmp/www/index.html && exec httpd -f -v -p 8080 -h /tmp/www'
)
INSTALLED: dict = {}


def deployment_inventory(lab) -> dict:
    """The lab's inventory with two clusters, every process a pod on its cluster's real node."""
    inventory = lab_inventory()
    clusters = hosts(inventory)
    del clusters["cluster-3"]
    clusters[CONSUMER]["catamaran_peerings"] = clusters[CONSUMER]["catamaran_peerings"][:1]
    clusters[CONSUMER]["catamaran_offloaded_namespaces"] = [
        {"namespace": NAMESPACE, "pod_offloading_strategy": "Remote"}
    ]
    settings = inventory["catamaran_clusters"]["vars"]
    settings.update(
        controller_mode="deployment",
        controller_image_pull_policy="Never",  # imported into the real nodes, never pulled
        controller_node_selector={NODE_KIND_LABEL: "real"},
        controller_tolerations=[{**REAL_NODE_TAINT, "operator": "Equal"}],
        controller_gateway=False,
        catamaran_network={"mode": "flat"},
        # A virtual kubelet pod reaches its provider's API server where the real nodes reach theirs (the host end
        # of a node link, on every API server's certificate), not at the host's loopback.
        catamaran_api_server="{{ catamaran_home_api_server }}",
    )
    return inventory


@pytest.fixture(scope="module")
def federation(lab, lab_config_in_use, installed_collections, controller_image, tmp_path_factory):
    for name in (CONSUMER, PROVIDER):
        require_real_node(lab_config_in_use.cluster(name))
    INSTALLED["collections"] = installed_collections
    inventory = write_inventory(tmp_path_factory.mktemp("deployed"), deployment_inventory(lab), lab)
    run = run_playbook(inventory, collections=installed_collections)
    try:
        assert run.returncode == 0, run.failures()
        wait_for(lambda: node_ready(lab, CONSUMER, VIRTUAL_NODE) == "True", timeout=120, what=f"{VIRTUAL_NODE} Ready")
        yield inventory
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, "--timeout=120s", check=False, timeout=150)
        teardown = run_playbook(inventory, playbook="teardown.yml", collections=installed_collections)
        assert teardown.returncode == 0, teardown.failures()
        for cluster in (CONSUMER, PROVIDER):
            left = lab.kubectl(
                cluster, "get", "deployments,pods,services,serviceaccounts,roles,rolebindings,clusterroles,"
                "clusterrolebindings,mutatingwebhookconfigurations,apiservices", "-A", "-o", "name",
                "-l", "app.kubernetes.io/managed-by=catamaran.federation",
            ).stdout.split()  # fmt: skip
            webhooks = lab.kubectl(cluster, "get", "mutatingwebhookconfigurations", "-o", "name").stdout.split()
            assert (left, webhooks) == ([], []), f"{cluster} keeps {left + webhooks} after the teardown"


def pods(lab, cluster: str, *selector: str) -> list[dict]:
    return get_json(lab, cluster, "-n", SYSTEM_NAMESPACE, "pods", *selector)["items"]


def component(pod: dict) -> str:
    return pod["metadata"]["labels"]["app.kubernetes.io/component"]


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def vk_pod(lab) -> dict | None:
    """The virtual kubelet's pod; None while there is none, or two (the Deployment is replaced)."""
    found = [p for p in pods(lab, CONSUMER, "-l", "app.kubernetes.io/component=virtual-kubelet")
             if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    return found[0] if len(found) == 1 else None


@pytest.fixture(scope="module")
def server(lab, federation):
    """A web server in the offloaded namespace, created without any toleration of the virtual node."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "server", "namespace": NAMESPACE, "labels": {"app": "server"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", SERVE],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/server", "--timeout=120s", timeout=150)
    return get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "server")


def remote_pod(lab) -> dict:
    return get_json(lab, PROVIDER, "-n", default_twin_namespace(NAMESPACE, CONSUMER), "pod", "server")


def test_every_process_runs_as_a_pod_on_its_clusters_real_node(lab, federation, controller_image):
    expected = {CONSUMER: {"manager", "virtual-kubelet"}, PROVIDER: {"manager"}}
    for cluster, components in expected.items():
        running = wait_for(
            lambda cluster=cluster: (
                (found := [p for p in pods(lab, cluster) if is_ready(p)])
                and {component(p) for p in found} == expected[cluster]
                and found
            ),
            timeout=120,
            what=f"{sorted(components)} Ready on {cluster}",
        )
        for pod in running:
            assert pod["spec"]["nodeName"] == f"{cluster}-real"
            assert pod["spec"]["containers"][0]["image"] == controller_image
    # The virtual node is the virtual kubelet pod: its address is the pod's, where the API server dials it.
    addresses = get_json(lab, CONSUMER, "node", VIRTUAL_NODE)["status"]["addresses"]
    assert {"type": "InternalIP", "address": vk_pod(lab)["status"]["podIP"]} in addresses


def test_the_api_server_calls_the_pod_webhook_through_its_service(lab, federation, server):
    configuration = get_json(lab, CONSUMER, "mutatingwebhookconfiguration", "catamaran-pod-offloading")
    for webhook in configuration["webhooks"]:
        assert "url" not in webhook["clientConfig"]
        assert webhook["clientConfig"]["service"]["namespace"] == SYSTEM_NAMESPACE
    # Only the webhook lets a pod created without the virtual node's toleration run there.
    assert server["spec"]["nodeName"] == VIRTUAL_NODE
    assert VIRTUAL_NODE_TOLERATION in server["spec"]["tolerations"]


def test_logs_exec_and_port_forward_reach_the_remote_pod_through_the_virtual_kubelet_pod(lab, federation, server):
    remote = remote_pod(lab)
    assert remote["spec"]["nodeName"] == f"{PROVIDER}-real"
    # The kubelet API's serving certificate came from a CSR the consumer's manager pod approved.
    csrs = get_json(lab, CONSUMER, "csr")["items"]
    approved = [c for c in csrs if c["spec"]["username"].endswith(f":{vk_pod(lab)['spec']['serviceAccountName']}")]
    assert approved, csrs
    assert all(c["status"].get("certificate") for c in approved), approved
    exec_ = lab.kubectl(CONSUMER, "-n", NAMESPACE, "exec", "server", "--", "cat", "/tmp/www/index.html")
    assert exec_.stdout.strip() == f"served from {remote['metadata']['name']}"
    kubectl = [str(lab.cache.path("kubectl")), "--kubeconfig", str(lab.kubeconfig(CONSUMER)), "-n", NAMESPACE]
    forward = subprocess.Popen([*kubectl, "port-forward", "pod/server", ":8080"], stdout=subprocess.PIPE, text=True)
    try:
        port = None
        while port is None:
            line = forward.stdout.readline()
            assert line, "kubectl port-forward ended without forwarding"
            if match := re.search(r"127\.0\.0\.1:(\d+) -> 8080", line):
                port = int(match.group(1))
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10).read().decode()
        assert page.startswith("served from")
    finally:
        forward.terminate()
        forward.wait(timeout=10)
    logs = wait_for(
        lambda: "response:200" in (out := lab.kubectl(CONSUMER, "-n", NAMESPACE, "logs", "server").stdout) and out,
        timeout=30,
        what="the request in the pod's log",
    )
    assert "response:200" in logs


def test_kubectl_top_reads_the_offloaded_pod_through_both_managers_and_the_virtual_kubelet(lab, federation, server):
    rows = wait_for(
        lambda: (
            (out := lab.kubectl(CONSUMER, "-n", NAMESPACE, "top", "pod", "--no-headers", check=False)).returncode == 0
            and [line.split() for line in out.stdout.splitlines() if line.startswith("server ")]
        ),
        timeout=150,
        interval=5,
        what="kubectl top pod to list the offloaded pod",
    )
    ((name, cpu, memory),) = rows
    assert name == "server"
    assert cpu.endswith("m")
    assert memory.endswith("Mi")
    # The provider's counters API is served by its manager pod, through its Service's endpoint.
    apiservice = get_json(lab, PROVIDER, "apiservice", "v1alpha1.metrics.catamaran.io")
    available = next(c for c in apiservice["status"]["conditions"] if c["type"] == "Available")
    assert available["status"] == "True", available


def test_a_blocked_event_loop_gets_the_virtual_kubelet_restarted_and_no_remote_pod_recreated(lab, federation, server):
    remote_uid = remote_pod(lab)["metadata"]["uid"]
    # The test hook, never set by the role: a new virtual kubelet pod (Recreate), itself a restart to survive.
    deployment = vk_pod(lab)["metadata"]["labels"]["app.kubernetes.io/instance"]
    lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "set", "env", f"deployment/{deployment}", f"{TEST_HOOKS_ENV}=1")
    pod = wait_for(
        lambda: (
            (p := vk_pod(lab))
            and any(e.get("name") == TEST_HOOKS_ENV for e in p["spec"]["containers"][0].get("env") or [])
            and is_ready(p)
            and p
        ),
        timeout=120,
        what="a virtual kubelet pod with the test hook, Ready",
    )
    metrics_port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "metrics")
    url = f"http://{pod['status']['podIP']}:{metrics_port}/debug/block-event-loop?seconds=600"
    urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10).read()
    blocked = time.monotonic()
    restarted = wait_for(
        lambda: (p := vk_pod(lab)) and p["status"]["containerStatuses"][0]["restartCount"] >= 1 and is_ready(p) and p,
        timeout=180,
        interval=2,
        what="the kubelet to restart the blocked virtual kubelet",
    )
    assert restarted["metadata"]["uid"] == pod["metadata"]["uid"]  # the same pod: a liveness restart
    print(f"virtual kubelet restarted by its liveness probe and Ready again {time.monotonic() - blocked:.0f}s after")
    wait_for(lambda: node_ready(lab, CONSUMER, VIRTUAL_NODE) == "True", timeout=60, what=f"{VIRTUAL_NODE} Ready")
    assert remote_pod(lab)["metadata"]["uid"] == remote_uid
    local = get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "server")
    assert local["status"]["phase"] == "Running"
    assert local["status"]["containerStatuses"][0]["restartCount"] == 0
