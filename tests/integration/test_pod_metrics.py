"""Offloaded pods' CPU and memory as a kubelet gives them: `kubectl top` and an HPA on the consumer.

cluster-1 consumes cluster-2; the pods run on cluster-2's real node. The provider's manager serves its kubelet's
own counters of the twin's pods to the tenant (the APIService metrics.catamaran.io); the virtual kubelet passes
them to the consumer's metrics-server (a scrape every 15 s), so an idle container's CPU is a real, growing
counter and a virtual kubelet restart changes nothing.
"""

from __future__ import annotations

import base64
import json
import signal
import time

import pytest

from catamaran.certs import make_ca, make_serving_cert
from catamaran.constants import COUNTERS_API_SERVICE, COUNTERS_GROUP, VERSION, tenant_namespace, virtual_node_name
from catamaran_lab.errors import LabError

from . import federation
from .fake_https import FakeHTTPS
from .kubelet_client import kubelet_get
from .lab_access import get_json, require_real_node, wait_for
from .manifests import deployment, real_pod

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


def diagnosis(lab, fed, what: str) -> str:
    """What the consumer says of `what`, and the end of the virtual kubelet's log."""
    described = lab.kubectl(CONSUMER, "-n", NAMESPACE, "describe", what, check=False).stdout
    return f"{described[-5000:]}\n--- the virtual kubelet's log, last lines:\n{fed['vk'].tail(80)}"


def running_spinners(lab) -> list[str]:
    listed = get_json(lab, CONSUMER, "pods", "-n", NAMESPACE, "-l", "app=spinner")["items"]
    return [p["metadata"]["name"] for p in listed if p["status"].get("phase") == "Running"]


def test_an_hpa_on_cpu_scales_an_offloaded_deployment_up_under_load_and_back_down(lab, fed):
    template = real_pod("spinner", ["sh", "-c", BUSY_UNTIL_TOLD], container={"resources": {"requests": {"cpu": "50m"}}})
    template["spec"].update(TO_VIRTUAL_NODE)
    spinners = deployment("spinner", 1, template["spec"])
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
    body = {"apiVersion": "v1", "kind": "List", "items": [spinners, autoscaler]}
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(body))

    def desired() -> int:
        return get_json(lab, CONSUMER, "hpa", "-n", NAMESPACE, "spinner").get("status", {}).get("desiredReplicas", 0)

    try:
        wait_for(lambda: desired() == 2, timeout=120, interval=3, what="the HPA to scale up under load")
    except AssertionError as error:  # say why: the HPA, the pods, the virtual kubelet's log (runs 23, 24: a new pod
        # bound to the virtual node after its restart got no remote pod, on a busy machine)
        raise AssertionError(f"{error}\n{diagnosis(lab, fed, 'hpa,pods')}") from None
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


# -- a provider that lies about its counters --------------------------------------------------------------------------

FORGED_SERVICE = "forged-counters"
MEMORY_LIMIT = 64 * 1024 * 1024


class ForgedCounters:
    """What a provider's admin can put behind the counters APIService: a server of its own, answering for the twin's
    pod `forged` a CPU counter that is NaN, a working set of 1e300 bytes and a container `ghost` the pod does not
    have. It listens where the API server reaches the manager (the host end of the real node's link)."""

    def __init__(self, address: str, service_host: str, directory):
        ca_key, ca_cert = make_ca("forged counters CA")
        key, cert = make_serving_cert(ca_key, ca_cert, [service_host])
        (directory / "tls.crt").write_bytes(cert)
        (directory / "tls.key").write_bytes(key)
        self.ca_cert = ca_cert
        self.asked = 0
        self.server = FakeHTTPS(self.answer, directory / "tls.crt", directory / "tls.key", address=address)
        self.port = self.server.port

    def answer(self, path: str, client_cn: str) -> tuple[bytes, str] | None:
        path = path.split("?")[0]
        if path == f"/apis/{COUNTERS_GROUP}/{VERSION}":
            resource = {"name": "podcounters", "singularName": "", "namespaced": True, "kind": "PodCounters"}
            body = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{COUNTERS_GROUP}/{VERSION}"}
            body["resources"] = [{**resource, "verbs": ["list"]}]
        elif path == COUNTERS_PATH:
            self.asked += 1
            body = self.counters()
        else:
            return None
        return json.dumps(body).encode(), "application/json"  # json writes NaN as NaN, as a careless server would

    @staticmethod
    def counters() -> dict:
        now = time.time()
        times = {"startTime": now - 120, "sampledAt": now}
        containers = [
            {"name": "nan", "cpuSeconds": float("nan"), "memoryWorkingSetBytes": 1_000_000, **times},
            {"name": "huge", "cpuSeconds": 1.5, "memoryWorkingSetBytes": 1e300, **times},
            {"name": "ghost", "cpuSeconds": 3.0, "memoryWorkingSetBytes": 2_000_000, **times},
        ]
        item = {"metadata": {"name": "forged", "namespace": TWIN}, "containers": containers}
        return {"apiVersion": f"{COUNTERS_GROUP}/{VERSION}", "kind": "PodCountersList", "metadata": {}, "items": [item]}

    def close(self):
        self.server.close()


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_forged_counters_never_reach_the_consumers_stats_or_metrics(lab, fed, lab_config_in_use, tmp_path):
    """The provider's admin answers the counters API with a server of its own: NaN, 1e300 bytes and a container the
    pod does not have. The consumer's stats and metrics stay valid and bounded, and each refusal is an Event."""
    pod = real_pod("forged", ["sleep", "3600"], container={"name": "nan"}, **TO_VIRTUAL_NODE)
    huge = {**pod["spec"]["containers"][0], "name": "huge", "resources": {"limits": {"memory": str(MEMORY_LIMIT)}}}
    pod["spec"]["containers"].append(huge)
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(pod))
    try:
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/forged", "--timeout=90s")
    except LabError as error:
        raise AssertionError(f"{error}\n{diagnosis(lab, fed, 'pod/forged')}") from None

    registered = get_json(lab, PROVIDER, "apiservice", COUNTERS_API_SERVICE)
    namespace = registered["spec"]["service"]["namespace"]
    host_ip = lab_config_in_use.cluster(PROVIDER).real_node.host_ip
    forged = ForgedCounters(host_ip, f"{FORGED_SERVICE}.{namespace}.svc", tmp_path)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": FORGED_SERVICE, "namespace": namespace},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": forged.port}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": FORGED_SERVICE,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": FORGED_SERVICE},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [host_ip], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": forged.port, "protocol": "TCP"}],
    }
    replaced = {
        "spec": {
            "service": {"namespace": namespace, "name": FORGED_SERVICE, "port": 443},
            "caBundle": base64.b64encode(forged.ca_cert).decode(),
        }
    }
    body = {"apiVersion": "v1", "kind": "List", "items": [service, endpoints]}
    try:
        lab.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(body))
        lab.kubectl(PROVIDER, "patch", "apiservice", COUNTERS_API_SERVICE, "--type=merge", "-p", json.dumps(replaced))
        wait_for(
            lambda: condition(get_json(lab, PROVIDER, "apiservice", COUNTERS_API_SERVICE), "Available") == "True",
            what="the forged counters API Available",
        )
        # The consumer's metrics-server asks every 15 s, the virtual kubelet caches for 5 s; had it found no counters
        # API while the APIService moved, it asks again after COUNTERS_RETRY_SECONDS (60 s).
        wait_for(lambda: forged.asked >= 2, timeout=120, interval=1, what="the virtual kubelet to read the forged API")

        code, summary = kubelet_get(lab, CONSUMER, NODE, "/stats/summary", client_certificate=True)
        assert code == 200, summary  # the whole node's stats still answer
        pods = {p["podRef"]["name"]: p for p in strict_json(summary)["pods"]}
        containers = {c["name"]: c for c in pods["forged"]["containers"]}
        # NaN: the container is left out; the ghost never shows; 1e300 bytes: its memory limit.
        assert set(containers) == {"huge"}, containers
        assert containers["huge"]["memory"]["workingSetBytes"] == MEMORY_LIMIT, containers["huge"]
        assert pods["forged"]["memory"]["workingSetBytes"] == MEMORY_LIMIT, pods["forged"]
        assert strict_json(summary)["node"]["memory"]["workingSetBytes"] < 2**40

        code, resource = kubelet_get(lab, CONSUMER, NODE, "/metrics/resource", client_certificate=True)
        assert code == 200, resource
        forged_lines = [line for line in resource.splitlines() if 'pod="forged"' in line]
        assert forged_lines, resource
        assert not any("NaN" in line or "Inf" in line or 'container="ghost"' in line for line in forged_lines)
        assert not any('container="nan"' in line for line in forged_lines), forged_lines
        memory = [line for line in forged_lines if line.startswith("container_memory_working_set_bytes")]
        assert [float(line.split()[1]) for line in memory] == [MEMORY_LIMIT], memory

        def refusals() -> dict[str, str]:
            listed = get_json(
                lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=forged"
            )
            reasons: dict[str, str] = {}
            for event in listed["items"]:
                if event["type"] == "Warning":
                    reasons[event["reason"]] = reasons.get(event["reason"], "") + event["message"] + "\n"
            return reasons

        reasons = wait_for(
            lambda: {"UsageRefused", "UsageClamped"} <= set(found := refusals()) and found,
            timeout=30,
            what="Warning Events UsageRefused and UsageClamped on the pod",
        )
        # One Event per pod and kind (vk/refusals.py): the first refused container is the NaN one.
        assert "cpuSeconds 'nan' of container 'nan'" in reasons["UsageRefused"], reasons
        assert "1e+300" in reasons["UsageClamped"], reasons
    finally:
        restored = {"spec": {"service": registered["spec"]["service"], "caBundle": registered["spec"]["caBundle"]}}
        lab.kubectl(PROVIDER, "patch", "apiservice", COUNTERS_API_SERVICE, "--type=merge", "-p", json.dumps(restored))
        lab.kubectl(PROVIDER, "delete", "-f", "-", "--ignore-not-found", input=json.dumps(body))
        forged.close()
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "forged", "--wait=false")
