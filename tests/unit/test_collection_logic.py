"""Pure logic of the catamaran.federation collection: inventory model, diffs, secrecy."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model
from ansible_collections.catamaran.federation.plugins.module_utils.changes import comparable, redacted
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, api_toleration


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
    ],
)
def test_invalid_inventories_name_the_host_and_field(cluster_1, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        federation_model(inventory(**cluster_1), ["h1", "h2"])


def test_comparable_ignores_what_the_server_changes_on_every_write():
    live = {
        "kind": "ConfigMap",
        "metadata": {"name": "a", "resourceVersion": "7", "managedFields": [{}], "uid": "u", "generation": 2},
        "data": {"k": "v"},
        "status": {"x": 1},
    }
    assert comparable(live) == {"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}


def test_secret_values_become_digests_and_other_kinds_are_untouched():
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"kubeconfig": "c2VjcmV0"}}
    shown = redacted(secret)
    assert "c2VjcmV0" not in str(shown)
    assert shown["data"]["kubeconfig"].startswith("<redacted sha256:")
    assert redacted({**secret, "data": {"kubeconfig": "b3RoZXI="}}) != shown
    assert secret["data"]["kubeconfig"] == "c2VjcmV0"
    config_map = {"kind": "ConfigMap", "data": {"k": "v"}}
    assert redacted(config_map) is config_map


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


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"operator": "Equal"}, r"provider_tolerations\[0\]: operator Equal needs a key"),
        ({"key": "k", "operator": "Exists", "value": "v"}, r"operator Exists takes no value"),
        ({"key": "k", "effect": "Sometimes"}, r"effect must be one of"),
    ],
)
def test_the_peering_module_refuses_a_bad_toleration_before_any_change(toleration, message):
    params = {"consumer_id": "c1", "provider_id": "p1", "provider_tolerations": [toleration]}
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(params)


def test_module_tolerations_are_written_as_the_api_spells_them():
    written = api_toleration(
        {"key": "k", "operator": "Exists", "value": None, "effect": "NoExecute", "toleration_seconds": 30}
    )
    assert written == {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
