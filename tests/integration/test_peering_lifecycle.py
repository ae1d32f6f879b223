"""A virtual kubelet follows its peering's lifecycle: started before the peering exists, it waits and
then serves; when the ForeignCluster is deleted, it removes its virtual node and Lease and exits 0.

Consumer cluster-1, provider cluster-3. The tests run in file order and share one virtual kubelet.
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import NODE_LEASE_NAMESPACE, SYSTEM_NAMESPACE, virtual_node_name

from . import federation
from .lab_access import wait_for

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-3"
NODE = virtual_node_name(PROVIDER)


def node_ready(lab) -> str | None:
    result = lab.kubectl(CONSUMER, "get", "node", NODE, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def exists(lab, *args: str) -> bool:
    return lab.kubectl(CONSUMER, "get", *args, check=False).returncode == 0


def log_lines(process: federation.ControllerProcess) -> list[dict]:
    """The process's JSON log lines from this run; the log file is appended to across runs."""
    with process.log_path.open("rb") as log:
        log.seek(process.log_start)
        text = log.read().decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def vk(lab):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.unpeer(lab, CONSUMER, PROVIDER)  # leftovers of an interrupted run would make the wait moot
    manager = federation.manager(lab, PROVIDER)
    kubelet = federation.virtual_kubelet(lab, CONSUMER, PROVIDER)
    kubelet.log_start = kubelet.log_path.stat().st_size if kubelet.log_path.exists() else 0  # for log_lines
    try:
        manager.start()
        kubelet.start()
        yield kubelet
    finally:
        kubelet.stop()
        manager.stop()
        federation.unpeer(lab, CONSUMER, PROVIDER)


def test_virtual_kubelet_started_before_the_peering_serves_once_it_exists(lab, vk):
    # Peer only once it is waiting, or this would not show that it notices the peering appear.
    wait_for(
        lambda: any(line.get("reason") == "ForeignClusterMissing" for line in log_lines(vk)),
        timeout=30,
        what="the virtual kubelet to report its ForeignCluster missing",
    )
    assert not exists(lab, "node", NODE)

    federation.peer(lab, CONSUMER, PROVIDER)
    wait_for(lambda: node_ready(lab) == "True", timeout=60, what=f"virtual node {NODE} Ready")
    assert vk.running  # the same process connected; nothing restarted it
    assert exists(lab, "lease", "-n", NODE_LEASE_NAMESPACE, NODE)


def test_deleting_the_foreign_cluster_removes_the_node_and_ends_the_virtual_kubelet(lab, vk):
    lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "delete", "foreigncluster", PROVIDER)
    wait_for(lambda: not vk.running, timeout=60, what="the virtual kubelet to exit")
    assert vk.process.returncode == 0, vk.tail()
    assert not exists(lab, "node", NODE)
    assert not exists(lab, "lease", "-n", NODE_LEASE_NAMESPACE, NODE)
    messages = [line["msg"] for line in log_lines(vk)]
    assert "virtual node and lease deleted" in messages
    assert "peering removed; exiting" in messages
