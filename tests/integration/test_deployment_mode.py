"""Deployment mode on a real node: the controller's image as `make image` builds it (no container engine),
imported into cluster-1's real node, and the controller role in deployment mode running the manager there as a
pod, from the installed collection artifact.

What only a running pod proves: the image starts as its non-root user on a read-only root file system, and the
kubelet's readiness probe reaches the manager's /readyz (informers synced, the webhook listening).

Not here yet: the API server calling the webhook through its Service. The lab's API servers run on the host, where
no kube-proxy makes ClusterIPs reachable, and `--enable-aggregator-routing` (pod IPs instead) breaks kwokctl's
metrics-server APIService (an ExternalName Service).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from catamaran_lab import controller_image
from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT

from . import federation
from .conftest import get_json, require_real_node, wait_for
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
def deployed(lab, lab_config_in_use, installed_collections, tmp_path_factory):
    require_real_node(lab_config_in_use.cluster(CLUSTER))
    directory = tmp_path_factory.mktemp("deployment")
    archive = controller_image.build(directory / "image")
    socket = lab.cluster_dir(CLUSTER) / "node" / "containerd.sock"
    subprocess.run(
        ["ctr", "--address", str(socket), "--namespace", "k8s.io", "images", "import", "--snapshotter", "overlayfs",
         str(archive)],
        check=True, capture_output=True,
    )  # fmt: skip
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


def manager_pod(lab) -> dict:
    pods = get_json(lab, CLUSTER, "-n", NAMESPACE, "pods", "-l", "app.kubernetes.io/component=manager")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def test_the_manager_runs_on_the_real_node_from_the_engine_less_image_and_turns_ready(lab, deployed):
    def ready():
        conditions = manager_pod(lab)["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(ready, timeout=120, what="the manager pod Ready (its /readyz probed by the real kubelet)")
    pod = manager_pod(lab)
    assert pod["spec"]["nodeName"] == f"{CLUSTER}-real"
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"] == "ghcr.io/catamaran/controller:0.1.0"
    assert status["restartCount"] == 0
    command = ["python", "-c", "import os; print(os.getuid())"]
    uid = lab.kubectl(CLUSTER, "-n", NAMESPACE, "exec", pod["metadata"]["name"], "--", *command, check=False)
    assert uid.stdout.strip() == "65532", uid.stderr
