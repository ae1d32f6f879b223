"""Two replicas of the manager and of a virtual kubelet, one acting at a time (leader election on Leases).

cluster-1 consumes cluster-2 (kwok nodes). Each replica is a process of its own, as a pod of a two-replica
Deployment would be. Killing the acting one (SIGKILL: no goodbye, no release of its Lease) hands over to the other
(the test prints how long it took: a figure, not an assertion), while the virtual node stays Ready, no remote pod
is recreated and no local pod's status goes backwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
import uuid

import pytest

from catamaran.constants import MANAGER_LEASE, VK_SERVICE_ACCOUNT_PREFIX, virtual_node_name
from catamaran.kube.clients import async_client, kubeconfig_from_file
from catamaran.kube.leaderelection import LeaderElector

from . import federation
from .lab_access import get_json, wait_for
from .manifests import container, deployment

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NAMESPACE = "high-availability"
TWIN = f"{NAMESPACE}-{CONSUMER}"
NODE = virtual_node_name(PROVIDER)
VK_LEASE = f"{VK_SERVICE_ACCOUNT_PREFIX}{PROVIDER}"
PODS = 50
# The pods ask for the virtual node themselves (the consumer's manager runs only to approve the virtual kubelets'
# serving certificates; its webhook would add the same).
ON_THE_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
}


def offloaded(name: str, replicas: int) -> dict:
    return deployment(
        name, replicas, {"containers": [container(cpu="10m", memory="16Mi")], **ON_THE_VIRTUAL_NODE}, NAMESPACE
    )


def replicas(process: federation.ControllerProcess) -> dict[str, federation.ControllerProcess]:
    """Two replicas of a process, each with its own name in the Lease."""
    return {
        identity: federation.ControllerProcess(
            process.lab,
            f"{process.name}-{identity}",
            ["--leader-elect", "--leader-elect-identity", identity, *process.args],
        )
        for identity in ("replica-a", "replica-b")
    }


@pytest.fixture(scope="module")
def fed(lab):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER)
    managers = replicas(federation.manager(lab, PROVIDER))
    vks = replicas(federation.virtual_kubelet(lab, CONSUMER, PROVIDER))
    # Every process the peering needs, the consumer's CSR approver included: nothing left by an earlier test.
    processes = [federation.consumer_manager(lab, CONSUMER), *managers.values(), *vks.values()]
    with federation.serving(lab, CONSUMER, PROVIDER, NAMESPACE, processes):
        yield {"managers": managers, "vks": vks}


def running(lab, app: str) -> int:
    pods = get_json(lab, CONSUMER, "pods", "-n", NAMESPACE, "-l", f"app={app}")["items"]
    return sum(1 for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == NODE)


def hand_over(lab, cluster: str, lease: str, processes: dict[str, federation.ControllerProcess]) -> tuple[str, float]:
    """SIGKILL the replica holding `lease`; (the other's identity, seconds until it holds the Lease)."""
    leader = wait_for(lambda: federation.lease_holder(lab, cluster, lease), what=f"a holder of Lease {lease}")
    (standby,) = set(processes) - {leader}
    processes[leader].process.send_signal(signal.SIGKILL)
    processes[leader].process.wait(timeout=10)
    killed = time.monotonic()
    wait_for(
        lambda: federation.lease_holder(lab, cluster, lease) == standby,
        timeout=30,
        interval=0.2,
        what=f"{standby} to lead",
    )
    return standby, time.monotonic() - killed


def test_killing_the_acting_replicas_hands_over_without_recreating_a_remote_pod(lab, fed):
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(offloaded("web", PODS)))
    wait_for(lambda: running(lab, "web") == PODS, timeout=120, what=f"{PODS} offloaded pods Running")
    before = federation.pod_uids(lab, PROVIDER, TWIN)
    assert len(before) == PODS

    with federation.watching(lab, CONSUMER, NODE, NAMESPACE) as seen:
        vk_standby, vk_seconds = hand_over(lab, CONSUMER, VK_LEASE, fed["vks"])
        # The new leader acts: a pod created now is offloaded by it.
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(offloaded("after-vk", 1)))
        wait_for(lambda: running(lab, "after-vk") == 1, timeout=60, what="a pod offloaded by the new virtual kubelet")

        manager_standby, manager_seconds = hand_over(lab, PROVIDER, MANAGER_LEASE, fed["managers"])
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(offloaded("after-manager", 1)))
        wait_for(lambda: running(lab, "after-manager") == 1, timeout=60, what="a pod made by the new manager")
        after = federation.pod_uids(lab, PROVIDER, TWIN)

    print(f"hand-over: virtual kubelet to {vk_standby} in {vk_seconds:.1f}s, manager to {manager_standby} in "
          f"{manager_seconds:.1f}s (Lease duration 10 s)")  # fmt: skip
    assert {name: after[name] for name in before} == before  # not one remote pod recreated
    assert seen["samples"] >= 3, seen  # it sampled, however slow the reads under load
    assert seen["not_ready"] == [], seen
    assert seen["backwards"] == []


def test_a_candidate_whose_lease_namespace_is_missing_says_so_and_leads_once_it_exists(lab, caplog):
    """A wrong --leader-elect-namespace is logged with what to do, and waited out, not a traceback and an exit."""
    namespace = f"lease-{uuid.uuid4().hex[:8]}"

    async def scenario() -> str | None:
        client = async_client(kubeconfig_from_file(str(lab.kubeconfig(PROVIDER))), None, "catamaran-test")
        elector = LeaderElector(client, "probe", namespace, "candidate", retry_period=0.5)
        acquiring = asyncio.ensure_future(elector.acquire())
        try:
            deadline = time.monotonic() + 30
            while not [r for r in caplog.records if r.getMessage().startswith("cannot take the leader election")]:
                assert time.monotonic() < deadline, "no error logged for the missing namespace"
                assert not acquiring.done(), acquiring
                await asyncio.sleep(0.2)
            await asyncio.to_thread(lab.kubectl, PROVIDER, "create", "namespace", namespace)
            await asyncio.wait_for(acquiring, timeout=30)
            return await asyncio.to_thread(
                lambda: get_json(lab, PROVIDER, "lease", "-n", namespace, "probe")["spec"]["holderIdentity"]
            )
        finally:
            acquiring.cancel()
            await elector.release()
            await client.close()

    caplog.set_level(logging.ERROR, logger="catamaran.kube.leaderelection")
    try:
        assert asyncio.run(scenario()) == "candidate"
    finally:
        lab.kubectl(PROVIDER, "delete", "namespace", namespace, "--wait=false", check=False)
    refused = next(r for r in caplog.records if r.getMessage().startswith("cannot take the leader election"))
    assert refused.exc_info is None
    assert f'namespaces "{namespace}" not found' in refused.fields["error"]
    assert "--leader-elect-namespace" in refused.fields["error"]
