"""Deployment mode on a real node: the controller's image as `make image` builds it (no container engine),
imported into cluster-1's real node, and the controller role in deployment mode running the manager there as a
pod, from the installed collection artifact.

What only a running pod proves: the image starts as its non-root user on a read-only root file system, and the
kubelet's readiness probe reaches the manager's /readyz (informers synced, the webhook listening). Two replicas
elect a leader on a Lease: the standby is a ready hot spare, only the leader's pod carries the label the webhook's
Service selects, and the standby takes over when the leader's pod is killed.

The whole federation in deployment mode (webhook through its Service, virtual kubelet pods, kubectl top, a liveness
restart) is test_deployment_federation.py.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from catamaran.constants import LEADER_LABEL
from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT

from . import federation
from .conftest import get_json, kill_container_process, require_real_node, wait_for
from .playbooks import run_playbook

pytestmark = pytest.mark.integration

CLUSTER = "cluster-1"
NAMESPACE = "catamaran-deployed"  # the controller's own; apart from the Molecule scenario's
WEBHOOK_REGISTRATION = "catamaran-pod-offloading"
ROLE_SELECTOR = "app.kubernetes.io/name=catamaran,app.kubernetes.io/managed-by=catamaran.federation"


def role_playbook(directory) -> str:
    play = {
        "name": f"The controller in deployment mode on {CLUSTER}'s real node",
        "hosts": CLUSTER,
        "gather_facts": False,
        "tasks": [
            {
                "name": "Run the controller role",
                "ansible.builtin.include_role": {"name": "catamaran.federation.controller"},
                "vars": {
                    "controller_mode": "deployment",
                    "controller_namespace": NAMESPACE,
                    "controller_virtual_kubelets": [],
                    "controller_webhook": True,
                    "controller_replicas": 2,
                    # This module's own namespace: an APIService left pointing there by a failed run would hold up
                    # other tests' namespace deletions; test_deployment_federation.py serves the counters.
                    "controller_pod_counters": False,
                    "controller_image_pull_policy": "Never",  # imported, never pulled
                    "controller_node_selector": {NODE_KIND_LABEL: "real"},
                    "controller_tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
                },
            }
        ],
    }
    path = directory / "deployment.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return str(path)


@pytest.fixture(scope="module")
def deployed(lab, lab_config_in_use, installed_collections, controller_image, tmp_path_factory):
    require_real_node(lab_config_in_use.cluster(CLUSTER))
    directory = tmp_path_factory.mktemp("deployment")
    inventory = directory / "inventory.yml"
    hosts = {CLUSTER: {"catamaran_cluster_id": CLUSTER, "catamaran_kubeconfig": str(lab.kubeconfig(CLUSTER))}}
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory.write_text(yaml.safe_dump({"all": {"vars": local, "hosts": hosts}}))
    federation.install_crds(lab, CLUSTER)
    run = run_playbook(inventory, playbook=role_playbook(directory), collections=installed_collections)
    try:
        assert run.returncode == 0, run.failures()
        yield
    finally:
        # What the Molecule scenario's destroy removes: the namespaces, the role's cluster-wide rights.
        lab.kubectl(CLUSTER, "delete", "namespace", NAMESPACE, "--timeout=120s", check=False, timeout=150)
        lab.kubectl(CLUSTER, "delete", "mutatingwebhookconfiguration", WEBHOOK_REGISTRATION, check=False)
        lab.kubectl(CLUSTER, "delete", "clusterroles,clusterrolebindings", "-l", ROLE_SELECTOR, check=False)
        lab.kubectl(CLUSTER, "-n", "kube-node-lease", "delete", "roles,rolebindings", "-l", ROLE_SELECTOR, check=False)


def manager_pods(lab) -> list[dict]:
    return get_json(lab, CLUSTER, "-n", NAMESPACE, "pods", "-l", "app.kubernetes.io/component=manager")["items"]


def is_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def lease_holder(lab) -> str | None:
    """The pod whose replica holds the manager's Lease (identities are `<pod>_<random>`, one per start)."""
    result = lab.kubectl(CLUSTER, "-n", NAMESPACE, "get", "lease", "catamaran-manager", "-o", "json", check=False)
    holder = json.loads(result.stdout)["spec"].get("holderIdentity") if result.returncode == 0 else None
    return holder.rpartition("_")[0] if holder else None


def leader_and_standby(lab) -> tuple[dict, dict] | None:
    """The two replicas once one leads (holds the Lease, carries the leader label) and the other stands by; both
    Ready."""
    pods = [p for p in manager_pods(lab) if not p["metadata"].get("deletionTimestamp") and is_ready(p)]
    labelled = [p for p in pods if (p["metadata"].get("labels") or {}).get(LEADER_LABEL) == "true"]
    if len(pods) != 2 or len(labelled) != 1 or labelled[0]["metadata"]["name"] != lease_holder(lab):
        return None
    (standby,) = [p for p in pods if p is not labelled[0]]
    return labelled[0], standby


def test_the_manager_runs_on_the_real_node_from_the_engine_less_image_and_turns_ready(lab, deployed, controller_image):
    leader, _ = wait_for(
        lambda: leader_and_standby(lab), timeout=180, what="one manager replica leading, one standing by"
    )
    assert leader["spec"]["nodeName"] == f"{CLUSTER}-real"
    (status,) = leader["status"]["containerStatuses"]
    assert status["image"] == controller_image
    assert status["restartCount"] == 0
    command = ["python", "-c", "import os; print(os.getuid())"]
    uid = lab.kubectl(CLUSTER, "-n", NAMESPACE, "exec", leader["metadata"]["name"], "--", *command, check=False)
    assert uid.stdout.strip() == "65532", uid.stderr


def test_killing_the_leading_manager_pod_hands_over_to_the_standby(lab, deployed):
    leader, standby = wait_for(lambda: leader_and_standby(lab), timeout=120, what="a leader and a standby")
    standby_name = standby["metadata"]["name"]
    # SIGKILL from the host: the leader cannot release its Lease, so the standby takes it once it has not been
    # renewed for a lease duration (a pod deleted with a grace period releases it at once).
    (status,) = leader["status"]["containerStatuses"]
    assert kill_container_process(status["containerID"]) > 0
    killed = time.monotonic()
    wait_for(lambda: lease_holder(lab) == standby_name, timeout=60, interval=0.5, what=f"{standby_name} to lead")
    took_over = time.monotonic() - killed

    def labelled() -> bool:
        pod = next((p for p in manager_pods(lab) if p["metadata"]["name"] == standby_name), {})
        return (pod.get("metadata", {}).get("labels") or {}).get(LEADER_LABEL) == "true"

    wait_for(labelled, timeout=30, interval=0.5, what=f"{standby_name} to carry the leader label")
    print(f"manager hand-over: Lease taken after {took_over:.1f}s, leader label after {time.monotonic() - killed:.1f}s")
    # The kubelet restarts the killed container, which comes back as the standby.
    new_leader, new_standby = wait_for(lambda: leader_and_standby(lab), timeout=120, what="the killed one standing by")
    assert new_leader["metadata"]["name"] == standby_name
    assert new_standby["metadata"]["name"] == leader["metadata"]["name"]
