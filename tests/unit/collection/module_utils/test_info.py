"""The peerings report (plugins/module_utils/info.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.info import peerings_report


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
