"""Namespace extension: NamespaceOffloading, twin namespaces and the pod mutating webhook.

Lab: consumer cluster-1; providers cluster-2 (virtual node labelled region-b, "A") and cluster-3
(region-c, "B"). The webhook is served by cluster-1's manager over TLS and registered with the real
kube-apiserver; pods are placed by the stock scheduler.
"""

from __future__ import annotations

import json
import time

import pytest

from catamaran.constants import virtual_node_name

from . import federation
from .lab_access import apply_quota, get_json, wait_for
from .manifests import container, deployment

pytestmark = pytest.mark.integration

CONSUMER = "cluster-1"
PROVIDER_A, PROVIDER_B = "cluster-2", "cluster-3"
REGIONS = {PROVIDER_A: "region-b", PROVIDER_B: "region-c"}
NODE_A, NODE_B = virtual_node_name(PROVIDER_A), virtual_node_name(PROVIDER_B)
REGION = "topology.kubernetes.io/region"


@pytest.fixture(scope="module")
def fed(lab):
    for cluster in (CONSUMER, PROVIDER_A, PROVIDER_B):
        federation.install_crds(lab, cluster)
    for provider, region in REGIONS.items():
        federation.peer(
            lab,
            CONSUMER,
            provider,
            nodeLabels={REGION: region},
            networking={"podCIDRRemap": f"10.{200 + int(provider[-1])}.0.0/16"},
        )
        # Same and selected twin names are the provider's to allow (the default is <name>-<consumer-id> only).
        federation.grant_terms(lab, CONSUMER, provider, twinNamespaceNames="Any")
    consumer_manager = federation.consumer_manager(lab, CONSUMER)
    processes = {
        "consumer": consumer_manager,
        **{f"manager-{p}": federation.manager(lab, p) for p in REGIONS},
        **{f"vk-{p}": federation.virtual_kubelet(lab, CONSUMER, p) for p in REGIONS},
    }
    for process in processes.values():
        process.start()
    created: list[str] = []
    try:
        for node in (NODE_A, NODE_B):
            wait_for(lambda n=node: node_condition(lab, n) == "True", timeout=60, what=f"{node} Ready")
        federation.webhook_registered(lab, CONSUMER)
        yield {"processes": processes, "namespaces": created}
    finally:
        try:
            # Every offloading's teardown started at once, then awaited: each waits on its twins' pods.
            for namespace in created:
                lab.kubectl(
                    CONSUMER,
                    "-n",
                    namespace,
                    "delete",
                    "namespaceoffloading",
                    "offloading",
                    "--wait=false",
                    check=False,
                )
            for namespace in created:
                lab.kubectl(
                    CONSUMER, "-n", namespace, "wait", "--for=delete", "namespaceoffloading/offloading",
                    "--timeout=90s", check=False, timeout=120,
                )  # fmt: skip
                lab.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false", check=False)
        finally:  # the processes stop and the peerings go even when an offloading's teardown did not finish
            for process in processes.values():
                process.stop()
            lab.kubectl(CONSUMER, "delete", "mutatingwebhookconfiguration", "catamaran-pod-offloading", check=False)
            for provider in REGIONS:
                federation.unpeer(lab, CONSUMER, provider)


def node_condition(lab, node: str, kind: str = "Ready") -> str | None:
    result = lab.kubectl(CONSUMER, "get", "node", node, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    return next(
        (c["status"] for c in json.loads(result.stdout).get("status", {}).get("conditions", []) if c["type"] == kind),
        None,
    )


def offload(lab, fed, namespace: str, **spec) -> None:
    lab.kubectl(CONSUMER, "create", "namespace", namespace, check=False)
    fed["namespaces"].append(namespace)
    federation.offload_namespace(lab, CONSUMER, namespace, **spec)
    wait_for(lambda: lab.kubectl(CONSUMER, "-n", namespace, "get", "sa", "default", check=False).returncode == 0)


def offloading(lab, namespace: str) -> dict:
    return get_json(lab, CONSUMER, "namespaceoffloading", "-n", namespace, "offloading")


def phase(lab, namespace: str) -> str | None:
    result = lab.kubectl(
        CONSUMER, "-n", namespace, "get", "namespaceoffloading", "offloading", "-o", "json", check=False
    )
    return json.loads(result.stdout).get("status", {}).get("offloadingPhase") if result.returncode == 0 else None


def deploy(lab, namespace: str, name: str, replicas: int, cpu: str = "100m") -> None:
    body = deployment(name, replicas, {"containers": [container("c", cpu=cpu, memory="64Mi")]}, namespace)
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(body))


def placement(lab, namespace: str, name: str, count: int):
    pods = get_json(lab, CONSUMER, "pods", "-n", namespace, "-l", f"app={name}")["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    if len(pods) != count or len(running) != count:
        return None
    return sorted(p["spec"]["nodeName"] for p in pods)


def namespace_exists(lab, cluster: str, name: str) -> bool:
    return lab.kubectl(cluster, "get", "namespace", name, check=False).returncode == 0


def test_local_strategy_keeps_pods_on_physical_nodes(lab, fed):
    offload(lab, fed, "steer-local", podOffloadingStrategy="Local")
    wait_for(lambda: phase(lab, "steer-local") == "Ready", what="phase Ready")
    deploy(lab, "steer-local", "web", 4)
    nodes = wait_for(lambda: placement(lab, "steer-local", "web", 4), what="4 Running pods")
    local_workers = {n.name for n in lab.recorded_config().cluster(CONSUMER).nodes}
    assert set(nodes) <= local_workers


def test_remote_strategy_with_a_selector_uses_only_that_cluster(lab, fed):
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": REGION, "operator": "In", "values": [REGIONS[PROVIDER_B]]}]}
        ]
    }
    offload(lab, fed, "steer-remote", podOffloadingStrategy="Remote", clusterSelector=selector)
    wait_for(lambda: phase(lab, "steer-remote") == "Ready", what="phase Ready")
    deploy(lab, "steer-remote", "web", 4)
    nodes = wait_for(lambda: placement(lab, "steer-remote", "web", 4), what="4 Running pods")
    assert set(nodes) == {NODE_B}
    twin = "steer-remote-cluster-1"
    assert namespace_exists(lab, PROVIDER_B, twin)
    assert not namespace_exists(lab, PROVIDER_A, twin)
    remote = get_json(lab, PROVIDER_B, "pods", "-n", twin, "-l", "app=web")["items"]
    assert len(remote) == 4


def test_local_and_remote_spills_over_when_local_capacity_is_tight(lab, fed):
    offload(lab, fed, "steer-both")
    wait_for(lambda: phase(lab, "steer-both") == "Ready", what="phase Ready")
    # 6-cpu pods: every 8-cpu worker (local or remote) holds one, each virtual node offers 3
    # (90% of 24 cpu), so 7 replicas can only run with some pods on each side.
    deploy(lab, "steer-both", "big", 7, cpu="6")
    nodes = wait_for(lambda: placement(lab, "steer-both", "big", 7), timeout=90, what="7 Running pods")
    virtual = [n for n in nodes if n in (NODE_A, NODE_B)]
    local_workers = {n.name for n in lab.recorded_config().cluster(CONSUMER).nodes}
    assert 0 < len(virtual) < 7
    assert set(nodes) - set(virtual) <= local_workers


def test_mapping_strategies_name_the_twins(lab, fed):
    offload(lab, fed, "map-default")
    offload(lab, fed, "map-same", namespaceMappingStrategy="EnforceSameName")
    offload(lab, fed, "map-selected", namespaceMappingStrategy="SelectedName", remoteNamespaceName="chosen-name")
    expected = {"map-default": "map-default-cluster-1", "map-same": "map-same", "map-selected": "chosen-name"}
    for namespace, remote in expected.items():
        wait_for(lambda ns=namespace: phase(lab, ns) == "Ready", what=f"{namespace} Ready")
        status = offloading(lab, namespace)["status"]
        assert status["remoteNamespaceName"] == remote
        assert {e["clusterID"]: e["remoteNamespace"] for e in status["clusters"]} == {
            PROVIDER_A: remote,
            PROVIDER_B: remote,
        }
        for provider in REGIONS:
            labels = get_json(lab, provider, "namespace", remote)["metadata"]["labels"]
            assert labels["catamaran.io/origin-cluster-id"] == CONSUMER
            assert labels["catamaran.io/destination-cluster-id"] == provider


def test_foreign_namespace_is_reported_and_never_adopted(lab, fed):
    lab.kubectl(PROVIDER_A, "create", "namespace", "taken")
    lab.kubectl(PROVIDER_A, "-n", "taken", "create", "configmap", "owner", "--from-literal=team=someone-else")
    before = get_json(lab, PROVIDER_A, "namespace", "taken")["metadata"]
    try:
        offload(lab, fed, "taken", namespaceMappingStrategy="EnforceSameName")
        wait_for(lambda: phase(lab, "taken") == "SomeFailed", what="phase SomeFailed")
        status = offloading(lab, "taken")["status"]
        entry = next(e for e in status["clusters"] if e["clusterID"] == PROVIDER_A)
        assert entry["phase"] == "Failed"
        assert entry["reason"] == "Conflict"
        assert "not managed by Catamaran" in entry["message"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert "not managed by Catamaran" in ready["message"]
        after = get_json(lab, PROVIDER_A, "namespace", "taken")["metadata"]
        assert (after["labels"], after.get("annotations")) == (before["labels"], before.get("annotations"))
        assert get_json(lab, PROVIDER_A, "configmap", "-n", "taken", "owner")["data"] == {"team": "someone-else"}
    finally:
        lab.kubectl(
            CONSUMER,
            "-n",
            "taken",
            "delete",
            "namespaceoffloading",
            "offloading",
            "--timeout=60s",
            check=False,
            timeout=90,
        )
    assert namespace_exists(lab, PROVIDER_A, "taken")  # removing the offloading left it alone too
    lab.kubectl(PROVIDER_A, "delete", "namespace", "taken", "--wait=false")


def test_relabelled_virtual_node_gains_and_loses_its_twin(lab, fed):
    pool = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "catamaran.io/test-pool", "operator": "In", "values": ["gold"]}]}
        ]
    }
    offload(lab, fed, "follow", podOffloadingStrategy="Remote", clusterSelector=pool)
    twin = "follow-cluster-1"
    wait_for(lambda: phase(lab, "follow") == "NoClusterSelected", what="phase NoClusterSelected")
    try:
        lab.kubectl(CONSUMER, "label", "node", NODE_A, "catamaran.io/test-pool=gold")
        wait_for(lambda: phase(lab, "follow") == "Ready", what="phase Ready")
        assert namespace_exists(lab, PROVIDER_A, twin)
        assert not namespace_exists(lab, PROVIDER_B, twin)
        deploy(lab, "follow", "web", 3)
        assert set(wait_for(lambda: placement(lab, "follow", "web", 3), what="3 pods on A")) == {NODE_A}
    finally:
        lab.kubectl(CONSUMER, "label", "node", NODE_A, "catamaran.io/test-pool-")
    wait_for(lambda: not namespace_exists(lab, PROVIDER_A, twin), timeout=90, what="A's twin to go")
    pods = get_json(lab, CONSUMER, "pods", "-n", "follow", "-l", "app=web")["items"]
    assert all(p["spec"].get("nodeName") != NODE_A for p in pods)  # drained; replacements wait for a match
    assert phase(lab, "follow") == "NoClusterSelected"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"podOffloadingStrategy": "Anywhere"}, 'Unsupported value: "Anywhere"'),
        ({"namespaceMappingStrategy": "SelectedName"}, "remoteNamespaceName is required"),
        ({"namespaceMappingStrategy": "DefaultName", "remoteNamespaceName": "x"}, "only allowed with"),
    ],
)
def test_invalid_specs_are_rejected_by_the_api_server(lab, fed, spec, message):
    body = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "default"},
        "spec": spec,
    }
    result = lab.kubectl(CONSUMER, "apply", "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_mapping_strategy_is_immutable_and_name_is_fixed(lab, fed):
    offload(lab, fed, "immutable")
    changed = lab.kubectl(
        CONSUMER,
        "-n",
        "immutable",
        "patch",
        "namespaceoffloading",
        "offloading",
        "--type=merge",
        "-p",
        '{"spec":{"namespaceMappingStrategy":"EnforceSameName"}}',
        check=False,
    )
    assert changed.returncode != 0
    assert "namespaceMappingStrategy is immutable" in changed.stderr
    misnamed = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "other", "namespace": "immutable"},
        "spec": {},
    }
    result = lab.kubectl(CONSUMER, "apply", "--dry-run=server", "-f", "-", input=json.dumps(misnamed), check=False)
    assert 'must be named "offloading"' in result.stderr


def test_deleting_the_offloading_terminates_and_removes_twins(lab, fed):
    offload(lab, fed, "goodbye", podOffloadingStrategy="Remote")
    wait_for(lambda: phase(lab, "goodbye") == "Ready", what="phase Ready")
    deploy(lab, "goodbye", "web", 4)
    wait_for(lambda: placement(lab, "goodbye", "web", 4), what="4 Running pods")
    twin = "goodbye-cluster-1"
    lab.kubectl(CONSUMER, "-n", "goodbye", "delete", "namespaceoffloading", "offloading", "--wait=false")
    seen = wait_for(lambda: phase(lab, "goodbye") == "Terminating", timeout=30, what="phase Terminating")
    assert seen
    wait_for(lambda: phase(lab, "goodbye") is None, timeout=120, what="the offloading to be gone")
    for provider in REGIONS:
        assert not namespace_exists(lab, provider, twin)
        shadows = get_json(lab, provider, "shadowpods", "-A", "-l", "app=web")["items"]
        assert not [s for s in shadows if s["metadata"]["annotations"]["catamaran.io/local-namespace"] == "goodbye"]
        assert not get_json(
            lab, provider, "pods", "-A", "-l", "app=web", "--field-selector", f"metadata.namespace={twin}"
        )["items"]
    labels = get_json(lab, CONSUMER, "namespace", "goodbye")["metadata"].get("labels", {})
    assert "catamaran.io/offloading-enabled" not in labels
    # New pods are no longer steered; existing replacements run locally.
    nodes = wait_for(lambda: placement(lab, "goodbye", "web", 4), what="pods back on local nodes")
    assert not set(nodes) & {NODE_A, NODE_B}


def test_webhook_outage_follows_the_failure_policy(lab, fed):
    offload(lab, fed, "guarded")
    wait_for(lambda: phase(lab, "guarded") == "Ready", what="phase Ready")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [container("c")]},
    }
    manager = fed["processes"]["consumer"]
    manager.stop()
    try:
        refused = lab.kubectl(CONSUMER, "-n", "guarded", "apply", "-f", "-", input=json.dumps(pod), check=False)
        assert refused.returncode != 0
        assert 'failed calling webhook "pods.offloading.catamaran.io"' in refused.stderr
        lab.kubectl(CONSUMER, "create", "namespace", "unguarded", check=False)
        fed["namespaces"].append("unguarded")
        wait_for(lambda: lab.kubectl(CONSUMER, "-n", "unguarded", "get", "sa", "default", check=False).returncode == 0)
        lab.kubectl(CONSUMER, "-n", "unguarded", "apply", "-f", "-", input=json.dumps(pod))
    finally:
        manager.start()
    time.sleep(2)
    wait_for(
        lambda: (
            lab.kubectl(CONSUMER, "-n", "guarded", "apply", "-f", "-", input=json.dumps(pod), check=False).returncode
            == 0
        ),
        what="pod creation to work again once the webhook is back",
    )
    steered = get_json(lab, CONSUMER, "pod", "-n", "guarded", "probe")
    assert steered["metadata"]["annotations"]["catamaran.io/offloading-strategy"] == "LocalAndRemote"


def test_preexisting_pods_are_reported_and_daemonsets_stay_local(lab, fed):
    lab.kubectl(CONSUMER, "create", "namespace", "older")
    fed["namespaces"].append("older")
    wait_for(lambda: lab.kubectl(CONSUMER, "-n", "older", "get", "sa", "default", check=False).returncode == 0)
    deploy(lab, "older", "legacy", 2)
    wait_for(lambda: placement(lab, "older", "legacy", 2), what="pods created before offloading")
    offload(lab, fed, "older", podOffloadingStrategy="Remote")
    condition = wait_for(
        lambda: next(
            (
                c
                for c in offloading(lab, "older").get("status", {}).get("conditions", [])
                if c["type"] == "PreexistingPods"
            ),
            None,
        ),
        what="the PreexistingPods condition",
    )
    assert condition["status"] == "True"
    assert "rollout restart" in condition["message"]
    events = get_json(lab, CONSUMER, "events", "-n", "older", "--field-selector", "reason=PreexistingPods")["items"]
    assert events

    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "older"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],  # would tolerate the virtual-node taint too
                    "containers": [{"name": "c", "image": "registry.invalid/agent:1"}],
                },
            },
        },
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(daemonset))
    local_workers = {n.name for n in lab.recorded_config().cluster(CONSUMER).nodes}

    def running_on():
        pods = get_json(lab, CONSUMER, "pods", "-n", "older", "-l", "app=agent")["items"]
        return {p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running"}

    wait_for(lambda: running_on() == local_workers, what="DaemonSet pods Running on every local worker")
    time.sleep(3)
    # The DaemonSet controller also makes pods for the virtual nodes it tolerates; the webhook keeps
    # them off those nodes, so they stay unscheduled instead of running remotely.
    pods = get_json(lab, CONSUMER, "pods", "-n", "older", "-l", "app=agent")["items"]
    assert not [p for p in pods if p["spec"].get("nodeName") in (NODE_A, NODE_B)]
    assert running_on() == local_workers


POLICY_WEBHOOK = "team-blue.policies.pods.offloading.catamaran.io"


def namespace_offloading_policy(name: str, selector: dict, **offloading) -> dict:
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloadingPolicy",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": selector, "offloading": offloading},
    }


def webhook_names(lab) -> list[str]:
    hooks = get_json(lab, CONSUMER, "mutatingwebhookconfiguration", "catamaran-pod-offloading")["webhooks"]
    return [hook["name"] for hook in hooks]


def bare_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [container(cpu="10m", memory="16Mi")], "terminationGracePeriodSeconds": 0},
    }


def running_on(lab, namespace: str, name: str) -> str | None:
    result = lab.kubectl(CONSUMER, "-n", namespace, "get", "pod", name, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    pod = json.loads(result.stdout)
    return pod["spec"].get("nodeName") if pod["status"].get("phase") == "Running" else None


def test_a_policy_offloads_a_labelled_namespace_from_its_first_pod_until_the_label_goes(lab, fed):
    in_c = {"nodeSelectorTerms": [{"matchExpressions": [{"key": REGION, "operator": "In", "values": ["region-c"]}]}]}
    policy = namespace_offloading_policy(
        "team-blue", {"matchLabels": {"team": "blue"}}, podOffloadingStrategy="Remote", clusterSelector=in_c
    )
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(policy))
    fed["namespaces"].append("blue")
    try:
        wait_for(lambda: POLICY_WEBHOOK in webhook_names(lab), what="the policy's webhook")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "blue", "labels": {"team": "blue"}}}
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(namespace))
        # As soon as the namespace admits pods (its default ServiceAccount is there).
        wait_for(lambda: lab.kubectl(CONSUMER, "-n", "blue", "get", "sa", "default", check=False).returncode == 0)
        lab.kubectl(CONSUMER, "-n", "blue", "apply", "-f", "-", input=json.dumps(bare_pod("first")))
        assert wait_for(lambda: running_on(lab, "blue", "first"), timeout=90, what="the first pod Running") == NODE_B
        made = offloading(lab, "blue")
        assert made["metadata"]["labels"]["catamaran.io/offloading-policy"] == "team-blue"
        assert made["metadata"]["ownerReferences"][0]["name"] == "team-blue"
        assert made["spec"]["podOffloadingStrategy"] == "Remote"
        assert get_json(lab, PROVIDER_B, "pods", "-n", "blue-cluster-1")["items"][0]["metadata"]["name"] == "first"
        status = wait_for(
            lambda: (
                get_json(lab, CONSUMER, "namespaceoffloadingpolicy", "team-blue")
                .get("status", {})
                .get("offloadedNamespaces")
                == 1
                and get_json(lab, CONSUMER, "namespaceoffloadingpolicy", "team-blue")["status"]
            ),
            what="the policy's status",
        )
        assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "True"

        # The label goes: so does the namespace's offloading, and a new pod stays on the consumer's own nodes.
        lab.kubectl(CONSUMER, "label", "namespace", "blue", "team-")
        wait_for(lambda: phase(lab, "blue") is None, timeout=120, what="the policy's NamespaceOffloading to go")
        assert not namespace_exists(lab, PROVIDER_B, "blue-cluster-1")
        lab.kubectl(CONSUMER, "-n", "blue", "apply", "-f", "-", input=json.dumps(bare_pod("second")))
        node = wait_for(lambda: running_on(lab, "blue", "second"), timeout=60, what="the second pod Running")
        assert node in {n.name for n in lab.recorded_config().cluster(CONSUMER).nodes}
        annotations = get_json(lab, CONSUMER, "pod", "-n", "blue", "second")["metadata"].get("annotations") or {}
        assert "catamaran.io/offloading-strategy" not in annotations
    finally:
        lab.kubectl(CONSUMER, "delete", "namespaceoffloadingpolicy", "team-blue", "--wait=false", check=False)
    wait_for(lambda: POLICY_WEBHOOK not in webhook_names(lab), what="the policy's webhook to go")


def test_a_policy_never_takes_over_a_namespaces_own_offloading(lab, fed):
    offload(lab, fed, "own-choice", podOffloadingStrategy="Local")
    wait_for(lambda: phase(lab, "own-choice") == "Ready", what="phase Ready")
    policy = namespace_offloading_policy(
        "team-green", {"matchLabels": {"team": "green"}}, podOffloadingStrategy="Remote"
    )
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(policy))
    try:
        lab.kubectl(CONSUMER, "label", "namespace", "own-choice", "team=green")
        wait_for(
            lambda: (
                get_json(lab, CONSUMER, "namespaceoffloadingpolicy", "team-green")
                .get("status", {})
                .get("observedGeneration")
            ),
            what="the policy's status",
        )
        time.sleep(2)  # the manager had its chance to act on the label
        kept = offloading(lab, "own-choice")
        assert kept["spec"]["podOffloadingStrategy"] == "Local"
        assert "catamaran.io/offloading-policy" not in (kept["metadata"].get("labels") or {})
        assert get_json(lab, CONSUMER, "namespaceoffloadingpolicy", "team-green")["status"]["offloadedNamespaces"] == 0
    finally:
        lab.kubectl(CONSUMER, "delete", "namespaceoffloadingpolicy", "team-green", check=False)


@pytest.mark.parametrize(
    ("selector", "offloading_spec", "message"),
    [
        ({}, {}, "namespaceSelector must not be empty"),
        (
            {"matchLabels": {"team": "x"}},
            {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "one"},
            "a policy offloads many namespaces",
        ),
        ({"matchExpressions": [{"key": "team", "operator": "In"}]}, {}, "In and NotIn need values"),
        ({"matchLabels": {"team": "x"}}, {"podOffloadingStrategy": "Anywhere"}, 'Unsupported value: "Anywhere"'),
    ],
)
def test_invalid_policies_are_rejected_by_the_api_server(lab, fed, selector, offloading_spec, message):
    body = namespace_offloading_policy("invalid", selector, **offloading_spec)
    result = lab.kubectl(CONSUMER, "apply", "--dry-run=server", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_a_policy_steers_pods_at_admission_and_says_why_a_namespace_is_not_offloaded_yet(lab, fed):
    """A quota refusing NamespaceOffloadings holds the manager back, so only the policy's webhook can have steered
    the pod; the policy reports the refusal, and offloads the namespace once the quota goes."""
    policy = namespace_offloading_policy("team-blue", {"matchLabels": {"team": "blue"}}, podOffloadingStrategy="Remote")
    lab.kubectl(CONSUMER, "create", "namespace", "held")
    fed["namespaces"].append("held")
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-offloading", "namespace": "held"},
        "spec": {"hard": {"count/namespaceoffloadings.offloading.catamaran.io": "0"}},
    }
    apply_quota(lab, CONSUMER, quota)
    wait_for(lambda: lab.kubectl(CONSUMER, "-n", "held", "get", "sa", "default", check=False).returncode == 0)
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(policy))
    try:
        wait_for(lambda: POLICY_WEBHOOK in webhook_names(lab), what="the policy's webhook")
        lab.kubectl(CONSUMER, "label", "namespace", "held", "team=blue")
        lab.kubectl(CONSUMER, "-n", "held", "apply", "-f", "-", input=json.dumps(bare_pod("early")))
        pod = get_json(lab, CONSUMER, "pod", "-n", "held", "early")
        assert pod["metadata"]["annotations"]["catamaran.io/offloading-strategy"] == "Remote"
        assert {"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"} in pod[
            "spec"
        ]["tolerations"]

        def refused():
            status = get_json(lab, CONSUMER, "namespaceoffloadingpolicy", "team-blue").get("status") or {}
            ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
            return ready.get("reason") == "OffloadingRefused" and ready

        ready = wait_for(refused, timeout=60, what="the policy to report the refusal")
        assert ready["status"] == "False"
        assert "held" in ready["message"]
        assert "exceeded quota" in ready["message"]
        assert phase(lab, "held") is None

        lab.kubectl(CONSUMER, "-n", "held", "delete", "resourcequota", "no-offloading")
        assert wait_for(lambda: running_on(lab, "held", "early"), timeout=120, what="the pod Running") in (
            NODE_A,
            NODE_B,
        )
        assert wait_for(lambda: refused() is False, what="the refusal to clear") is True
    finally:
        lab.kubectl(CONSUMER, "delete", "namespaceoffloadingpolicy", "team-blue", "--wait=false", check=False)
    wait_for(lambda: POLICY_WEBHOOK not in webhook_names(lab), what="the policy's webhook to go")


# -- a twin belongs to one origin namespace (issue 37) ----------------------------------------------------------

VICTIM, INTRUDER, SAME_NAME_INTRUDER = "twin-victim", "twin-intruder", "twin-victim-cluster-1"
VICTIM_TWIN = f"{VICTIM}-{CONSUMER}"  # DefaultName; the same-name intruder's namespace is literally called that
TWIN_TAKEN = "TwinNamespaceTaken"
IN_A = {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": REGION, "operator": "In", "values": [REGIONS[PROVIDER_A]]}]}]
}


def events_with_reason(lab, namespace: str, reason: str) -> list[dict]:
    return get_json(lab, CONSUMER, "events", "-n", namespace, "--field-selector", f"reason={reason}")["items"]


def remote_pods(lab) -> dict[str, str]:
    """The victim's twin on provider A: pod name -> uid."""
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in get_json(lab, PROVIDER_A, "pods", "-n", VICTIM_TWIN)["items"]
    }


def refused_for_its_twin(lab, namespace: str):
    """(Ready condition, Warning Events) of an offloading in phase Conflict for reason TwinNamespaceTaken; else None."""
    status = (offloading(lab, namespace) if phase(lab, namespace) else {}).get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    events = [
        e
        for e in events_with_reason(lab, namespace, TWIN_TAKEN)
        if e["involvedObject"]["kind"] == "NamespaceOffloading"
    ]
    if status.get("offloadingPhase") != "Conflict" or ready.get("reason") != TWIN_TAKEN or not events:
        return None
    return ready, events


def test_a_namespace_never_takes_another_namespaces_twin(lab, fed):
    """The red team's case: a user of one namespace names another namespace's twin (SelectedName, or EnforceSameName in
    a namespace named like it, here made by a policy). Its offloading is refused with a reason, its pods never run in
    that twin nor read its objects, and the victim's pods keep running untouched; removing the intruder's offloading
    leaves the victim's twin alone."""
    offload(lab, fed, VICTIM, podOffloadingStrategy="Remote", clusterSelector=IN_A)
    wait_for(lambda: phase(lab, VICTIM) == "Ready", what="the victim's phase Ready")
    lab.kubectl(
        CONSUMER, "-n", VICTIM, "create", "secret", "generic", "only-victim", "--from-literal=token=victim-only"
    )
    lab.kubectl(CONSUMER, "-n", VICTIM, "apply", "-f", "-", input=json.dumps(bare_pod("web")))
    assert wait_for(lambda: running_on(lab, VICTIM, "web"), timeout=120, what="the victim's pod Running") == NODE_A
    victims = wait_for(lambda: remote_pods(lab) or None, what="the victim's remote pod")
    assert set(victims) == {"web"}

    # SelectedName naming the victim's twin.
    offload(
        lab,
        fed,
        INTRUDER,
        namespaceMappingStrategy="SelectedName",
        remoteNamespaceName=VICTIM_TWIN,
        clusterSelector=IN_A,
    )
    ready, events = wait_for(lambda: refused_for_its_twin(lab, INTRUDER), what="the intruder's refusal")
    assert ready["status"] == "False"
    assert VICTIM_TWIN in ready["message"]
    assert VICTIM not in ready["message"].replace(VICTIM_TWIN, "")  # the holder is not named
    assert all(e["type"] == "Warning" and e["involvedObject"]["namespace"] == INTRUDER for e in events)
    entry = wait_for(
        lambda: next(
            (
                e
                for e in (offloading(lab, INTRUDER).get("status") or {}).get("clusters") or []
                if e["reason"] == TWIN_TAKEN
            ),
            None,
        ),
        what="provider A's virtual kubelet to refuse the claim",
    )
    assert (entry["clusterID"], entry["phase"]) == (PROVIDER_A, "Failed")
    assert not events_with_reason(lab, VICTIM, TWIN_TAKEN)  # nothing said on the victim's side
    assert phase(lab, VICTIM) == "Ready"

    # Its pods: one as the scheduler would place it (steered local by the webhook, same name as the victim's), one
    # given the virtual node by name, tolerating its taint and mounting a Secret only the victim has.
    lab.kubectl(CONSUMER, "-n", INTRUDER, "apply", "-f", "-", input=json.dumps(bare_pod("web")))
    snoop = bare_pod("snoop")
    snoop["spec"].update(
        nodeName=NODE_A,
        tolerations=[{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists"}],
        volumes=[{"name": "stolen", "secret": {"secretName": "only-victim"}}],
    )
    snoop["spec"]["containers"][0]["volumeMounts"] = [{"name": "stolen", "mountPath": "/stolen"}]
    lab.kubectl(CONSUMER, "-n", INTRUDER, "apply", "-f", "-", input=json.dumps(snoop))
    local_node = wait_for(lambda: running_on(lab, INTRUDER, "web"), timeout=90, what="the intruder's web Running")
    assert local_node not in (NODE_A, NODE_B)
    web = get_json(lab, CONSUMER, "pod", "-n", INTRUDER, "web")
    assert web["metadata"]["annotations"]["catamaran.io/offloading-strategy"] == "Local"

    def held() -> dict | None:
        pod = get_json(lab, CONSUMER, "pod", "-n", INTRUDER, "snoop")
        return pod if pod["status"].get("reason") == TWIN_TAKEN else None

    held_pod = wait_for(held, what="the intruder's snoop held Pending")
    assert held_pod["status"]["phase"] == "Pending"
    logs = lab.kubectl(CONSUMER, "-n", INTRUDER, "logs", "snoop", check=False)
    assert logs.returncode != 0
    assert "victim-only" not in logs.stdout + logs.stderr
    execed = lab.kubectl(CONSUMER, "-n", INTRUDER, "exec", "snoop", "--", "cat", "/stolen/token", check=False)
    assert execed.returncode != 0
    assert "victim-only" not in execed.stdout + execed.stderr
    time.sleep(3)  # what a virtual kubelet would have sent by now
    assert remote_pods(lab) == victims  # no pod of the intruder's, the victim's own untouched
    shadows = get_json(lab, PROVIDER_A, "shadowpods", "-n", VICTIM_TWIN)["items"]
    assert {s["metadata"]["name"] for s in shadows} == {"web"}
    assert {(s["metadata"].get("annotations") or {}).get("catamaran.io/local-namespace") for s in shadows} == {VICTIM}
    request = get_json(lab, PROVIDER_A, "twinnamespace", "-n", f"catamaran-tenant-{CONSUMER}", VICTIM_TWIN)
    assert request["spec"]["originNamespace"] == VICTIM
    twin = get_json(lab, PROVIDER_A, "namespace", VICTIM_TWIN)["metadata"]
    assert twin["annotations"]["catamaran.io/origin-namespace"] == VICTIM

    # Deleting the intruder's pods and then its offloading deletes nothing of the victim's.
    lab.kubectl(CONSUMER, "-n", INTRUDER, "delete", "pod", "web", "snoop", "--timeout=60s", timeout=90)
    lab.kubectl(CONSUMER, "-n", INTRUDER, "delete", "namespaceoffloading", "offloading", "--timeout=60s", timeout=90)

    # EnforceSameName in a namespace named like the victim's twin, offloaded by a policy: refused alike, and its
    # pods refused at admission (Remote has nowhere else to put them).
    policy = namespace_offloading_policy(
        "twin-intruders",
        {"matchLabels": {"catamaran-test/twin-intruder": "yes"}},
        namespaceMappingStrategy="EnforceSameName",
        podOffloadingStrategy="Remote",
        clusterSelector=IN_A,
    )
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(policy))
    fed["namespaces"].append(SAME_NAME_INTRUDER)
    try:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": SAME_NAME_INTRUDER, "labels": {"catamaran-test/twin-intruder": "yes"}},
        }
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(namespace))
        wait_for(
            lambda: (
                lab.kubectl(CONSUMER, "-n", SAME_NAME_INTRUDER, "get", "sa", "default", check=False).returncode == 0
            ),
            what="the same-name intruder's namespace",
        )
        wait_for(lambda: refused_for_its_twin(lab, SAME_NAME_INTRUDER), what="the same-name intruder's refusal")
        created = lab.kubectl(
            CONSUMER, "-n", SAME_NAME_INTRUDER, "apply", "-f", "-", input=json.dumps(bare_pod("web")), check=False
        )
        assert created.returncode != 0
        assert TWIN_TAKEN in created.stderr or "not offloaded" in created.stderr
    finally:
        lab.kubectl(CONSUMER, "delete", "namespaceoffloadingpolicy", "twin-intruders", "--wait=false", check=False)

    assert remote_pods(lab) == victims
    assert running_on(lab, VICTIM, "web") == NODE_A
    assert phase(lab, VICTIM) == "Ready"
    assert namespace_exists(lab, PROVIDER_A, VICTIM_TWIN)
