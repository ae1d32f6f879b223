"""The inventory model's tenant terms (plugins/filter/federation_model.py): passed as set, lent by the provider."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model
from ansible_collections.catamaran.federation.plugins.module_utils import validation

from tests.unit.collection.peering_fakes import inventory

LENT = {
    "service_types": ["NodePort"],
    "twin_namespace_names": ["Suffixed", "Any"],
    "priority_classes": ["gold"],
    "pod_annotations": ["prometheus.io/*"],
    "max_termination_grace_period": 3600,
}


def test_the_model_passes_each_term_as_set_and_leaves_the_rest_to_the_module():
    entry = {
        "allowed_service_types": ["NodePort"],
        "twin_namespace_names": "Any",
        "allowed_priority_classes": ["gold"],
        "container_defaults": {"limits": {"memory": "4Gi"}},
        "object_quota": {"services": 500},
        "allowed_pod_annotations": ["prometheus.io/scrape"],  # within the prefix lent
        "max_termination_grace_period": 600,
    }
    (peering,) = federation_model(inventory(LENT, **entry), ["h1", "h2"])["peerings"]["cluster-1"]
    for option in validation.TERMS_OPTIONS:
        assert peering.get(option) == entry.get(option)
    (unset,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    assert not set(validation.TERMS_OPTIONS) & set(unset)  # left out, for the role to omit


@pytest.mark.parametrize(
    ("entry", "lent"),
    [
        ({"allowed_service_types": ["ClusterIP", "LoadBalancer"]}, "catamaran_tenant_allowances.service_types"),
        ({"twin_namespace_names": "Any"}, "catamaran_tenant_allowances.twin_namespace_names"),
        ({"allowed_priority_classes": ["platinum"]}, "catamaran_tenant_allowances.priority_classes"),
        ({"allowed_load_balancer_classes": ["example.com/vip"]}, "catamaran_tenant_allowances.load_balancer_classes"),
        ({"allowed_pod_annotations": ["karpenter.sh/do-not-disrupt"]}, "catamaran_tenant_allowances.pod_annotations"),
    ],
)
def test_a_consumer_entry_cannot_ask_what_the_provider_does_not_lend(entry, lent):
    """The allowances are the provider's own inventory entry's to give, as privileged Pod Security is."""
    with pytest.raises(AnsibleFilterError, match=r"not lent by provider cluster-2 \(host h2: " + lent):
        federation_model(inventory({} if "Any" in str(entry) else None, **entry), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"host h2: catamaran_tenant_allowances: unknown keys \['nodeports'\]"):
        federation_model(inventory({"nodeports": True}), ["h1", "h2"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"allowed_service_types": ["Ingress"]}, r"catamaran_peerings\[0\]: allowed_service_types\[0\] must be one"),
        ({"twin_namespace_names": "Same"}, r"catamaran_peerings\[0\]: twin_namespace_names must be one of"),
        ({"priority_class": "Gold"}, r"catamaran_peerings\[0\]: priority_class: 'Gold' is not a DNS-1123"),
        ({"object_quota": {"services": "lots"}}, r"catamaran_peerings\[0\]: object_quota.services: 'lots'"),
        ({"container_defaults": {"requests": {"cpu": "4"}}}, r"container_defaults: requests.cpu 4 is above limits"),
        ({"allowed_services": ["NodePort"]}, r"catamaran_peerings\[0\]: unknown keys \['allowed_services'\]"),
    ],
)
def test_bad_terms_in_the_inventory_name_the_host_and_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=r"host h1: .*" + message):
        federation_model(inventory(**entry), ["h1", "h2"])


def test_a_consumer_entry_cannot_ask_a_longer_grace_than_the_provider_lends():
    federation_model(inventory(None, max_termination_grace_period=300), ["h1", "h2"])  # the default lent
    with pytest.raises(
        AnsibleFilterError,
        match=r"max_termination_grace_period 301 is above what provider cluster-2 lends \(host h2: "
        r"catamaran_tenant_allowances.max_termination_grace_period is 300\)",
    ):
        federation_model(inventory(None, max_termination_grace_period=301), ["h1", "h2"])
    federation_model(inventory({"max_termination_grace_period": 3600}, max_termination_grace_period=3600), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"catamaran_tenant_allowances.max_termination_grace_period must be"):
        federation_model(inventory({"max_termination_grace_period": "long"}), ["h1", "h2"])
