"""Stale status never blocks deletion: a provider un-peered while a namespace stays offloaded.

Lab: consumer cluster-1 (its manager), provider cluster-2 (its manager and the virtual kubelet).
The ForeignCluster is deleted while the namespace is offloaded there: the virtual kubelet removes its
node and ends, leaving its entry in the NamespaceOffloading's status with nobody to clear it, until
the consumer's manager sees the cluster is no longer peered.
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import SYSTEM_NAMESPACE, virtual_node_name

from . import federation
from .lab_access import wait_for

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NAMESPACE = "stale-offloading"


def offloading_status(lab) -> dict | None:
    result = lab.kubectl(
        CONSUMER, "-n", NAMESPACE, "get", "namespaceoffloading", "offloading", "-o", "json", check=False
    )
    return (json.loads(result.stdout).get("status") or {}) if result.returncode == 0 else None


def entry(lab) -> dict | None:
    status = offloading_status(lab) or {}
    return next((e for e in status.get("clusters") or [] if e["clusterID"] == PROVIDER), None)


def exists(lab, *args) -> bool:
    return lab.kubectl(CONSUMER, "get", *args, check=False).returncode == 0


def test_unpeering_clears_the_entry_and_deletion_completes(lab):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER)
    processes = federation.peering_processes(lab, CONSUMER, PROVIDER)
    for process in processes:
        process.start()
    try:
        lab.kubectl(CONSUMER, "create", "namespace", NAMESPACE, check=False)
        federation.offload_namespace(lab, CONSUMER, NAMESPACE)
        ready = wait_for(
            lambda: (e := entry(lab)) and e["phase"] == "Ready" and e, timeout=90, what="the provider's twin Ready"
        )
        assert ready["remoteNamespace"] == f"{NAMESPACE}-{CONSUMER}"

        # Un-peer while the namespace stays offloaded: the virtual kubelet deletes its node and ends.
        lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "delete", "foreignclusters.core.catamaran.io", PROVIDER)
        wait_for(
            lambda: not exists(lab, "node", virtual_node_name(PROVIDER)) and not processes[2].running,
            timeout=60,
            what="the virtual node gone and its kubelet ended",
        )
        wait_for(lambda: entry(lab) is None, timeout=60, what="the un-peered provider's entry cleared")
        assert offloading_status(lab)["offloadingPhase"] in ("NoClusterSelected",)

        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "namespaceoffloading", "offloading", "--wait=false")
        wait_for(
            lambda: not exists(lab, "namespaceoffloading", "-n", NAMESPACE, "offloading"),
            timeout=60,
            what="the NamespaceOffloading deleted",
        )
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, "--wait=false")
        wait_for(lambda: not exists(lab, "namespace", NAMESPACE), timeout=90, what="the namespace deleted")
    finally:
        for process in processes:
            process.stop()
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, "--wait=false", check=False)
        lab.kubectl(CONSUMER, "delete", "mutatingwebhookconfiguration", federation.WEBHOOK, check=False)
        federation.unpeer(lab, CONSUMER, PROVIDER)
