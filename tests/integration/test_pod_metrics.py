"""Offloaded pods' CPU and memory as a kubelet gives them: `kubectl top` and an HPA on the consumer.

cluster-1 consumes cluster-2; the pods run on cluster-2's real node. The provider's manager serves its kubelet's
own counters of the twin's pods to the tenant (the APIService metrics.catamaran.io); the virtual kubelet passes
them to the consumer's metrics-server (a scrape every 15 s), so an idle container's CPU is a real, growing
counter and a virtual kubelet restart changes nothing.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from catamaran.constants import COUNTERS_API_SERVICE, tenant_namespace, virtual_node_name

from . import federation
from .conftest import get_json, require_real_node, wait_for
from .manifests import real_pod

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NAMESPACE = "pod-metrics"
TWIN = f"{NAMESPACE}-{CONSUMER}"
NODE = virtual_node_name(PROVIDER)
TO_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
}
COUNTERS_PATH = f"/apis/metrics.catamaran.io/v1alpha1/namespaces/{TWIN}/podcounters"
# Busy until told (a file appears), then idle; at most three minutes busy, so a pod left behind stops spinning.
IDLE_FLAG = "/tmp/idle"
BUSY_UNTIL_TOLD = (
    f'end=$(( $(date +%s) + 180 )); while [ ! -e {IDLE_FLAG} ] && [ "$(date +%s)" -lt "$end" ]; do :; done; '
    "exec sleep 3600"
)


@pytest.fixture(scope="module")
def fed(lab, lab_config_in_use):
    require_real_node(lab_config_in_use.cluster(PROVIDER))
    with federation.one_real_peering(lab, CONSUMER, PROVIDER, NAMESPACE) as processes:
        wait_for(
            lambda: condition(get_json(lab, PROVIDER, "apiservice", COUNTERS_API_SERVICE), "Available") == "True",
            what="the provider's pod counters API Available",
        )
        yield {"vk": processes[2]}


def condition(obj: dict, kind: str) -> str | None:
    return next((c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def offloaded(lab, name: str, command: str, cpu: str = "50m") -> None:
    pod = real_pod(name, ["sh", "-c", command], container={"resources": {"requests": {"cpu": cpu}}}, **TO_VIRTUAL_NODE)
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(pod))


def top_pods(lab) -> dict[str, list[str]]:
    result = lab.kubectl(CONSUMER, "top", "pod", "-n", NAMESPACE, "--no-headers", check=False)
    return {row.split()[0]: row.split() for row in result.stdout.splitlines()} if result.returncode == 0 else {}


def test_top_lists_idle_and_busy_offloaded_pods_also_after_the_virtual_kubelet_is_killed(lab, fed):
    metrics_server_log = lab.root / "kwok" / "clusters" / CONSUMER / "logs" / "metrics-server.log"
    logged_before = metrics_server_log.stat().st_size
    offloaded(lab, "idle", "exec sleep 3600")
    offloaded(lab, "busy", "while :; do :; done")
    # Two metrics-server scrapes (15 s each) after the pods run, with some room for the machine being busy.
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/idle", "pod/busy", "--timeout=90s")
    rows = wait_for(lambda: (rows := top_pods(lab)) and {"idle", "busy"} <= set(rows) and rows, timeout=45, interval=3)
    assert int(rows["busy"][1].removesuffix("m")) > 100, rows  # a core's worth of spinning, give or take the machine

    fed["vk"].process.send_signal(signal.SIGKILL)
    fed["vk"].process.wait(timeout=10)
    fed["vk"].start()
    wait_for(lambda: federation.node_ready(lab, CONSUMER, NODE) == "True", timeout=60, what=f"{NODE} Ready again")
    # Two scrapes of the restarted virtual kubelet: metrics-server keeps a pod only when its counter went on.
    time.sleep(31)
    rows = wait_for(lambda: (rows := top_pods(lab)) and {"idle", "busy"} <= set(rows) and rows, timeout=45, interval=3)
    assert int(rows["busy"][1].removesuffix("m")) > 100, rows
    with metrics_server_log.open() as log:
        log.seek(logged_before)
        refused = [line for line in log if "decrease in cumulative CPU" in line and NAMESPACE in line]
    assert not refused, refused


def test_the_counters_api_serves_a_twin_to_its_own_tenant_only(lab, fed, tmp_path):
    tenant = federation.tenant_kubectl(lab, CONSUMER, PROVIDER, tmp_path)
    own = tenant("get", "--raw", COUNTERS_PATH)
    assert own.returncode == 0, own.stderr
    items = json.loads(own.stdout)["items"]
    assert "idle" in {item["metadata"]["name"] for item in items}
    assert all(container["cpuSeconds"] > 0 for item in items for container in item["containers"])
    refused = tenant("get", "--raw", COUNTERS_PATH.replace(TWIN, tenant_namespace(CONSUMER)))
    assert refused.returncode != 0  # not a twin: RBAC says no
    admin = lab.kubectl(PROVIDER, "get", "--raw", COUNTERS_PATH, check=False)
    assert admin.returncode != 0  # the provider's admin is not this twin's tenant: the server says no
    assert "may not list the pod counters" in admin.stderr


def running_spinners(lab) -> list[str]:
    listed = get_json(lab, CONSUMER, "pods", "-n", NAMESPACE, "-l", "app=spinner")["items"]
    return [p["metadata"]["name"] for p in listed if p["status"].get("phase") == "Running"]


def test_an_hpa_on_cpu_scales_an_offloaded_deployment_up_under_load_and_back_down(lab, fed):
    template = real_pod("spinner", ["sh", "-c", BUSY_UNTIL_TOLD], container={"resources": {"requests": {"cpu": "50m"}}})
    template["spec"].update(TO_VIRTUAL_NODE)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "spinner"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "spinner"}},
            "template": {"metadata": {"labels": {"app": "spinner"}}, "spec": template["spec"]},
        },
    }
    autoscaler = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "spinner"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "spinner"},
            "minReplicas": 1,
            "maxReplicas": 2,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                }
            ],
            # No waiting for stability: the test has two CPUs' worth of patience.
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}, "scaleUp": {"stabilizationWindowSeconds": 0}},
        },
    }
    body = {"apiVersion": "v1", "kind": "List", "items": [deployment, autoscaler]}
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(body))

    def desired() -> int:
        return get_json(lab, CONSUMER, "hpa", "-n", NAMESPACE, "spinner").get("status", {}).get("desiredReplicas", 0)

    wait_for(lambda: desired() == 2, timeout=120, interval=3, what="the HPA to scale up under load")
    nodes = {
        p["spec"].get("nodeName")
        for p in get_json(lab, CONSUMER, "pods", "-n", NAMESPACE, "-l", "app=spinner")["items"]
    }
    assert nodes == {NODE}
    # Both replicas spin until told: the load ends once both run (the exec goes through the virtual kubelet).
    spinners = wait_for(
        lambda: len(names := running_spinners(lab)) == 2 and names, timeout=120, what="both spinner replicas Running"
    )
    for name in spinners:
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "exec", name, "--", "touch", IDLE_FLAG)
    wait_for(lambda: desired() == 1, timeout=240, interval=5, what="the HPA to scale down once the load is gone")
