"""The tenant's cluster roles (plugins/module_utils/tenancy.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.constants import TENANT_WORKLOAD_CLUSTER_ROLE
from ansible_collections.catamaran.federation.plugins.module_utils.tenancy import provider_cluster_roles


def test_the_tenant_reflects_with_exactly_the_verbs_reflection_uses():
    (workload,) = [r for r in provider_cluster_roles() if r["metadata"]["name"] == TENANT_WORKLOAD_CLUSTER_ROLE]
    granted = {}
    for rule in workload["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    reflected = [
        ("", "configmaps"),
        ("", "secrets"),
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
        ("networking.k8s.io", "ingresses"),
        ("", "persistentvolumeclaims"),
    ]
    for key in reflected:
        assert granted[key] == {"get", "list", "watch", "create", "update", "delete"}, key
    # The provider's volumes are its own: the tenant neither reads nor makes PersistentVolumes or classes.
    assert ("", "persistentvolumes") not in granted
    assert ("storage.k8s.io", "storageclasses") not in granted
