"""The inventory model (plugins/filter/federation_model.py): peerings, offloading policies, placement,
reflection, Pod Security and the errors naming host and field.
"""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model


def inventory(**cluster_1):
    return {
        "h1": {"catamaran_cluster_id": "cluster-1", "catamaran_kubeconfig": "/k1", **cluster_1},
        "h2": {
            "catamaran_cluster_id": "cluster-2",
            "catamaran_kubeconfig": "/k2",
            "catamaran_context": "ctx-2",
            "catamaran_cluster_labels": {"topology.kubernetes.io/region": "region-b"},
        },
    }


def test_peerings_resolve_the_providers_connection_and_labels():
    model = federation_model(
        inventory(catamaran_peerings=[{"provider": "cluster-2", "node_labels": {"tier": "gold"}}]), ["h1", "h2"]
    )
    (peering,) = model["peerings"]["cluster-1"]
    assert peering["kubeconfig"] == "/k2"
    assert peering["context"] == "ctx-2"
    assert peering["sharing_percentage"] == 90
    assert peering["node_labels"] == {"topology.kubernetes.io/region": "region-b", "tier": "gold"}
    assert peering["node_taints"] == []
    assert model["peerings"]["cluster-2"] == []
    assert model["hosts"] == {"h1": "cluster-1", "h2": "cluster-2"}


@pytest.mark.parametrize(
    ("cluster_1", "message"),
    [
        ({"catamaran_peerings": [{"provider": "cluster-9"}]}, "no cluster with id 'cluster-9'"),
        ({"catamaran_peerings": [{"provider": "cluster-2", "sharing_percentage": 150}]}, "got 150"),
        ({"catamaran_peerings": [{"provider": "cluster-2", "sharing_percentage": True}]}, "got True"),
        ({"catamaran_peerings": [{"provider": "cluster-1"}]}, "cannot peer with itself"),
        ({"catamaran_peerings": [{"provider": "cluster-2"}, {"provider": "cluster-2"}]}, "peered twice"),
        ({"catamaran_peerings": [{"provider": "cluster-2", "sharing": 5}]}, "unknown keys ['sharing']"),
        ({"catamaran_cluster_id": "Cluster_1"}, "not a DNS-1123 label"),
        ({"catamaran_cluster_id": "cluster-2"}, "both have cluster id cluster-2"),
        ({"catamaran_kubeconfig": ""}, "catamaran_kubeconfig is not set"),
        ({"catamaran_offloaded_namespaces": [{"namespace": "demo"}]}, "peers with no provider"),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloaded_namespaces": [{"namespace": "demo", "pod_offloading_strategy": "Anywhere"}],
            },
            "pod_offloading_strategy must be one of",
        ),
        (
            {"catamaran_offloading_policies": [{"name": "team", "namespace_selector": {"matchLabels": {"t": "a"}}}]},
            "peers with no provider",
        ),
        (
            {"catamaran_peerings": [{"provider": "cluster-2"}], "catamaran_offloading_policies": [{"name": "team"}]},
            "catamaran_offloading_policies[0]: namespace_selector must hold matchLabels or matchExpressions",
        ),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloading_policies": [
                    {
                        "name": "team",
                        "namespace_selector": {"matchLabels": {"t": "a"}},
                        "namespace_mapping_strategy": "SelectedName",
                    }
                ],
            },
            "SelectedName names one twin",
        ),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloading_policies": [
                    {"name": "team", "namespace_selector": {"matchLabels": {"t": "a"}}},
                    {"name": "team", "namespace_selector": {"matchLabels": {"t": "b"}}},
                ],
            },
            "policy team is listed twice",
        ),
    ],
)
def test_invalid_inventories_name_the_host_and_field(cluster_1, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        federation_model(inventory(**cluster_1), ["h1", "h2"])


def test_offloading_policies_resolve_with_the_modules_defaults():
    policy = {"name": "team", "namespace_selector": {"matchLabels": {"team": "blue"}}}
    model = federation_model(
        inventory(catamaran_peerings=[{"provider": "cluster-2"}], catamaran_offloading_policies=[policy]), ["h1", "h2"]
    )
    assert model["offloading_policies"] == {
        "cluster-1": [
            {
                **policy,
                "pod_offloading_strategy": "LocalAndRemote",
                "namespace_mapping_strategy": "DefaultName",
                "cluster_selector": None,
            }
        ],
        "cluster-2": [],
    }


def test_a_peerings_placement_reaches_the_resolved_model():
    toleration = {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    entry = {"provider": "cluster-2", "provider_node_selector": {"pool": "real"}, "provider_tolerations": [toleration]}
    model = federation_model(inventory(catamaran_peerings=[entry]), ["h1", "h2"])
    peering = model["peerings"]["cluster-1"][0]
    assert peering["provider_node_selector"] == {"pool": "real"}
    assert peering["provider_tolerations"] == [toleration]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"provider_node_selector": ["pool=real"]}, "provider_node_selector must be a mapping"),
        ({"provider_tolerations": {"key": "k"}}, "provider_tolerations must be a list of mappings"),
    ],
)
def test_a_malformed_placement_is_refused_naming_the_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2", **entry}]), ["h1", "h2"])


def test_a_peerings_reflection_overrides_its_providers_key_by_key():
    hosts = inventory(
        catamaran_peerings=[
            {
                "provider": "cluster-2",
                "reflection": {
                    "kinds": {"secrets": {"policy": "AllowList"}, "ingresses": {"workers": 2}},
                    "filtered_labels": ["team"],
                },
            }
        ]
    )
    hosts["h2"]["catamaran_provider_reflection"] = {
        "kinds": {
            "ingresses": {"policy": "AllowList", "workers": 0},
            "services": {"workers": 1},
            "persistent_volume_claims": {"workers": 1},
        },
        "filtered_labels": ["a/", "b/"],
        "ingress_class_name": "nginx",
        "storage_class_name": "fast-ssd",
    }
    (peering,) = federation_model(hosts, ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering["reflection"] == {
        "kinds": {
            "ingresses": {"policy": "AllowList", "workers": 2},
            "services": {"workers": 1},
            "persistent_volume_claims": {"workers": 1},
            "secrets": {"policy": "AllowList"},
        },
        "filtered_labels": ["team"],
        "ingress_class_name": "nginx",
        "storage_class_name": "fast-ssd",
    }


def test_without_reflection_settings_the_model_carries_an_empty_mapping():
    model = federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2"}]), ["h1", "h2"])
    assert model["peerings"]["cluster-1"][0]["reflection"] == {}


@pytest.mark.parametrize(
    ("where", "settings", "message"),
    [
        ("peering", {"kinds": {"pods": {}}}, r"host h1: catamaran_peerings\[0\]: reflection\.kinds: unknown pods"),
        (
            "peering",
            {"kinds": {"secrets": {"policy": "Allow"}}},
            r"catamaran_peerings\[0\]: reflection\.kinds\.secrets\.policy",
        ),
        (
            "provider",
            {"kinds": {"secrets": {"workers": 100}}},
            r"host h2: catamaran_provider_reflection\.kinds\.secrets\.workers",
        ),
        (
            "provider",
            {"storage_class_name": 7},
            r"host h2: catamaran_provider_reflection\.storage_class_name must be a string",
        ),
        (
            "peering",
            {"kinds": {"persistent_volume_claims": {"workers": -1}}},
            r"catamaran_peerings\[0\]: reflection\.kinds\.persistent_volume_claims\.workers .* got -1",
        ),
    ],
)
def test_bad_reflection_settings_in_the_inventory_name_the_host_and_field(where, settings, message):
    if where == "peering":
        hosts = inventory(catamaran_peerings=[{"provider": "cluster-2", "reflection": settings}])
    else:
        hosts = inventory(catamaran_peerings=[{"provider": "cluster-2"}])
        hosts["h2"]["catamaran_provider_reflection"] = settings
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(hosts, ["h1", "h2"])


def test_peerings_carry_pod_security_and_credential_lifetime_with_defaults():
    model = federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2"}]), ["h1", "h2"])
    (peering,) = model["peerings"]["cluster-1"]
    assert (peering["pod_security"], peering["credential_lifetime"]) == ("restricted", 86400)
    assert model["clusters"]["cluster-2"]["allowed_pod_security"] == ["restricted", "baseline"]


def test_privileged_only_when_the_providers_inventory_allows_it():
    entry = {"provider": "cluster-2", "pod_security": "privileged", "credential_lifetime": 3600}
    with pytest.raises(
        AnsibleFilterError,
        match=r"host h1: catamaran_peerings\[0\]: pod_security privileged is not allowed by provider cluster-2 "
        r"\(host h2: catamaran_allowed_pod_security is restricted, baseline\)",
    ):
        federation_model(inventory(catamaran_peerings=[entry]), ["h1", "h2"])
    variables = inventory(catamaran_peerings=[entry])
    variables["h2"]["catamaran_allowed_pod_security"] = ["privileged", "restricted"]
    (peering,) = federation_model(variables, ["h1", "h2"])["peerings"]["cluster-1"]
    assert (peering["pod_security"], peering["credential_lifetime"]) == ("privileged", 3600)


def test_a_peerings_node_taints_reach_the_resolved_model():
    taints = [{"key": "example.com/costly", "value": "true", "effect": "NoSchedule"}]
    entry = {"provider": "cluster-2", "node_taints": taints}
    (peering,) = federation_model(inventory(catamaran_peerings=[entry]), ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering["node_taints"] == taints


def test_a_provider_can_lend_less_than_the_default():
    variables = inventory(catamaran_peerings=[{"provider": "cluster-2", "pod_security": "baseline"}])
    variables["h2"]["catamaran_allowed_pod_security"] = ["restricted"]
    with pytest.raises(AnsibleFilterError, match="pod_security baseline is not allowed by provider cluster-2"):
        federation_model(variables, ["h1", "h2"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"pod_security": "root"}, r"catamaran_peerings\[0\]: pod_security must be one of"),
        ({"credential_lifetime": 100}, r"catamaran_peerings\[0\]: credential_lifetime must be an integer of at least"),
        ({"node_labels": {"bad key": "x"}}, r"catamaran_peerings\[0\]: node_labels: label key 'bad key'"),
        ({"node_labels": {"tier": 5}}, r"node_labels.tier: label value must be a string, got 5"),
        ({"provider_node_selector": {"pool": "a b"}}, r"provider_node_selector.pool: label value 'a b'"),
        ({"pod_cidr_remap": "10.200.0.0"}, r"catamaran_peerings\[0\]: pod_cidr_remap: '10.200.0.0' is not a CIDR"),
        ({"health_check": {"period_seconds": 0}}, r"health_check.period_seconds must be a positive integer, got 0"),
        ({"health_check": {"period": 5}}, r"catamaran_peerings\[0\]: health_check: unknown period"),
        ({"provider_tolerations": [{"key": "k", "efect": "NoSchedule"}]}, r"provider_tolerations\[0\]: unknown keys"),
        (
            {"node_taints": [{"key": "k", "efect": "NoSchedule"}]},
            r"catamaran_peerings\[0\]: node_taints\[0\]: unknown efect \(allowed: key, value, effect\)",
        ),
        ({"node_taints": {"key": "k"}}, r"catamaran_peerings\[0\]: node_taints must be a list of taints"),
        ({"node_taints": [{"key": "k", "effect": "NoSchedule"}] * 2}, r"node_taints\[1\]: a taint with key k"),
    ],
)
def test_bad_peering_settings_in_the_inventory_name_the_host_and_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2", **entry}]), ["h1", "h2"])


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"catamaran_allowed_pod_security": ["root"]}, r"host h1: catamaran_allowed_pod_security\[0\] must be one of"),
        ({"catamaran_allowed_pod_security": []}, r"host h1: catamaran_allowed_pod_security must be a non-empty list"),
        ({"catamaran_cluster_labels": {"Region!": "a"}}, r"host h1: catamaran_cluster_labels: label key 'Region!'"),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloaded_namespaces": [{"namespace": "demo", "x": 1}],
            },
            r"catamaran_offloaded_namespaces\[0\]: unknown keys \['x'\]",
        ),
    ],
)
def test_bad_cluster_settings_name_the_host_and_field(variables, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(**variables), ["h1", "h2"])


def test_a_misspelt_variable_is_refused_with_the_closest_name_not_read_as_nothing():
    hostvars = inventory(catamaran_peering=[{"provider": "cluster-2"}], catamaran_offloaded_namespace=[])
    with pytest.raises(AnsibleFilterError) as raised:
        federation_model(hostvars, ["h1", "h2"])
    message = str(raised.value)
    assert "host h1: unknown variable catamaran_offloaded_namespace (did you mean catamaran_offloaded_namespaces?)" in (
        message
    )
    assert "host h1: unknown variable catamaran_peering (did you mean catamaran_peerings?)" in message


def test_a_misspelt_group_variable_is_named_once_with_every_host_that_has_it():
    hostvars = inventory(catamaran_tenant_allowance={})
    hostvars["h2"]["catamaran_tenant_allowance"] = {}
    with pytest.raises(AnsibleFilterError, match=r"^hosts h1, h2: unknown variable catamaran_tenant_allowance \(did"):
        federation_model(hostvars, ["h1", "h2"])


def test_the_playbooks_switches_and_facts_are_known_and_nothing_else_passes_with_the_prefix():
    hostvars = inventory(catamaran_force_unpeer=True, catamaran_model={}, catamaran_allow_prune_all=True)
    federation_model(hostvars, ["h1", "h2"])
    hostvars["h1"]["catamaran_zzz"] = 1
    with pytest.raises(AnsibleFilterError, match=r"unknown variable catamaran_zzz \(known: catamaran_cluster_id, "):
        federation_model(hostvars, ["h1", "h2"])


def test_every_error_of_the_inventory_is_reported_in_one_run():
    hostvars = inventory(
        catamaran_peerings=[
            {"provider": "cluster-2", "sharing_percentage": 150},
            {"provider": "cluster-9"},
            {"provider": "cluster-3"},
        ],
        catamaran_offloaded_namespaces=[{"namespace": "Demo"}],
        catamaran_peeringz=[],
    )
    hostvars["h3"] = {"catamaran_cluster_id": "cluster-3", "catamaran_cluster_labels": {"bad key!": "x"}}
    with pytest.raises(AnsibleFilterError) as raised:
        federation_model(hostvars, ["h1", "h2", "h3"])
    lines = str(raised.value).splitlines()
    assert lines == [
        "the inventory has 6 errors:",
        "- host h1: unknown variable catamaran_peeringz (did you mean catamaran_peerings?)",
        "- host h3: catamaran_kubeconfig is not set",
        "- host h3: catamaran_cluster_labels: label key 'bad key!': the name 'bad key!' must be at most 63 letters, "
        "digits, '-', '_' or '.', starting and ending with a letter or digit",
        "- host h1: catamaran_peerings[0]: sharing_percentage must be an integer from 1 to 100, got 150",
        "- host h1: catamaran_peerings[1]: no cluster with id 'cluster-9' in the inventory "
        "(known: cluster-1, cluster-2)",
        "- host h1: catamaran_offloaded_namespaces[0]: namespace: 'Demo' is not a DNS-1123 label",
    ]
    # The peering with cluster-3, whose own entry is wrong, is not also reported as naming an unknown cluster.
