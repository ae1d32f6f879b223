"""A provider whose API server is down does not stop the federation, and a peering with it can be removed.

cluster-1 consumes cluster-2 and cluster-3 (the lab inventory, without offloaded namespaces). With cluster-3's
API server stopped, site.yml converges cluster-1 -> cluster-2 and fails at the end naming cluster-3; the
peering module refuses to un-peer without force, naming cluster-3, and with force removes the peering from
cluster-1 alone. Once cluster-3 is back, the reverse (consumer unreachable) removes the tenant it kept. The
tests run in order and share one federation; the module fixture tears it down with playbooks/teardown.yml.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.integration.lab_access import get_json, wait_for

from .federation import node_ready as node_ready_status
from .playbooks import hosts, lab_inventory, run_playbook, write_inventory

pytestmark = pytest.mark.integration

CONSUMER, LIVE, DEAD = "cluster-1", "cluster-2", "cluster-3"
TENANT = f"catamaran-tenant-{CONSUMER}"
STRAY_NAMESPACE = "dead-provider-test"


def federation_inventory(lab, directory, live_sharing: int = 50):
    inventory = lab_inventory()
    clusters = hosts(inventory)
    clusters[CONSUMER]["catamaran_offloaded_namespaces"] = []  # peerings only: this is about reachability
    clusters[CONSUMER]["catamaran_peerings"][0]["sharing_percentage"] = live_sharing
    directory.mkdir(exist_ok=True)
    return write_inventory(directory, inventory, lab)


@pytest.fixture(scope="module")
def federation(lab, tmp_path_factory):
    directory = tmp_path_factory.mktemp("dead-cluster")
    inventory = federation_inventory(lab, directory / "converged")
    run = run_playbook(inventory)
    assert run.returncode == 0, run.failures()
    yield {"inventory": inventory, "directory": directory}
    teardown = run_playbook(inventory, playbook="teardown.yml")
    lab.kubectl(CONSUMER, "delete", "namespace", STRAY_NAMESPACE, "--wait=false", check=False)
    assert teardown.returncode == 0, teardown.failures()


def unpeer_playbook(directory, lab, consumer_kubeconfig: str, force: bool):
    """catamaran.federation.peering with state=absent for cluster-1 -> cluster-3, as an operator would run it."""
    task = {
        "name": "Un-peer cluster-3",
        "catamaran.federation.peering": {
            "consumer": {"kubeconfig": consumer_kubeconfig, "request_timeout": 5},
            "provider": {"kubeconfig": str(lab.kubeconfig(DEAD)), "request_timeout": 5},
            "consumer_id": CONSUMER,
            "provider_id": DEAD,
            "state": "absent",
            "force": force,
            "drain_timeout": 30,
            "wait_timeout": 60,
        },
    }
    play = {"name": "Un-peer", "hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [task]}
    path = directory / f"unpeer-{'force' if force else 'plain'}-{len(list(directory.iterdir()))}.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def task_result(run, name: str) -> dict:
    document = json.loads(run.stdout[run.stdout.index("{") :])
    for play in document["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == name:
                return task["hosts"]["localhost"]
    raise AssertionError(f"no task {name!r} in the run")


def exists(lab, cluster: str, *args: str) -> bool:
    return lab.kubectl(cluster, "get", *args, check=False).returncode == 0


def node_ready(lab, node: str) -> bool:
    return node_ready_status(lab, CONSUMER, node) == "True"


def api_server_ready(lab, cluster: str) -> bool:
    return lab.kubectl(cluster, "get", "--raw", "/readyz", check=False, timeout=10).returncode == 0


def stray_pod_on(node: str) -> dict:
    """A pod bound straight to the virtual node, so un-peering has one to drain."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stray", "namespace": STRAY_NAMESPACE},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
        },
    }


def test_a_dead_provider_is_skipped_then_removed_from_the_consumer_alone(lab, federation):
    dead_node = f"catamaran-{DEAD}"
    assert node_ready(lab, dead_node)
    assert node_ready(lab, f"catamaran-{LIVE}")
    lab.kubectl(CONSUMER, "create", "namespace", STRAY_NAMESPACE, check=False)
    wait_for(lambda: exists(lab, CONSUMER, "-n", STRAY_NAMESPACE, "sa", "default"), what="the default ServiceAccount")
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(stray_pod_on(dead_node)))
    changed = federation_inventory(lab, federation["directory"] / "changed", live_sharing=40)

    lab.stop_component(DEAD, "kube-apiserver")
    try:
        run = run_playbook(changed)
        assert run.returncode != 0
        failures = run.failures()
        # Only the last play fails, naming the dead cluster and the pair it skipped; the live pair converged.
        assert len(failures) == 1, failures
        assert "Every cluster was reached" in failures[0]
        assert f"Unreachable clusters: {DEAD}." in failures[0]
        assert f"{CONSUMER} -> {DEAD}" in failures[0]
        assert f"{CONSUMER} -> {LIVE}" not in failures[0]
        foreign = get_json(lab, CONSUMER, "-n", "catamaran-system", "foreignclusters", LIVE)
        assert foreign["spec"]["sharingPercentage"] == 40
        assert node_ready(lab, f"catamaran-{LIVE}")

        plain = run_playbook(
            federation["inventory"],
            playbook=unpeer_playbook(federation["directory"], lab, str(lab.kubeconfig(CONSUMER)), force=False),
        )
        assert plain.returncode != 0
        assert any(f"{DEAD}: cannot reach" in message for message in plain.failures()), plain.failures()
        assert exists(lab, CONSUMER, "-n", "catamaran-system", "foreigncluster", DEAD), "nothing may change"
        assert exists(lab, CONSUMER, "-n", STRAY_NAMESPACE, "pod", "stray")

        forced = run_playbook(
            federation["inventory"],
            playbook=unpeer_playbook(federation["directory"], lab, str(lab.kubeconfig(CONSUMER)), force=True),
        )
        assert forced.returncode == 0, forced.failures()
        result = task_result(forced, "Un-peer cluster-3")
        assert result["changed"]
        assert [
            line
            for line in result["not_cleaned"]
            if line.startswith(f"{DEAD} (unreachable): tenant namespace {TENANT}")
        ]
        assert not exists(lab, CONSUMER, "-n", "catamaran-system", "foreigncluster", DEAD)
        assert not exists(lab, CONSUMER, "-n", "catamaran-system", "secret", f"catamaran-credentials-{DEAD}")
        assert not exists(lab, CONSUMER, "node", dead_node)
        assert not exists(lab, CONSUMER, "-n", "kube-node-lease", "lease", dead_node)
        assert not exists(lab, CONSUMER, "-n", STRAY_NAMESPACE, "pod", "stray")
        assert node_ready(lab, f"catamaran-{LIVE}")
    finally:
        lab.start_component(DEAD, "kube-apiserver")
        wait_for(lambda: api_server_ready(lab, DEAD), timeout=90, what=f"{DEAD}'s API server back")


def test_with_the_consumer_unreachable_force_removes_the_tenant_from_the_provider(lab, federation):
    assert exists(lab, DEAD, "namespace", TENANT), "the forced un-peering above could not clean the provider"
    unreachable = yaml.safe_load(lab.kubeconfig(CONSUMER).read_text())
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    consumer_kubeconfig = federation["directory"] / "unreachable-consumer.kubeconfig"
    consumer_kubeconfig.write_text(yaml.safe_dump(unreachable))

    run = run_playbook(
        federation["inventory"],
        playbook=unpeer_playbook(federation["directory"], lab, str(consumer_kubeconfig), force=True),
    )
    assert run.returncode == 0, run.failures()
    result = task_result(run, "Un-peer cluster-3")
    assert [line for line in result["not_cleaned"] if line.startswith(f"{CONSUMER} (unreachable): virtual node")]
    assert not exists(lab, DEAD, "namespace", TENANT)
    assert "catamaran-tenant" not in lab.kubectl(DEAD, "get", "clusterroles", "-o", "name").stdout
