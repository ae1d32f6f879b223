"""plugins/module_utils/crds.py: what the served CRDs hold."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.crds import serves_field


def test_a_field_is_served_only_when_a_version_of_the_served_crd_declares_it():

    def crd(networking: dict) -> dict:
        schema = {"properties": {"spec": {"properties": {"networking": {"properties": networking}}}}}
        return {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": schema}}]}}

    class Served:
        def __init__(self, served):
            self.served = served

        def get(self, api_version, kind, name, namespace=None):
            assert (api_version, kind) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            return self.served

    path = ("spec", "networking", "podCIDRs")
    assert serves_field(Served(crd({"podCIDRs": {"type": "array"}})), "foreignclusters.core.catamaran.io", path)
    assert not serves_field(Served(crd({"mode": {"type": "string"}})), "foreignclusters.core.catamaran.io", path)
    assert not serves_field(Served(None), "foreignclusters.core.catamaran.io", path)  # no CRD yet
