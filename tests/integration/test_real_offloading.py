"""Offloaded pods as real containers: consumer cluster-1, provider cluster-3, placed on its real node.

The peering's placement (the tenant's ResourceOffer) sends every pod the manager creates to the
provider's real node, so the kubelet there checks what kwok never would: the ConfigMap a pod mounts,
the process it runs. The tests run in file order and share one federation.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest

from catamaran import quantities
from catamaran.constants import tenant_namespace, virtual_node_name

from . import federation
from .lab_access import get_json, kill_container_process, require_real_node, wait_for
from .manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, real_pod

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-3"
NODE = virtual_node_name(PROVIDER)
NAMESPACE = "realoff"
TWIN = f"{NAMESPACE}-{CONSUMER}"
HEALTH = {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3}
TO_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
}


@pytest.fixture(scope="module")
def fed(lab, lab_config_in_use):
    provider_node = require_real_node(lab_config_in_use.cluster(PROVIDER))
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER, healthCheck=HEALTH)
    federation.place(lab, CONSUMER, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    processes = [federation.manager(lab, PROVIDER), federation.virtual_kubelet(lab, CONSUMER, PROVIDER)]
    with federation.serving(lab, CONSUMER, PROVIDER, NAMESPACE, processes):
        yield provider_node


def offloaded_pod(name: str, command: list[str], **spec) -> dict:
    pod = real_pod(name, command, **spec)
    pod["spec"].update(TO_VIRTUAL_NODE)  # the provider's placement, not the pod, picks the real node there
    return pod


def create(lab, pod: dict) -> None:
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(pod))


def pod_status(lab, cluster: str, namespace: str, name: str) -> dict:
    return get_json(lab, cluster, "pod", "-n", namespace, name)


def main_container(status: dict) -> dict:
    return next(iter(status["status"].get("containerStatuses") or []), {})


def test_offloaded_pod_runs_as_a_real_container_and_its_restarts_flow_back(lab, fed):
    create(lab, offloaded_pod("worker", ["sh", "-c", "echo working; exec sleep 3600"]))

    def running_locally():
        local = pod_status(lab, CONSUMER, NAMESPACE, "worker")
        container = main_container(local)
        return local["status"].get("phase") == "Running" and container.get("ready") and local

    local = wait_for(running_locally, timeout=90, what="the offloaded pod Running on the consumer")
    remote = pod_status(lab, PROVIDER, TWIN, "worker")
    assert local["spec"]["nodeName"] == NODE
    assert remote["spec"]["nodeName"] == fed.name, "the peering's placement sends it to the real node"
    container_id = main_container(local)["containerID"]
    assert re.fullmatch(r"containerd://[0-9a-f]{64}", container_id)
    assert main_container(remote)["containerID"] == container_id
    assert main_container(local)["restartCount"] == 0

    assert kill_container_process(container_id) >= 1

    def restarted():
        now = pod_status(lab, CONSUMER, NAMESPACE, "worker")
        container = main_container(now)
        return (
            container.get("restartCount", 0) >= 1
            and container.get("containerID") not in (None, container_id)
            and "running" in (container.get("state") or {})
            and now
        )

    after = wait_for(restarted, timeout=90, what="the restart of the killed container on the consumer")
    last = main_container(after)["lastState"]["terminated"]
    assert last["exitCode"] == 137
    assert last["containerID"] == container_id


def test_pod_without_its_configmap_stays_creating_and_the_consumer_shows_why(lab, fed):
    pod = offloaded_pod(
        "needs-config",
        ["sleep", "3600"],
        container={"volumeMounts": [{"name": "config", "mountPath": "/config"}]},
        volumes=[{"name": "config", "configMap": {"name": "absent-config"}}],
    )
    create(lab, pod)

    def failed_mount_event():
        events = get_json(
            lab, CONSUMER, "events", "-n", NAMESPACE,
            "--field-selector", "involvedObject.kind=Pod,involvedObject.name=needs-config,reason=FailedMount",
        )["items"]  # fmt: skip
        return events[0] if events else None

    event = wait_for(failed_mount_event, timeout=90, what="the provider kubelet's FailedMount event on the local pod")
    assert 'configmap "absent-config" not found' in event["message"]
    assert event["type"] == "Warning"
    assert event["source"]["component"] == f"{PROVIDER} (remote)"
    assert event["involvedObject"]["uid"] == pod_status(lab, CONSUMER, NAMESPACE, "needs-config")["metadata"]["uid"]

    # The provider's scheduler placed the pod before its kubelet failed the mount, but its Scheduled event stays there:
    # the local pod has the consumer's scheduler's own only (the one binding it to the virtual node).
    def scheduled_events(cluster, namespace):
        selector = "involvedObject.kind=Pod,involvedObject.name=needs-config,reason=Scheduled"
        return get_json(lab, cluster, "events", "-n", namespace, "--field-selector", selector)["items"]

    assert scheduled_events(PROVIDER, TWIN), "the provider's scheduler recorded no Scheduled event for the remote pod"
    local_scheduled = scheduled_events(CONSUMER, NAMESPACE)
    assert [e["message"] for e in local_scheduled] == [f"Successfully assigned {NAMESPACE}/needs-config to {NODE}"]

    # The event and the pod's status travel separately: the status may arrive a moment later.
    local = wait_for(
        lambda: (
            (status := pod_status(lab, CONSUMER, NAMESPACE, "needs-config"))
            and main_container(status).get("state")
            and status
        ),
        timeout=60,
        what="the remote container's status on the local pod",
    )
    assert local["status"]["phase"] == "Pending"
    assert main_container(local)["state"]["waiting"]["reason"] == "ContainerCreating"
    remote = pod_status(lab, PROVIDER, TWIN, "needs-config")
    assert remote["spec"]["nodeName"] == fed.name
    # The kubelet keeps retrying: the mirrored event's count follows the remote one.
    wait_for(
        lambda: (e := failed_mount_event()) and e["count"] > event["count"],
        timeout=120,
        what="the mirrored event's count to grow",
    )


def test_provider_kubelet_death_reaches_the_consumer_as_the_provider_reports_it(lab, fed):
    create(lab, offloaded_pod("steady", ["sleep", "3600"]))
    wait_for(
        lambda: main_container(pod_status(lab, CONSUMER, NAMESPACE, "steady")).get("ready"),
        timeout=90,
        what="steady Ready on the consumer",
    )
    lab.stop_component(PROVIDER, "kubelet")
    try:
        wait_for(
            lambda: federation.node_ready(lab, PROVIDER, fed.name) == "Unknown",
            timeout=150,
            what=f"{fed.name} NotReady once its kubelet stops posting status",
        )

        def ready_condition(cluster, namespace):
            status = pod_status(lab, cluster, namespace, "steady")
            return next((c for c in status["status"]["conditions"] if c["type"] == "Ready"), {})

        remote_ready = wait_for(
            lambda: (c := ready_condition(PROVIDER, TWIN)).get("status") == "False" and c,
            timeout=60,
            what="the provider marking the pod not ready",
        )
        local_ready = wait_for(
            lambda: (c := ready_condition(CONSUMER, NAMESPACE)).get("status") == "False" and c,
            timeout=30,
            what="the consumer showing what the provider reports",
        )
        assert local_ready.get("reason") == remote_ready.get("reason")
        assert federation.node_ready(lab, CONSUMER, NODE) == "True", "the provider's API server is still reachable"
    finally:
        lab.start_component(PROVIDER, "kubelet")
    wait_for(
        lambda: federation.node_ready(lab, PROVIDER, fed.name) == "True", timeout=90, what=f"{fed.name} Ready again"
    )
    wait_for(
        lambda: main_container(pod_status(lab, CONSUMER, NAMESPACE, "steady")).get("ready"),
        timeout=90,
        what="steady Ready again on the consumer",
    )


def test_a_pod_ignoring_sigterm_for_ten_years_stops_within_the_providers_bound(lab, fed):
    """The provider bounds how long a tenant's pod may take to stop (5 s granted here; 300 by default), so its
    eviction (what a drain sends) and its deletion end, and only the annotations its terms allow reach it."""
    federation.grant_terms_in_force(lab, CONSUMER, PROVIDER, TWIN, pods={"maxTerminationGracePeriodSeconds": 5})
    try:
        pod = offloaded_pod(
            "stubborn",
            ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
            terminationGracePeriodSeconds=315360000,
        )
        pod["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/default-container": "main",
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
            "k8s.v1.cni.cncf.io/networks": "provider-internal",
        }
        create(lab, pod)
        remote = wait_for(
            lambda: (
                (status := pod_status(lab, PROVIDER, TWIN, "stubborn"))["status"].get("phase") == "Running" and status
            ),
            timeout=90,
            what="stubborn running on the provider's real node",
        )
        assert remote["spec"]["terminationGracePeriodSeconds"] == 5
        assert {k: v for k, v in remote["metadata"].get("annotations", {}).items() if "/" in k} == {
            "kubectl.kubernetes.io/default-container": "main"
        }

        # The provider drains its node: the eviction ends in the bound, and the ShadowPod's pod is made again.
        uid = remote["metadata"]["uid"]
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "stubborn", "namespace": TWIN}}
        lab.kubectl(
            PROVIDER, "create", "--raw", f"/api/v1/namespaces/{TWIN}/pods/stubborn/eviction", "-f", "-",
            input=json.dumps(eviction),
        )  # fmt: skip

        def remote_uid():
            result = lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", "stubborn", "-o", "json", check=False)
            return json.loads(result.stdout)["metadata"]["uid"] if result.returncode == 0 else None

        wait_for(lambda: remote_uid() != uid, timeout=60, what="the evicted pod gone from the provider")

        # The consumer deletes it with its own ten years of grace: the provider's bound ends that too.
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "stubborn", "--wait=false")
        wait_for(
            lambda: lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "pod", "stubborn", check=False).returncode != 0,
            timeout=90,
            what="the local pod deleted",
        )
        assert remote_uid() is None
    finally:
        federation.grant_terms(lab, CONSUMER, PROVIDER)
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "stubborn", "--grace-period=0", "--force", check=False)


def container_resources(status: dict) -> dict:
    return main_container(status).get("resources") or {}


def resize(lab, name: str, requests: dict, limits: dict | None = None) -> None:
    """`kubectl patch --subresource resize` of the local pod's container, as a user resizes a pod in place."""
    resources = {"requests": requests, **({"limits": limits} if limits else {})}
    body = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "patch", "pod", name, "--subresource", "resize", "-p", json.dumps(body))


def offer_cpu(lab) -> tuple[Fraction, Fraction]:
    """The tenant's CPU quota on the provider and what its pods use of it, as its ResourceOffer says."""
    offer = get_json(lab, PROVIDER, "resourceoffer", "resources", "-n", tenant_namespace(CONSUMER))["status"]
    return quantities.parse(offer["quota"]["cpu"]), quantities.parse(offer["used"]["cpu"])


def test_a_resize_reaches_the_remote_container_in_place_as_its_resize_policy_says(lab, fed):
    """CPU and memory up and down on a running offloaded pod: the same remote pod each time, its container restarted
    only for memory (its resizePolicy), the local pod showing what the remote kubelet applied, the tenant's usage on
    the provider following."""
    pod = offloaded_pod(
        "resizable",
        ["sleep", "3600"],
        container={
            "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
            "resizePolicy": [
                {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                {"resourceName": "memory", "restartPolicy": "RestartContainer"},
            ],
        },
    )
    create(lab, pod)
    wait_for(
        lambda: main_container(pod_status(lab, CONSUMER, NAMESPACE, "resizable")).get("ready"),
        timeout=90,
        what="resizable Ready on the consumer",
    )
    remote_uid = pod_status(lab, PROVIDER, TWIN, "resizable")["metadata"]["uid"]
    assert pod_status(lab, CONSUMER, NAMESPACE, "resizable")["status"].get("observedGeneration") == 1

    steps = [
        ({"cpu": "15m", "memory": "16Mi"}, {"memory": "32Mi"}, 0),  # cpu up: no restart
        ({"cpu": "15m", "memory": "24Mi"}, {"memory": "48Mi"}, 1),  # memory up: restarted, as its policy says
        ({"cpu": "10m", "memory": "24Mi"}, {"memory": "48Mi"}, 1),  # cpu down
        ({"cpu": "10m", "memory": "20Mi"}, {"memory": "40Mi"}, 2),  # memory down
    ]
    for requests, limits, restarts in steps:
        resize(lab, "resizable", requests, limits)

        def applied(requests=requests, limits=limits, restarts=restarts):
            local = pod_status(lab, CONSUMER, NAMESPACE, "resizable")
            shown = container_resources(local)
            conditions = {c["type"] for c in local["status"].get("conditions") or []}
            return (
                shown.get("requests", {}).get("cpu") == requests["cpu"]
                and shown.get("requests", {}).get("memory") == requests["memory"]
                and shown.get("limits", {}).get("memory") == limits["memory"]
                and main_container(local).get("restartCount") == restarts
                and main_container(local).get("ready")
                and not conditions & {"PodResizePending", "PodResizeInProgress"}
                # As a kubelet says it acted on the resized spec: its generation observed.
                and local["status"].get("observedGeneration") == local["metadata"]["generation"]
                and local
            )

        local = wait_for(applied, timeout=60, what=f"the resize to {requests} applied and shown on the consumer")
        assert main_container(local)["allocatedResources"]["cpu"] == requests["cpu"]
        remote = pod_status(lab, PROVIDER, TWIN, "resizable")
        assert remote["metadata"]["uid"] == remote_uid, "resized in place, never recreated"
        assert remote["spec"]["containers"][0]["resources"]["requests"]["cpu"] == requests["cpu"]
        assert main_container(remote)["restartCount"] == restarts

    # What the tenant's pods request on the provider, the resized one at its new 10m, is what its offer says it uses.
    def requested_by_the_tenants_pods() -> Fraction:
        pods = get_json(lab, PROVIDER, "pods", "-A", "-l", f"catamaran.io/origin-cluster-id={CONSUMER}")["items"]
        live = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]
        return sum((quantities.pod_requests(p["spec"]).get("cpu", Fraction(0)) for p in live), Fraction(0))

    wait_for(
        lambda: offer_cpu(lab)[1] == requested_by_the_tenants_pods(),
        timeout=30,
        what="the tenant's used CPU on the ResourceOffer following the resize",
    )


def test_a_resize_past_the_tenants_quota_waits_saying_why_and_happens_once_the_quota_frees(lab, fed):
    """The provider holds a resize to the tenant's quota: while another pod of the tenant holds it, the local pod shows
    PodResizePending (Deferred) with the provider's reason and keeps its resources; once that pod goes, the resize
    happens."""
    create(lab, offloaded_pod("grows", ["sleep", "3600"], container={"resources": {"requests": {"cpu": "10m"}}}))
    wait_for(
        lambda: main_container(pod_status(lab, CONSUMER, NAMESPACE, "grows")).get("ready"),
        timeout=90,
        what="grows Ready on the consumer",
    )
    quota, used = offer_cpu(lab)
    half = (quota - used) / 2
    hog = offloaded_pod(
        "hog", ["sleep", "3600"], container={"resources": {"requests": {"cpu": f"{int(half * 1000)}m"}}}
    )
    create(lab, hog)
    try:
        wait_for(
            lambda: main_container(pod_status(lab, CONSUMER, NAMESPACE, "hog")).get("ready"),
            timeout=90,
            what="hog Ready on the consumer",
        )
        wanted = f"{int(half * 1000) + 100}m"  # with hog's half, past the quota; alone, well within it
        resize(lab, "grows", {"cpu": wanted})

        def pending():
            local = pod_status(lab, CONSUMER, NAMESPACE, "grows")
            return next((c for c in local["status"]["conditions"] if c["type"] == "PodResizePending"), None)

        condition = wait_for(pending, timeout=30, what="PodResizePending on the consumer's pod")
        assert condition["status"] == "True"
        assert condition["reason"] == "Deferred"
        assert f"exceeds the quota of tenant {CONSUMER}" in condition["message"]
        remote = pod_status(lab, PROVIDER, TWIN, "grows")
        assert remote["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "10m", "the remote pod is as it was"
        event = wait_for(
            lambda: get_json(
                lab,
                CONSUMER,
                "events",
                "-n",
                NAMESPACE,
                "--field-selector",
                "involvedObject.name=grows,reason=ResizeRefused",
            )["items"],
            timeout=30,
            what="the provider's ResizeRefused Event mirrored onto the consumer's pod",
        )[0]
        assert event["type"] == "Warning"
    finally:
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "hog", "--wait=false")

    wait_for(
        lambda: (
            container_resources(pod_status(lab, CONSUMER, NAMESPACE, "grows")).get("requests", {}).get("cpu") == wanted
        ),
        timeout=60,
        what="the resize applied once hog freed the quota",
    )
    wait_for(lambda: pending() is None, timeout=30, what="PodResizePending gone from the consumer's pod")
