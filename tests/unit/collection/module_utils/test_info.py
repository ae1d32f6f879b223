"""The reports of the info modules (plugins/module_utils/info.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

import pytest
from ansible_collections.catamaran.federation.plugins.module_utils.info import managed_report, peerings_report
from ansible_collections.catamaran.federation.plugins.module_utils.kube import ClusterError


def test_the_peerings_report_shows_the_node_taints():
    class Cluster:
        def get(self, *args):
            return {"kind": "CustomResourceDefinition"}

        def list(self, api_version, kind, namespace=None, labels=None):
            if kind == "Node":
                return []
            taint = {"key": "example.com/costly", "effect": "NoSchedule"}
            return [
                {"metadata": {"name": "p1"}, "spec": {"clusterID": "p1", "nodeTaints": [taint]}},
                {"metadata": {"name": "p2"}, "spec": {"clusterID": "p2"}},
            ]

    first, second = peerings_report(Cluster())
    assert first["node_taints"] == [{"key": "example.com/costly", "effect": "NoSchedule"}]
    assert second["node_taints"] == []


def test_what_the_collection_made_is_listed_by_label_and_a_kind_the_credential_may_not_list_is_none():
    class Cluster:
        def __init__(self, refused=()):
            self.refused = refused
            self.selectors = []

        def list(self, api_version, kind, namespace=None, labels=None):
            self.selectors.append(labels)
            if kind in self.refused:
                raise ClusterError(f"list {kind}: forbidden", status=403)
            if kind == "ForeignCluster":
                return [{"metadata": {"name": "b"}, "spec": {"clusterID": "p2"}}, {"metadata": {"name": "p1"}}]
            if kind == "NamespaceOffloading":
                return [{"metadata": {"name": "offloading", "namespace": "demo"}}]
            return []

    every_crd = [
        "foreignclusters.core.catamaran.io",
        "namespaceoffloadings.offloading.catamaran.io",
        "namespaceoffloadingpolicies.offloading.catamaran.io",
    ]
    cluster = Cluster()
    assert managed_report(cluster, every_crd) == {
        "peerings": ["p1", "p2"],
        "offloaded_namespaces": ["demo"],
        "offloading_policies": [],
    }
    assert set(cluster.selectors) == {"app.kubernetes.io/managed-by=catamaran.federation"}
    assert managed_report(Cluster(), []) == {"peerings": [], "offloaded_namespaces": [], "offloading_policies": []}
    assert managed_report(Cluster(refused={"ForeignCluster"}), every_crd)["peerings"] is None

    class Broken(Cluster):
        def list(self, *args, **kwargs):
            raise ClusterError("list: internal error", status=500)

    with pytest.raises(ClusterError):  # anything but a refusal is an error
        managed_report(Broken(), every_crd)
