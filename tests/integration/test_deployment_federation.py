"""A federation in deployment mode on real nodes: site.yml, from the installed artifact, runs every Catamaran
process as a pod from the engine-less image (`make image`), as users install it.

cluster-1 consumes cluster-2 (whose offloaded pods run on its real node) and cluster-3 (on its kwok nodes). Each
cluster's manager, and cluster-1's virtual kubelet for each provider, run on their cluster's real node, two replicas
each electing a leader on a Lease; the lab's API servers (on the host) reach them at their pod IPs, through their
Services' endpoints (the lab turns on aggregator routing). So what is proven here goes through pods only:
  - the federation is installed by the previous release (its artifact and image, built from its commit) and upgraded
    by this checkout's site.yml with 100 pods offloaded: no remote pod recreated, no container restarted, the
    virtual nodes Ready within the health threshold, the CRDs' new fields served and existing objects still valid;
  - the image runs as its non-root user, and only the leaders act;
  - the API server calls the pod webhook through its Service;
  - the virtual kubelet pod dials the provider's API server from the pod network and serves the kubelet API
    (logs, exec, port-forward, stats) with a serving certificate from a CSR the consumer's manager pod approved;
  - `kubectl top` reads an offloaded pod's figures from the virtual kubelet pod, which reads them from the
    provider's manager pod through its aggregated API;
  - killing the acting virtual kubelet or manager hands over to its standby (the hand-over times are printed) with
    100 pods offloaded: the virtual node stays Ready, no remote pod is recreated;
  - the kubelet restarts a virtual kubelet whose event loop is blocked, and no remote pod is recreated.

The network stays flat (no gateways); test_deployment_fabric.py runs the fabric's gateways as pods.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest

from catamaran.constants import (
    COUNTERS_API_SERVICE,
    LABEL_REMOTE_CLUSTER_ID,
    LEADER_LABEL,
    MANAGER_LEASE,
    NETWORK_POLICY_CONDITION,
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    VK_SERVICE_ACCOUNT_PREFIX,
    default_twin_namespace,
    tenant_namespace,
    virtual_node_name,
)
from catamaran.health import TEST_HOOKS_ENV
from catamaran.objects import condition
from catamaran.provider import enforcement
from catamaran.steering import VIRTUAL_NODE_TOLERATION
from catamaran.vk.status_back import REMOTE_CONDITION
from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT

from . import collection, release
from .federation import lease_holder, longest_not_ready, node_ready, pod_uids, watching
from .lab_access import get_json, kill_container_process, require_real_node, wait_for
from .manifests import restricted_busybox
from .playbooks import hosts, lab_inventory, run_playbook, write_inventory

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER, KWOK_PROVIDER = "cluster-1", "cluster-2", "cluster-3"
CLUSTERS = (CONSUMER, PROVIDER, KWOK_PROVIDER)
NAMESPACE = "deployed-app"
VIRTUAL_NODE, KWOK_VIRTUAL_NODE = virtual_node_name(PROVIDER), virtual_node_name(KWOK_PROVIDER)
VK_LEASE = f"{VK_SERVICE_ACCOUNT_PREFIX}{PROVIDER}"
VK_SELECTOR = f"app.kubernetes.io/component=virtual-kubelet,{LABEL_REMOTE_CLUSTER_ID}={PROVIDER}"
TWIN = default_twin_namespace(NAMESPACE, CONSUMER)  # on both providers
LOAD = 50  # pods offloaded to each provider during the upgrade and the hand-overs
SERVE = (
    'mkdir -p /tmp/www && echo "served from $HOSTNAME" > /tmp/www/index.html && exec httpd -f -v -p 8080 -h /tmp/www'
)
INSTALLED: dict = {}
UPGRADE: dict = {}


def deployment_inventory(lab) -> dict:
    """The lab's inventory, every process a pod on its cluster's real node; cluster-3 runs offloaded pods on its kwok
    nodes (no node selector in its offer)."""
    inventory = lab_inventory()
    clusters = hosts(inventory)
    for peering in clusters[CONSUMER]["catamaran_peerings"]:
        if peering["provider"] == KWOK_PROVIDER:
            del peering["provider_node_selector"], peering["provider_tolerations"]
    clusters[CONSUMER]["catamaran_offloaded_namespaces"] = [
        {"namespace": NAMESPACE, "pod_offloading_strategy": "Remote"}
    ]
    settings = inventory["catamaran_clusters"]["vars"]
    settings.update(
        controller_mode="deployment",
        controller_image_pull_policy="Never",  # imported into the real nodes, never pulled
        controller_replicas=2,
        controller_node_selector={NODE_KIND_LABEL: "real"},
        controller_tolerations=[{**REAL_NODE_TAINT, "operator": "Equal"}],
        controller_gateway=False,
        catamaran_network={"mode": "flat"},
        # A virtual kubelet pod reaches its provider's API server where the real nodes reach theirs (the host end
        # of a node link, on every API server's certificate), not at the host's loopback.
        catamaran_api_server="{{ catamaran_home_api_server }}",
        controller_networkpolicy_probe_seconds=5,  # the canaries' verdicts come within seconds of a change
    )
    return inventory


KWOK_TAINT = {"key": "example.com/burst-capacity", "value": "kwok", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def federation(lab, lab_config_in_use, installed_collections, controller_image, previous_release, tmp_path_factory):
    """The previous release's federation, upgraded by this checkout's site.yml with 100 pods offloaded (what the
    upgrade changed and took is in UPGRADE); the upgrade's inventory also uses a field new in this release."""
    for name in CLUSTERS:
        require_real_node(lab_config_in_use.cluster(name))
    if lab_config_in_use.overlapping_pod_cidrs:
        pytest.fail("deployment mode needs a lab whose pod ranges do not overlap: the host, where the API servers run, "
                    "routes to the pods only then (unset CATAMARAN_LAB_OVERLAP)", pytrace=False)  # fmt: skip
    INSTALLED["collections"] = installed_collections
    lab.import_images([previous_release.image])
    previous_collections = tmp_path_factory.mktemp("previous-collections")
    collection.install_artifact(previous_release.artifact, previous_collections)
    declared = deployment_inventory(lab)
    previous_inventory = write_inventory(tmp_path_factory.mktemp("previous"), declared, lab)
    for peering in hosts(declared)[CONSUMER]["catamaran_peerings"]:
        if peering["provider"] == KWOK_PROVIDER:
            peering["node_taints"] = [KWOK_TAINT]
    inventory = write_inventory(tmp_path_factory.mktemp("deployed"), declared, lab)
    try:
        run = run_playbook(previous_inventory, collections=previous_collections)
        assert run.returncode == 0, f"release {previous_release.version}'s site.yml: {run.failures()}"
        for node in (VIRTUAL_NODE, KWOK_VIRTUAL_NODE):
            wait_for(lambda node=node: node_ready(lab, CONSUMER, node) == "True", timeout=120, what=f"{node} Ready")
        UPGRADE.update(upgrade(lab, inventory, installed_collections, previous_release, controller_image))
        yield inventory
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, "--timeout=120s", check=False, timeout=150)
        teardown = run_playbook(inventory, playbook="teardown.yml", collections=installed_collections)
        assert teardown.returncode == 0, teardown.failures()
        for cluster in CLUSTERS:
            left = lab.kubectl(
                cluster, "get", "deployments,pods,services,serviceaccounts,roles,rolebindings,clusterroles,"
                "clusterrolebindings,mutatingwebhookconfigurations,apiservices", "-A", "-o", "name",
                "-l", "app.kubernetes.io/managed-by=catamaran.federation",
            ).stdout.split()  # fmt: skip
            # The manager's own registrations carry no label of the role's: by name (or, for webhooks, none at all).
            webhooks = lab.kubectl(cluster, "get", "mutatingwebhookconfigurations", "-o", "name").stdout.split()
            counters = lab.kubectl(cluster, "get", "apiservice", COUNTERS_API_SERVICE, "-o", "name", check=False)
            assert (left, webhooks) == ([], []), f"{cluster} keeps {left + webhooks} after the teardown"
            assert counters.returncode != 0, f"{cluster} keeps {counters.stdout.strip()} after the teardown"


def pods(lab, cluster: str, *selector: str) -> list[dict]:
    return get_json(lab, cluster, "-n", SYSTEM_NAMESPACE, "pods", *selector)["items"]


def component(pod: dict) -> str:
    return pod["metadata"]["labels"]["app.kubernetes.io/component"]


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def holding_pod(lab, cluster: str, lease: str) -> str | None:
    """The pod whose replica holds `lease` (identities are `<pod>_<random>`, one per start)."""
    return (lease_holder(lab, cluster, lease) or "").rpartition("_")[0] or None


def leader(lab, cluster: str, selector: str, lease: str) -> dict | None:
    """The Ready pod of a Deployment (its pods' label `selector`) that holds its Lease, once its two replicas run."""
    found = [p for p in pods(lab, cluster, "-l", selector) if not p["metadata"].get("deletionTimestamp")]
    holder = holding_pod(lab, cluster, lease)
    acting = [p for p in found if p["metadata"]["name"] == holder and is_ready(p)]
    return acting[0] if len(found) == 2 and acting else None


def vk_pod(lab) -> dict | None:
    """The acting virtual kubelet's pod (the standby is a ready hot spare that does nothing)."""
    return leader(lab, CONSUMER, VK_SELECTOR, VK_LEASE)


def consumer_manager(lab) -> dict | None:
    return leader(lab, CONSUMER, "app.kubernetes.io/component=manager", MANAGER_LEASE)


def acting_replicas(lab) -> dict:
    """Every Deployment of the federation, (its cluster, what it runs) -> a function returning its acting pod (None
    until there is one)."""
    provider_manager = "app.kubernetes.io/component=manager"
    return {
        (CONSUMER, "manager"): lambda: consumer_manager(lab),
        (PROVIDER, "manager"): lambda: leader(lab, PROVIDER, provider_manager, MANAGER_LEASE),
        (KWOK_PROVIDER, "manager"): lambda: leader(lab, KWOK_PROVIDER, provider_manager, MANAGER_LEASE),
        (CONSUMER, f"virtual kubelet for {PROVIDER}"): lambda: vk_pod(lab),
        (CONSUMER, f"virtual kubelet for {KWOK_PROVIDER}"): lambda: leader(
            lab,
            CONSUMER,
            f"app.kubernetes.io/component=virtual-kubelet,{LABEL_REMOTE_CLUSTER_ID}={KWOK_PROVIDER}",
            f"{VK_SERVICE_ACCOUNT_PREFIX}{KWOK_PROVIDER}",
        ),
    }


def filler(name: str, replicas: int, node: str) -> dict:
    """Pods offloaded to `node` beside the server, each sleeping on its provider."""
    pod_spec = restricted_busybox(["sleep", "86400"], resources={"requests": {"cpu": "1m", "memory": "8Mi"}})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {**pod_spec, "nodeSelector": {"kubernetes.io/hostname": node}},
            },
        },
    }


def running_offloaded(lab, node: str = VIRTUAL_NODE) -> int:
    local = get_json(lab, CONSUMER, "-n", NAMESPACE, "pods")["items"]
    return sum(1 for p in local if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running")


def containers(lab, cluster: str, namespace: str) -> dict[str, tuple[str, int]]:
    """Pod name -> (UID, restarts of its containers) in `namespace`."""
    listed = get_json(lab, cluster, "-n", namespace, "pods")["items"]
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []),
        )
        for p in listed
    }


def federation_pods(lab) -> dict:
    """What the upgrade must keep: the consumer's offloaded pods and both providers' remote pods (UIDs, restarts)."""
    return {(CONSUMER, NAMESPACE): containers(lab, CONSUMER, NAMESPACE)} | {
        (provider, TWIN): containers(lab, provider, TWIN) for provider in (PROVIDER, KWOK_PROVIDER)
    }


def upgrade(lab, inventory, collections, previous: release.Release, image: str) -> dict:
    """With LOAD pods offloaded to each provider, this checkout's site.yml over the previous release's federation;
    returns what the upgrade kept and changed, and how long it took."""
    for provider, node in ((PROVIDER, VIRTUAL_NODE), (KWOK_PROVIDER, KWOK_VIRTUAL_NODE)):
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(filler(f"load-{provider}", LOAD, node)))
    wait_for(
        lambda: running_offloaded(lab, VIRTUAL_NODE) == running_offloaded(lab, KWOK_VIRTUAL_NODE) == LOAD,
        timeout=300,
        interval=2,
        what=f"{LOAD} pods offloaded to each provider and Running",
    )
    added = release.added_spec_fields(previous)
    fields_before = release.served_spec_fields(lab, CONSUMER, added)
    before = federation_pods(lab)

    def upgraded() -> bool:
        everywhere = [p for cluster in CLUSTERS for p in pods(lab, cluster)]
        if any(c["image"] != image for p in everywhere for c in p["spec"]["containers"]):
            return False
        return all(find() for find in acting_replicas(lab).values())

    assert {c["image"] for p in pods(lab, CONSUMER) for c in p["spec"]["containers"]} == {previous.image.name}
    with watching(lab, CONSUMER, (VIRTUAL_NODE, KWOK_VIRTUAL_NODE), NAMESPACE) as seen:
        started = time.monotonic()
        run = run_playbook(inventory, collections=collections)
        assert run.returncode == 0, run.failures()
        played = time.monotonic() - started
        wait_for(upgraded, timeout=300, interval=2, what="every Catamaran pod on the new image, each leader acting")
        settled = time.monotonic() - started
    # The new virtual kubelet has gone over the namespace's pods once their account's shared token Secret is there.
    wait_for(
        lambda: get_json(lab, PROVIDER, "-n", TWIN, "secret", "catamaran-token.sa.default"),
        timeout=60,
        what="the upgraded virtual kubelet's token Secret for the pods' ServiceAccount",
    )
    return {
        "before": before,
        "after": federation_pods(lab),
        "token_secrets": {s["metadata"]["name"] for s in get_json(lab, PROVIDER, "-n", TWIN, "secrets")["items"]},
        "seen": seen,
        "fields": (added, fields_before, release.served_spec_fields(lab, CONSUMER, added)),
        "seconds": (played, settled),
    }


@pytest.fixture(scope="module")
def server(lab, federation):
    """A web server in the offloaded namespace, created without any toleration of the virtual node."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "server", "namespace": NAMESPACE, "labels": {"app": "server"}},
        "spec": {**restricted_busybox(["sh", "-c", SERVE]), "nodeSelector": {"kubernetes.io/hostname": VIRTUAL_NODE}},
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/server", "--timeout=120s", timeout=150)
    return get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "server")


def remote_pod(lab) -> dict:
    return get_json(lab, PROVIDER, "-n", TWIN, "pod", "server")


def rewritable(lab, cluster: str, crd: str) -> bool:
    """Every stored object of `crd` passes the served schema as written back unchanged (a server-side dry run of
    replacing them); read again when a controller wrote one in between."""
    for _ in range(5):
        stored = get_json(lab, cluster, crd, "-A")
        if not stored["items"]:
            return True
        replaced = lab.kubectl(cluster, "replace", "--dry-run=server", "-f", "-", input=json.dumps(stored), check=False)
        if replaced.returncode == 0:
            return True
        assert "the object has been modified" in replaced.stderr, (cluster, crd, replaced.stderr)
    raise AssertionError(f"{cluster}: the objects of {crd} kept changing under five dry-run replaces")


def test_site_yml_upgrades_the_previous_release_with_100_pods_offloaded_disrupting_none(
    lab, federation, controller_image
):
    before, after, seen = UPGRADE["before"], UPGRADE["after"], UPGRADE["seen"]
    assert {key: len(listed) for key, listed in before.items()} == {
        (CONSUMER, NAMESPACE): 2 * LOAD,
        (PROVIDER, TWIN): LOAD,
        (KWOK_PROVIDER, TWIN): LOAD,
    }
    # The same pods on both sides (none recreated), and no container restarted.
    assert after == before
    # The per-pod token Secrets the previous release wrote stay for the remote pods reading them (their refresh is
    # the new release's job now), beside the one Secret its pods' ServiceAccount gets from now on.
    legacy = {f"catamaran-token.{name}" for name in before[(PROVIDER, TWIN)]}
    assert legacy <= UPGRADE["token_secrets"], sorted(legacy - UPGRADE["token_secrets"])[:5]
    assert seen["samples"] >= 3, seen
    assert seen["backwards"] == [], seen  # no local pod's phase went back from Running
    # A virtual node may turn NotReady only as long as a provider may be silent before it counts as down.
    checks = [f["spec"]["healthCheck"] for f in get_json(lab, CONSUMER, "foreignclusters", "-A")["items"]]
    threshold = min(c["periodSeconds"] * c["failureThreshold"] for c in checks)
    longest = {node: longest_not_ready(seen, node) for node in (VIRTUAL_NODE, KWOK_VIRTUAL_NODE)}
    assert max(longest.values()) <= threshold, (longest, seen["not_ready"])
    played, settled = UPGRADE["seconds"]
    print(f"upgrade: {played:.0f}s site.yml, {settled:.0f}s to every new leader acting; NotReady samples "
          f"{len(seen['not_ready'])} of {seen['samples']}, longest stretch {max(longest.values()):.0f}s "
          f"(threshold {threshold}s)")  # fmt: skip
    # The CRD fields this release adds are served after the upgrade, not before; stored objects stay valid.
    added, fields_before, fields_after = UPGRADE["fields"]
    assert added, "this release adds no CRD field: the upgrade proves nothing of CRD changes"
    for crd, fields in added.items():
        assert not fields & fields_before[crd], (crd, fields)
        assert fields <= fields_after[crd], (crd, fields)
    version = controller_image.rpartition(":")[2]
    for cluster in CLUSTERS:
        crds = [c for c in get_json(lab, cluster, "crd")["items"] if c["spec"]["group"].endswith(".catamaran.io")]
        assert crds, f"{cluster} has no Catamaran CRD"
        for crd in crds:
            storage = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
            assert crd["status"]["storedVersions"] == storage, crd["metadata"]["name"]
            assert rewritable(lab, cluster, crd["metadata"]["name"])
        # RBAC, accounts, Services and Deployments: everything the role made carries the new release's version.
        stale = lab.kubectl(
            cluster, "get", "namespaces,deployments,pods,services,serviceaccounts,roles,rolebindings,clusterroles,"
            "clusterrolebindings", "-A", "-o", "name",
            "-l", f"app.kubernetes.io/managed-by=catamaran.federation,app.kubernetes.io/version!={version}",
        ).stdout.split()  # fmt: skip
        assert stale == [], f"{cluster}: not upgraded: {stale}"
    for node in (VIRTUAL_NODE, KWOK_VIRTUAL_NODE):
        info = get_json(lab, CONSUMER, "node", node)["status"]["nodeInfo"]
        assert info["kubeletVersion"] == f"catamaran-v{version}"
    # The upgrade's inventory uses the new field: the kwok provider's virtual node takes new pods only if they
    # tolerate it, and its running pods stayed (above).
    assert KWOK_TAINT in get_json(lab, CONSUMER, "node", KWOK_VIRTUAL_NODE)["spec"]["taints"]


def test_every_process_runs_as_a_pod_on_its_clusters_real_node(lab, federation, controller_image):
    for (cluster, what), find in acting_replicas(lab).items():
        pod = wait_for(find, timeout=180, what=f"two {what} replicas on {cluster}, one leading")
        assert pod["spec"]["nodeName"] == f"{cluster}-real"
        (status,) = pod["status"]["containerStatuses"]
        assert status["image"] == controller_image
        assert status["restartCount"] == 0
    # The manager's, and the NetworkPolicy canary it keeps where its tenant's pods run.
    assert {component(p) for p in pods(lab, PROVIDER)} == {"manager", enforcement.CANARY_COMPONENT}
    # Only the acting manager's pod carries the label its Services (webhook, pod counters) select.
    wait_for(
        lambda: (
            [p["metadata"]["name"] for p in pods(lab, CONSUMER, "-l", f"{LEADER_LABEL}=true")]
            == [consumer_manager(lab)["metadata"]["name"]]
        ),
        timeout=30,
        what="the leader label on the acting manager's pod only",
    )
    uid = lab.kubectl(
        CONSUMER, "-n", SYSTEM_NAMESPACE, "exec", consumer_manager(lab)["metadata"]["name"], "--",
        "python", "-c", "import os; print(os.getuid())",
    )  # fmt: skip
    assert uid.stdout.strip() == "65532"
    # The virtual node is the acting virtual kubelet pod: its address is the pod's, where the API server dials it.
    addresses = get_json(lab, CONSUMER, "node", VIRTUAL_NODE)["status"]["addresses"]
    assert {"type": "InternalIP", "address": vk_pod(lab)["status"]["podIP"]} in addresses


def network_policy_conditions(lab, provider: str) -> tuple[tuple, tuple]:
    """(status, reason) of NetworkPolicyEnforced on the tenant's ResourceOffer and on the consumer's ForeignCluster."""
    offer = get_json(lab, provider, "-n", tenant_namespace(CONSUMER), "resourceoffer", RESOURCE_OFFER_NAME)
    foreign = get_json(lab, CONSUMER, "-n", SYSTEM_NAMESPACE, "foreigncluster", provider)
    found = [condition(o.get("status"), NETWORK_POLICY_CONDITION) or {} for o in (offer, foreign)]
    return tuple((c.get("status"), c.get("reason")) for c in found)  # type: ignore[return-value]


def test_a_provider_not_enforcing_network_policies_says_so_on_its_offer_and_the_consumers_foreign_cluster(
    lab, federation
):
    """cluster-2's real node enforces NetworkPolicies (kube-router); cluster-3 runs the tenant's pods on kwok nodes,
    where the canary is no process and cannot answer: Unknown, not a guess. With kube-router stopped and its chains
    unhooked, as on a cluster whose plugin enforces nothing, both sides of cluster-2's peering say False."""
    enforced, unreachable = ("True", "Enforced"), ("Unknown", "CanaryUnreachable")
    wait_for(lambda: network_policy_conditions(lab, PROVIDER) == (enforced, enforced), timeout=120, what="Enforced")
    wait_for(lambda: network_policy_conditions(lab, KWOK_PROVIDER) == (unreachable,) * 2, timeout=60, what="Unknown")
    try:
        lab.stop_policy_engine(PROVIDER)
        not_enforced = ("False", "NotEnforced")
        wait_for(
            lambda: network_policy_conditions(lab, PROVIDER) == (not_enforced, not_enforced),
            timeout=90,
            what="NotEnforced on both sides",
        )
        warnings = get_json(
            lab, CONSUMER, "-n", SYSTEM_NAMESPACE, "events",
            "--field-selector", f"involvedObject.name={PROVIDER},reason=NotEnforced,type=Warning",
        )["items"]  # fmt: skip
        assert warnings, "no Warning Event NotEnforced on the ForeignCluster"
        assert "does not enforce NetworkPolicies" in warnings[0]["message"], warnings
    finally:
        lab.start_policy_engine(PROVIDER)
    wait_for(lambda: network_policy_conditions(lab, PROVIDER) == (enforced, enforced), timeout=90, what="Enforced")


def test_a_pod_no_node_of_its_provider_can_hold_is_answered_on_the_consumer(lab, federation):
    """cluster-3 lends 80 % of three kwok nodes of 8 CPUs each: a pod of 10 CPUs fits its virtual node and never one
    of those nodes. The provider refuses it at once, and the consumer's pod says why, instead of a remote Pending that
    only the provider sees."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-big", "namespace": NAMESPACE},
        "spec": {
            **restricted_busybox(["sleep", "86400"], resources={"requests": {"cpu": "10"}}),
            "nodeSelector": {"kubernetes.io/hostname": KWOK_VIRTUAL_NODE},
            "tolerations": [{**KWOK_TAINT, "operator": "Equal"}],
        },
    }
    created = time.monotonic()
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))
    try:

        def refused() -> dict | None:
            local = get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "too-big")
            found = condition(local.get("status"), REMOTE_CONDITION)
            return found if found and found.get("reason") == "Infeasible" else None

        found = wait_for(refused, timeout=60, what="the provider's Infeasible on the consumer's pod")
        print(f"infeasible pod answered on the consumer {time.monotonic() - created:.1f}s after its creation")
        assert found["status"] == "False"
        assert "cpu (requested 10, the most one node has 8)" in found["message"], found
        events = get_json(
            lab, CONSUMER, "-n", NAMESPACE, "events", "--field-selector", "involvedObject.name=too-big,type=Warning"
        )["items"]
        assert "RemoteInfeasible" in {e["reason"] for e in events}, events
        assert get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "too-big")["status"]["phase"] == "Pending"
        remote = lab.kubectl(KWOK_PROVIDER, "-n", TWIN, "get", "pod", "too-big", check=False)
        assert "NotFound" in remote.stderr, remote.stdout  # nothing Pending there
    finally:
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "too-big", "--wait=false", check=False)


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
    # Only issued requests count: one may be pending (a renewal) or denied (made before the node showed a new
    # acting pod's address), and earlier tests' virtual kubelets may have used the same service account name.
    csrs = get_json(lab, CONSUMER, "csr")["items"]
    requested = [c for c in csrs if c["spec"]["username"].endswith(f":{vk_pod(lab)['spec']['serviceAccountName']}")]
    issued = [c for c in requested if c["status"].get("certificate")]
    assert issued, requested
    assert all(
        any(k["type"] == "Approved" and k["reason"] == "CatamaranVirtualKubelet" for k in c["status"]["conditions"])
        for c in issued
    ), issued
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


def hand_over(lab, what: str, find, lease: str, cluster: str = CONSUMER) -> dict:
    """SIGKILL the acting replica's container from the host (it cannot release its Lease); returns the new leader
    once it acts, after printing how long that took."""
    acting = wait_for(find, timeout=120, what=f"the acting {what}")
    (status,) = acting["status"]["containerStatuses"]
    assert kill_container_process(status["containerID"]) > 0
    killed = time.monotonic()
    wait_for(
        lambda: holding_pod(lab, cluster, lease) not in (None, acting["metadata"]["name"]),
        timeout=60,
        interval=0.5,
        what=f"the standby {what} to take the Lease",
    )
    took_lease = time.monotonic() - killed
    new = wait_for(
        lambda: (p := find()) and p["metadata"]["name"] != acting["metadata"]["name"] and p,
        timeout=60,
        interval=0.5,
        what=f"the new {what} to act",
    )
    acted = time.monotonic() - killed
    print(f"{what} hand-over: Lease taken after {took_lease:.1f}s, the new leader acting after {acted:.1f}s")
    return new


def test_killing_the_acting_virtual_kubelet_or_manager_hands_over_with_100_pods_offloaded(lab, federation, server):
    # The upgrade's pods, and the server, on cluster-2's real node; as many on cluster-3's kwok nodes.
    assert running_offloaded(lab, VIRTUAL_NODE) == LOAD + 1
    assert running_offloaded(lab, KWOK_VIRTUAL_NODE) == LOAD
    before = pod_uids(lab, PROVIDER, TWIN)
    assert len(before) == LOAD + 1
    with watching(lab, CONSUMER, VIRTUAL_NODE, NAMESPACE) as seen:
        new_vk = hand_over(lab, "virtual kubelet", lambda: vk_pod(lab), VK_LEASE)
        wait_for(
            lambda: (
                {"type": "InternalIP", "address": new_vk["status"]["podIP"]}
                in get_json(lab, CONSUMER, "node", VIRTUAL_NODE)["status"]["addresses"]
            ),
            what="the virtual node to name the new virtual kubelet's address",
        )
        hand_over(lab, "consumer manager", lambda: consumer_manager(lab), MANAGER_LEASE)
        # The webhook's Service follows the new leader: a pod created now is steered to the virtual node.
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(filler("late", 1, VIRTUAL_NODE)))
        wait_for(lambda: running_offloaded(lab) == LOAD + 2, timeout=120, what="a pod created after the hand-overs")
    assert seen["samples"] >= 3, seen  # it sampled, however slow the reads under load
    assert seen["not_ready"] == [], seen  # the virtual node stayed Ready
    assert seen["backwards"] == [], seen  # no local pod's phase went back from Running
    after = pod_uids(lab, PROVIDER, TWIN)
    assert {name: after.get(name) for name in before} == before  # no remote pod recreated
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "deployment", f"load-{PROVIDER}", f"load-{KWOK_PROVIDER}", "late")
    wait_for(lambda: running_offloaded(lab) == 1, timeout=120, what="only the server left")


def test_a_blocked_event_loop_gets_the_virtual_kubelet_restarted_and_no_remote_pod_recreated(lab, federation, server):
    remote_uid = remote_pod(lab)["metadata"]["uid"]
    # The test hook, never set by the role: both replicas are replaced, one at a time (itself a hand-over to survive).
    deployment = wait_for(lambda: vk_pod(lab), what="the acting virtual kubelet")["metadata"]["labels"][
        "app.kubernetes.io/instance"
    ]
    lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "set", "env", f"deployment/{deployment}", f"{TEST_HOOKS_ENV}=1")

    def hooked(pod: dict) -> bool:
        return any(e.get("name") == TEST_HOOKS_ENV for e in pod["spec"]["containers"][0].get("env") or [])

    pod = wait_for(
        lambda: (p := vk_pod(lab)) and all(hooked(q) for q in pods(lab, CONSUMER, "-l", VK_SELECTOR)) and p,
        timeout=180,
        what="both virtual kubelet replicas with the test hook, one acting",
    )
    metrics_port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "metrics")
    url = f"http://{pod['status']['podIP']}:{metrics_port}/debug/block-event-loop?seconds=600"
    urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10).read()
    blocked = time.monotonic()

    def restarted() -> bool:
        replicas = pods(lab, CONSUMER, "-l", VK_SELECTOR)
        (status,) = [p["status"] for p in replicas if p["metadata"]["uid"] == pod["metadata"]["uid"]]
        container = (status.get("containerStatuses") or [{}])[0]
        return container.get("restartCount", 0) >= 1 and "running" in container.get("state", {})

    wait_for(restarted, timeout=180, interval=2, what="the kubelet to restart the blocked virtual kubelet in its pod")
    print(f"blocked virtual kubelet restarted by its liveness probe {time.monotonic() - blocked:.0f}s after")
    acting = wait_for(lambda: vk_pod(lab), timeout=60, what="a virtual kubelet acting")
    print(f"acting virtual kubelet: {acting['metadata']['name']} (the blocked one was {pod['metadata']['name']})")
    wait_for(lambda: node_ready(lab, CONSUMER, VIRTUAL_NODE) == "True", timeout=60, what=f"{VIRTUAL_NODE} Ready")
    assert remote_pod(lab)["metadata"]["uid"] == remote_uid
    local = get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "server")
    assert local["status"]["phase"] == "Running"
    assert local["status"]["containerStatuses"][0]["restartCount"] == 0
