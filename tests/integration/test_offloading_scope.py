"""Only offloaded namespaces are offloaded, DaemonSet pods never are; a bad ForeignCluster spec is reported.

Consumer cluster-1, provider cluster-2 (kwok runs the remote pods). A pod that reaches the virtual node
without being offloadable (a kube-system DaemonSet tolerating every taint, a pod of a plain namespace
given the node by name or by a blanket toleration) stays Pending on the consumer with the reason,
and nothing of it, not even a twin namespace, appears on a provider. The peering's remap range is
smaller than the provider's pod range on purpose, which must show on the node and the ForeignCluster.
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import SYSTEM_NAMESPACE, tenant_namespace, virtual_node_name

from . import federation
from .lab_access import get_json, wait_for
from .manifests import container

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER, SPARE_PROVIDER = "cluster-1", "cluster-2", "cluster-3"
NODE = virtual_node_name(PROVIDER)
OFFLOADED = "scope-offloaded"
PLAIN = "scope-plain"
SMALL_REMAP = "10.200.0.0/24"  # the provider's pod range is a /16
REMOTE_CONDITION = "catamaran.io/RemotePodCreated"
UNTRANSLATED = "catamaran.io/PodIPsUntranslated"
BLANKET_TOLERATION = [{"operator": "Exists"}]


@pytest.fixture(scope="module")
def fed(lab):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER, networking={"podCIDRRemap": SMALL_REMAP})
    processes = [federation.manager(lab, PROVIDER), federation.virtual_kubelet(lab, CONSUMER, PROVIDER)]
    with federation.serving(lab, CONSUMER, PROVIDER, OFFLOADED, processes):
        yield processes


def local_pod(lab, namespace: str, name: str) -> dict | None:
    result = lab.kubectl(CONSUMER, "-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def held_as(pod: dict | None, reason: str) -> dict | None:
    """The pod's RemotePodCreated condition when the pod is Pending with `reason` everywhere kubectl shows it."""
    if pod is None or pod["status"].get("phase") != "Pending" or pod["status"].get("reason") != reason:
        return None
    return next(
        (c for c in pod["status"].get("conditions") or [] if c["type"] == REMOTE_CONDITION and c["reason"] == reason),
        None,
    )


def warnings(lab, namespace: str, name: str, reason: str) -> list[dict]:
    selector = f"involvedObject.name={name},reason={reason}"
    events = get_json(lab, CONSUMER, "events", "-n", namespace, "--field-selector", selector)["items"]
    return [e for e in events if e["type"] == "Warning"]


def twins(lab) -> set[str]:
    listing = get_json(lab, PROVIDER, "twinnamespaces", "-n", tenant_namespace(CONSUMER))["items"]
    return {t["metadata"]["name"] for t in listing}


def namespace_exists(lab, cluster: str, name: str) -> bool:
    return lab.kubectl(cluster, "get", "namespace", name, check=False).returncode == 0


def pods_anywhere(lab, cluster: str, selector: str) -> list[dict]:
    return get_json(lab, cluster, "pods", "-A", "-l", selector)["items"]


def test_a_kube_system_daemonset_tolerating_every_taint_never_reaches_a_provider(lab, fed):
    name = "scope-node-agent"
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"tolerations": BLANKET_TOLERATION, "containers": [container()]},
            },
        },
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(daemonset))
    try:

        def pod_on_virtual_node():
            pods = get_json(
                lab,
                CONSUMER,
                "pods",
                "-n",
                "kube-system",
                "-l",
                f"app={name}",
                "--field-selector",
                f"spec.nodeName={NODE}",
            )["items"]
            return pods[0] if pods and held_as(pods[0], "DaemonSetNotOffloaded") else None

        pod = wait_for(pod_on_virtual_node, timeout=60, what="the DaemonSet's pod on the virtual node held")
        pod_name = pod["metadata"]["name"]
        condition = held_as(pod, "DaemonSetNotOffloaded")
        assert condition["status"] == "False"
        assert "DaemonSet pods are never offloaded" in condition["message"]
        assert NODE in condition["message"]
        assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "DaemonSetNotOffloaded"
        events = wait_for(lambda: warnings(lab, "kube-system", pod_name, "DaemonSetNotOffloaded"), what="the Event")
        assert len(events) == 1

        # Nothing of it on any provider: no ShadowPod or pod, no twin for kube-system.
        assert f"kube-system-{CONSUMER}" not in twins(lab)
        assert not namespace_exists(lab, PROVIDER, f"kube-system-{CONSUMER}")
        for provider in (PROVIDER, SPARE_PROVIDER):
            assert pods_anywhere(lab, provider, f"app={name}") == []
        assert get_json(lab, PROVIDER, "shadowpods", "-A", "-l", f"app={name}")["items"] == []
    finally:
        lab.kubectl(CONSUMER, "-n", "kube-system", "delete", "daemonset", name, "--wait=false", check=False)


def test_a_pod_of_a_plain_namespace_waits_with_a_reason_until_the_namespace_is_offloaded(lab, fed):
    lab.kubectl(CONSUMER, "create", "namespace", PLAIN)
    try:
        wait_for(lambda: lab.kubectl(CONSUMER, "-n", PLAIN, "get", "sa", "default", check=False).returncode == 0)
        by_toleration = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "tolerates-all", "labels": {"app": "scope-plain"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "tolerations": BLANKET_TOLERATION,
                "containers": [container()],
            },
        }
        by_name = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "named-node", "labels": {"app": "scope-plain"}},
            "spec": {"nodeName": NODE, "tolerations": BLANKET_TOLERATION, "containers": [container()]},
        }
        lab.kubectl(CONSUMER, "-n", PLAIN, "apply", "-f", "-", input=federation.as_list([by_toleration, by_name]))
        for name in ("tolerates-all", "named-node"):
            condition = wait_for(
                lambda n=name: held_as(local_pod(lab, PLAIN, n), "OffloadingBackOff"), what=f"{name} held"
            )
            assert f"namespace {PLAIN} is not offloaded" in condition["message"]
            assert PROVIDER in condition["message"]
            assert f"NamespaceOffloading named 'offloading' in namespace {PLAIN}" in condition["message"]
            events = wait_for(lambda n=name: warnings(lab, PLAIN, n, "OffloadingBackOff"), what=f"{name}'s Event")
            assert len(events) == 1
            assert events[0]["message"] == condition["message"]
        twin = f"{PLAIN}-{CONSUMER}"
        assert twin not in twins(lab)
        assert not namespace_exists(lab, PROVIDER, twin)
        assert pods_anywhere(lab, PROVIDER, "app=scope-plain") == []

        federation.offload_namespace(lab, CONSUMER, PLAIN)

        def running(name: str) -> dict | None:
            pod = local_pod(lab, PLAIN, name)
            return pod if pod and pod["status"].get("phase") == "Running" else None

        for name in ("tolerates-all", "named-node"):
            pod = wait_for(lambda n=name: running(n), timeout=90, what=f"{name} Running once {PLAIN} is offloaded")
            assert pod["status"].get("reason") is None
            assert REMOTE_CONDITION not in {c["type"] for c in pod["status"].get("conditions") or []}
        assert twin in twins(lab)
        remote = get_json(lab, PROVIDER, "pods", "-n", twin, "-l", "app=scope-plain")["items"]
        assert sorted(p["metadata"]["name"] for p in remote) == ["named-node", "tolerates-all"]
        # Held once each, never again once offloaded.
        for name in ("tolerates-all", "named-node"):
            assert len(warnings(lab, PLAIN, name, "OffloadingBackOff")) == 1
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", PLAIN, "--timeout=90s", check=False, timeout=120)


def test_a_remap_range_smaller_than_the_providers_pod_range_is_reported(lab, fed):
    def untranslated(conditions: list[dict]) -> dict | None:
        return next((c for c in conditions if c["type"] == UNTRANSLATED and c["status"] == "True"), None)

    on_node = wait_for(
        lambda: untranslated(get_json(lab, CONSUMER, "node", NODE)["status"].get("conditions") or []),
        what="the untranslated-IPs condition on the virtual node",
    )
    assert on_node["reason"] == "RemapRangeTooSmall"
    assert SMALL_REMAP in on_node["message"]
    assert "spec.networking.podCIDRRemap" in on_node["message"]
    foreign = get_json(lab, CONSUMER, "foreigncluster", "-n", SYSTEM_NAMESPACE, PROVIDER)
    on_foreign = wait_for(
        lambda: untranslated(
            get_json(lab, CONSUMER, "foreigncluster", "-n", SYSTEM_NAMESPACE, PROVIDER)["status"].get("conditions")
            or []
        ),
        what="the untranslated-IPs condition on the ForeignCluster",
    )
    assert on_foreign["message"] == on_node["message"]
    events = get_json(
        lab, CONSUMER, "events", "-n", SYSTEM_NAMESPACE, "--field-selector",
        f"involvedObject.name={PROVIDER},reason=RemapRangeTooSmall",
    )["items"]  # fmt: skip
    assert [e["type"] for e in events] == ["Warning"]
    assert foreign["spec"]["networking"]["podCIDRRemap"] == SMALL_REMAP


def test_invalid_node_labels_are_reported_and_a_fix_is_served(lab, fed):
    federation.install_crds(lab, SPARE_PROVIDER)
    federation.peer(lab, CONSUMER, SPARE_PROVIDER, nodeLabels={"bad key": "x", "topology.kubernetes.io/zone": "z1"})
    vk = federation.virtual_kubelet(lab, CONSUMER, SPARE_PROVIDER)
    spare_node = virtual_node_name(SPARE_PROVIDER)

    def ready_condition() -> dict | None:
        foreign = get_json(lab, CONSUMER, "foreigncluster", "-n", SYSTEM_NAMESPACE, SPARE_PROVIDER)
        return next((c for c in foreign.get("status", {}).get("conditions") or [] if c["type"] == "Ready"), None)

    vk.start()
    try:
        condition = wait_for(
            lambda: (c := ready_condition()) and c["reason"] == "InvalidSpec" and c,
            what="Ready=False InvalidSpec on the ForeignCluster",
        )
        assert condition["status"] == "False"
        assert "spec.nodeLabels['bad key']" in condition["message"]
        events = get_json(
            lab, CONSUMER, "events", "-n", SYSTEM_NAMESPACE, "--field-selector",
            f"involvedObject.name={SPARE_PROVIDER},reason=InvalidSpec",
        )["items"]  # fmt: skip
        assert [e["type"] for e in events] == ["Warning"]
        assert "spec.nodeLabels['bad key']" in events[0]["message"]
        assert lab.kubectl(CONSUMER, "get", "node", spare_node, check=False).returncode != 0
        assert vk.running

        fix = {"spec": {"nodeLabels": {"bad key": None}}}
        lab.kubectl(
            CONSUMER, "-n", SYSTEM_NAMESPACE, "patch", "foreigncluster", SPARE_PROVIDER, "--type=merge",
            "-p", json.dumps(fix),
        )  # fmt: skip
        fixed = wait_for(lambda: (c := ready_condition()) and c["status"] == "True" and c, what="Ready once fixed")
        assert fixed["reason"] != "InvalidSpec"
        node = wait_for(
            lambda: (
                (r := lab.kubectl(CONSUMER, "get", "node", spare_node, "-o", "json", check=False)).returncode == 0
                and json.loads(r.stdout)
            ),
            what=f"virtual node {spare_node}",
        )
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "z1"
    finally:
        vk.stop()
        federation.unpeer(lab, CONSUMER, SPARE_PROVIDER)
