"""Virtual node and pod offloading through ShadowPods, consumer cluster-1 and provider cluster-2.

Every status read on the consumer's virtual node and its pods comes from Catamaran: kwok manages
only the lab's labelled worker nodes, and test_remote_pod_is_recreated_while_the_consumer_is_stopped
shows that nothing renews the virtual node's Lease or updates its pods while the virtual kubelet
is down. The tests run in file order and share one federation.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
import urllib.request
from fractions import Fraction

import pytest

from catamaran import quantities
from catamaran.constants import NODE_LEASE_NAMESPACE, virtual_node_name

from . import federation
from .lab_access import apply_quota, get_json, wait_for
from .manifests import container, deployment

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NODE = virtual_node_name(PROVIDER)
REMAP = "10.200.0.0/16"
NAMESPACE = "offload"
TWIN = f"{NAMESPACE}-{CONSUMER}"
HEALTH = {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3}
SHARING = 90


@pytest.fixture(scope="module")
def fed(lab):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(
        lab,
        CONSUMER,
        PROVIDER,
        sharingPercentage=SHARING,
        healthCheck=HEALTH,
        networking={"podCIDRRemap": REMAP},
        nodeLabels={"topology.kubernetes.io/region": "region-b"},
    )
    processes = {
        "manager": federation.manager(lab, PROVIDER),
        "vk": federation.virtual_kubelet(lab, CONSUMER, PROVIDER, metrics_port=metrics_port(lab)),
    }
    with federation.serving(lab, CONSUMER, PROVIDER, NAMESPACE, list(processes.values())):
        yield processes


def metrics_port(lab) -> int:
    return lab.recorded_config().base_port + 99  # inside the lab's port block, unused by its clusters


def node_ready(lab) -> str | None:
    return federation.node_ready(lab, CONSUMER, NODE)


def offloaded_deployment(name: str, replicas: int, cpu: str = "10m") -> str:
    return json.dumps(deployment(name, replicas, offloaded_pod_spec(cpu)))


def offloaded_pod_spec(cpu: str = "10m", **extra) -> dict:
    return {
        "nodeSelector": {"catamaran.io/type": "virtual-node"},
        "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
        "containers": [container("app", cpu=cpu, memory="16Mi")],
        **extra,
    }


def local_pods(lab, selector: str) -> list[dict]:
    return get_json(lab, CONSUMER, "pods", "-n", NAMESPACE, "-l", selector)["items"]


def remote_pods(lab, selector: str) -> list[dict]:
    return get_json(lab, PROVIDER, "pods", "-n", TWIN, "-l", selector)["items"]


def remote_shadows(lab, selector: str) -> list[dict]:
    return get_json(lab, PROVIDER, "shadowpods", "-n", TWIN, "-l", selector)["items"]


def events_of(lab, name: str) -> list[str]:
    """The provider's Events of the pod and the ShadowPod named `name` in the twin, oldest first."""
    listed = get_json(lab, PROVIDER, "events", "-n", TWIN, "--field-selector", f"involvedObject.name={name}")
    ordered = sorted(listed["items"], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [f"{e['involvedObject']['kind']} {e['reason']}: {e.get('message', '')}" for e in ordered]


def ready(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or []
    )


def all_running(lab, selector: str, count: int):
    local = local_pods(lab, selector)
    remote = remote_pods(lab, selector)
    if len(local) == count and len(remote) == count and all(map(ready, local)) and all(map(ready, remote)):
        return local, remote
    return None


def test_deployment_runs_remotely_with_translated_ips(lab, fed):
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=offloaded_deployment("web", 20))
    local, remote = wait_for(lambda: all_running(lab, "app=web", 20), timeout=120, what="20 pods Running both sides")

    provider_workers = {node.name for node in lab.recorded_config().cluster(PROVIDER).nodes}
    remote_by_name = {pod["metadata"]["name"]: pod for pod in remote}
    assert set(remote_by_name) == {pod["metadata"]["name"] for pod in local}
    assert {pod["spec"]["nodeName"] for pod in remote} <= provider_workers
    assert len(remote_shadows(lab, "app=web")) == 20

    remap = ipaddress.ip_network(REMAP)
    provider_range = ipaddress.ip_network(lab.recorded_config().cluster(PROVIDER).pod_cidr)
    local_ips = set()
    for pod in local:
        assert pod["spec"]["nodeName"] == NODE
        local_ip = ipaddress.ip_address(pod["status"]["podIP"])
        remote_ip = ipaddress.ip_address(remote_by_name[pod["metadata"]["name"]]["status"]["podIP"])
        assert local_ip in remap
        assert remote_ip in provider_range
        # The offset inside the range is kept, so translated addresses stay unique.
        assert int(local_ip) - int(remap.network_address) == int(remote_ip) - int(provider_range.network_address)
        assert pod["status"]["hostIP"] == "127.0.0.1"
        local_ips.add(local_ip)
    assert len(local_ips) == 20

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(lab)}/metrics", timeout=5).read().decode()
    reconciled = re.search(r'^catamaran_reconciles_total\{controller="pods",result="success"\} (\S+)$', metrics, re.M)
    assert reconciled
    assert float(reconciled.group(1)) >= 20
    for family in (
        "catamaran_queue_depth",
        "catamaran_reconcile_duration_seconds_bucket",
        "catamaran_watch_events_total",
    ):
        assert family in metrics

    lease = get_json(lab, CONSUMER, "lease", "-n", NODE_LEASE_NAMESPACE, NODE)
    assert lease["spec"]["holderIdentity"] == NODE
    assert lease["spec"]["leaseDurationSeconds"] == 40


def test_scale_down_removes_surplus_remote_pods(lab, fed):
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "scale", "deployment", "web", "--replicas=5")
    wait_for(
        lambda: len(remote_shadows(lab, "app=web")) == 5 and all_running(lab, "app=web", 5),
        timeout=90,
        what="5 pods and 5 ShadowPods",
    )


def test_remote_pod_is_recreated_while_the_consumer_is_stopped(lab, fed):
    fed["vk"].stop()
    try:
        lease_before = get_json(lab, CONSUMER, "lease", "-n", NODE_LEASE_NAMESPACE, NODE)["spec"]["renewTime"]
        local_before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in local_pods(lab, "app=web")}
        victim = remote_pods(lab, "app=web")[0]
        name, old_uid = victim["metadata"]["name"], victim["metadata"]["uid"]
        # A ShadowPod whose pod ran as it should has no status yet: the virtual kubelet reads the Pod's.
        before = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name).get("status", {}).get("recreations", 0)

        lab.kubectl(PROVIDER, "-n", TWIN, "delete", "pod", name, "--wait=true", timeout=90)
        recreated = wait_for(
            lambda: (
                (p := get_json(lab, PROVIDER, "pod", "-n", TWIN, name))["metadata"]["uid"] != old_uid and ready(p) and p
            ),
            timeout=60,
            what="the provider to recreate the deleted pod",
        )
        assert recreated["metadata"]["ownerReferences"][0]["kind"] == "ShadowPod"
        stamp = recreated["metadata"]["annotations"]["catamaran.io/recreations"]
        # Stamped 2 once (run 52, unexplained): the pod's and its ShadowPod's events and the manager's log tell which
        # pod went before this one.
        assert stamp == str(before + 1), "\n".join(
            [f"stamped {stamp}, recorded before {before}", *events_of(lab, name), fed["manager"].tail()]
        )
        assert get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name)["status"]["recreations"] == before + 1

        # Nothing but Catamaran drives the virtual node: with it stopped, the Lease and pods stand still.
        time.sleep(12)
        assert get_json(lab, CONSUMER, "lease", "-n", NODE_LEASE_NAMESPACE, NODE)["spec"]["renewTime"] == lease_before
        local_after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in local_pods(lab, "app=web")}
        assert local_after == local_before
    finally:  # the module's later tests need it, whatever happened here
        fed["vk"].start()
    wait_for(
        lambda: get_json(lab, CONSUMER, "lease", "-n", NODE_LEASE_NAMESPACE, NODE)["spec"]["renewTime"] != lease_before,
        what="the restarted virtual kubelet to renew its Lease",
    )
    local_pod = wait_for(
        lambda: (
            (p := get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, name))["status"]["containerStatuses"][0][
                "restartCount"
            ]
            == 1
            and p
        ),
        what="the replaced remote pod to show as a restart",
    )
    assert ready(local_pod)
    time.sleep(3)
    assert all_running(lab, "app=web", 5)
    assert len(remote_shadows(lab, "app=web")) == 5


def test_deleted_shadowpod_is_recreated_for_a_live_local_pod(lab, fed):
    shadow = remote_shadows(lab, "app=web")[0]
    name, old_uid = shadow["metadata"]["name"], shadow["metadata"]["uid"]
    lab.kubectl(PROVIDER, "-n", TWIN, "delete", "shadowpod", name, "--wait=true", timeout=90)

    def running_anew() -> bool:
        new_uid = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name)["metadata"]["uid"]
        pods = [p for p in remote_pods(lab, "app=web") if p["metadata"]["name"] == name]
        owners = [o["uid"] for p in pods for o in p["metadata"].get("ownerReferences") or []]
        return new_uid != old_uid and owners == [new_uid] and all(map(ready, pods))

    wait_for(running_anew, timeout=60, what="the virtual kubelet to recreate the ShadowPod, and its Pod running")
    wait_for(lambda: all_running(lab, "app=web", 5), what="5 pods Running both sides")
    assert len(remote_shadows(lab, "app=web")) == 5


def test_provider_outage_turns_the_node_not_ready_and_back(lab, fed):
    lab.stop_component(PROVIDER, "kube-apiserver")
    try:
        threshold = HEALTH["periodSeconds"] * HEALTH["failureThreshold"] + HEALTH["timeoutSeconds"] * 3
        wait_for(lambda: node_ready(lab) == "False", timeout=threshold + 15, what="virtual node NotReady")
        wait_for(
            lambda: all(not ready(p) for p in local_pods(lab, "app=web")) and len(local_pods(lab, "app=web")) == 5,
            timeout=30,
            what="local pods Ready=False",
        )
    finally:
        lab.start_component(PROVIDER, "kube-apiserver")
    wait_for(lambda: node_ready(lab) == "True", timeout=90, what="virtual node Ready again")
    wait_for(lambda: all_running(lab, "app=web", 5), timeout=60, what="pods Ready again")
    assert len(remote_shadows(lab, "app=web")) == 5


def expected_allocatable(lab) -> dict[str, str]:
    """Sharing percentage x (allocatable of schedulable provider nodes - requests of non-offloaded pods).

    This peering has no placement, so a node tainted NoSchedule or NoExecute (the real node) does not count.
    """
    nodes = [
        n
        for n in get_json(lab, PROVIDER, "nodes")["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])
        and not n["spec"].get("unschedulable")
        and not any(t["effect"] in ("NoSchedule", "NoExecute") for t in n["spec"].get("taints") or [])
    ]
    names = {n["metadata"]["name"] for n in nodes}
    pods = [
        p
        for p in get_json(lab, PROVIDER, "pods", "-A")["items"]
        if p["spec"].get("nodeName") in names
        and p["status"].get("phase") not in ("Succeeded", "Failed")
        and p["metadata"].get("labels", {}).get("catamaran.io/origin-cluster-id") != CONSUMER
    ]
    free = quantities.free_resources(
        [n["status"]["allocatable"] for n in nodes], [quantities.pod_requests(p["spec"]) for p in pods]
    )
    free_text = {r: quantities.format_quantity(r, quantities.round_down(r, v)) for r, v in free.items()}
    return quantities.share(free_text, SHARING)[0]


def node_allocatable(lab) -> dict[str, str]:
    return get_json(lab, CONSUMER, "node", NODE)["status"]["allocatable"]


def test_allocatable_follows_the_provider(lab, fed):
    wait_for(lambda: node_allocatable(lab) == expected_allocatable(lab), what="allocatable = 90% of free")
    cpu_before = quantities.parse(node_allocatable(lab)["cpu"])

    extra_node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "cluster-2-extra", "labels": {"catamaran.io/lab-node": "true", "type": "kwok"}},
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        },
    }
    load = {"name": "c", "image": "registry.invalid/load:1", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
    workload = deployment("local-load", 2, {"containers": [load]}, namespace="default")
    try:
        lab.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(extra_node))
        wait_for(
            lambda: quantities.parse(node_allocatable(lab)["cpu"]) == cpu_before + Fraction(72, 10),
            what="allocatable cpu to grow by 90% of the new node's 8 cpu",
        )
        assert node_allocatable(lab) == expected_allocatable(lab)

        lab.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(workload))
        wait_for(
            lambda: quantities.parse(node_allocatable(lab)["cpu"]) == cpu_before + Fraction(72, 10) - Fraction(36, 10),
            what="allocatable cpu to shrink by 90% of the non-offloaded 4 cpu",
        )
        wait_for(lambda: node_allocatable(lab) == expected_allocatable(lab), what="allocatable = 90% of free")
    finally:
        lab.kubectl(PROVIDER, "-n", "default", "delete", "deployment", "local-load", "--wait=false", check=False)
        lab.kubectl(PROVIDER, "delete", "node", "cluster-2-extra", "--wait=false", check=False)

    # cluster-2 has exactly one GPU (lab/lab.yaml): 90% of it rounds down to zero, and the node says why.
    node = get_json(lab, CONSUMER, "node", NODE)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    rounded = next(c for c in node["status"]["conditions"] if c["type"] == "catamaran.io/ResourcesRoundedToZero")
    assert rounded["status"] == "True"
    assert "nvidia.com/gpu: provider has 1, 90% rounds down to 0" in rounded["message"]
    events = get_json(lab, CONSUMER, "events", "-A", "--field-selector", f"involvedObject.name={NODE}")["items"]
    assert any(e["reason"] == "ResourceRoundedToZero" for e in events)


def test_succeeded_job_pod_is_reported_and_not_recreated(lab, fed):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": "once"}}, "spec": offloaded_pod_spec(restartPolicy="Never")},
        },
    }
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(job))
    remote = wait_for(lambda: (p := remote_pods(lab, "app=once")) and ready(p[0]) and p[0], what="the Job's remote pod")
    name, uid = remote["metadata"]["name"], remote["metadata"]["uid"]

    # The test plays the provider's kubelet: kwok completes only pods that a Job owns directly.
    finished = {
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": remote["status"]["startTime"],
                            "finishedAt": remote["status"]["startTime"],
                        }
                    },
                }
            ],
        }
    }
    lab.kubectl(
        PROVIDER, "-n", TWIN, "patch", "pod", name, "--subresource=status", "--type=merge", "-p", json.dumps(finished)
    )
    wait_for(
        lambda: get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, name)["status"]["phase"] == "Succeeded",
        what="the local pod to be Succeeded",
    )
    wait_for(
        lambda: get_json(lab, CONSUMER, "job", "-n", NAMESPACE, "once")["status"].get("succeeded") == 1,
        what="the Job to complete",
    )
    assert get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name)["status"]["phase"] == "Succeeded"

    lab.kubectl(PROVIDER, "-n", TWIN, "delete", "pod", name, "--wait=true", timeout=60)
    time.sleep(5)
    assert lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", name, check=False).returncode != 0
    assert get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name)["status"].get("recreations", 0) == 0
    assert uid


def test_provider_rejection_is_reported_locally(lab, fed):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "tight", "namespace": TWIN},
        "spec": {"hard": {"pods": "0"}},
    }
    apply_quota(lab, PROVIDER, quota)
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "refused", "labels": {"app": "refused"}},
            "spec": offloaded_pod_spec(),
        }
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(pod))
        condition = wait_for(
            lambda: next(
                (
                    c
                    for c in get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "refused")["status"].get("conditions", [])
                    if c["type"] == "catamaran.io/RemotePodCreated"
                ),
                None,
            ),
            what="the refusal on the local pod",
        )
        assert condition["status"] == "False"
        assert condition["reason"] == "QuotaExceeded"
        assert "exceeded quota" in condition["message"]
        events = wait_for(
            lambda: [
                e
                for e in get_json(
                    lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=refused"
                )["items"]
                if e["reason"] == "RemoteQuotaExceeded"
            ],
            what="a RemoteQuotaExceeded event",
        )
        assert "exceeded quota" in events[0]["message"]
        local = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "refused")
        assert local["status"]["phase"] == "Pending"
        assert local["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "QuotaExceeded"
    finally:
        lab.kubectl(PROVIDER, "-n", TWIN, "delete", "resourcequota", "tight", check=False)
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "refused", "--wait=false", check=False)
