"""A peering's node pools in the inventory and the provider's catamaran_cordoned_pools
(plugins/filter/federation_model.py): what the model passes to the peering role and the controller role, and the
errors naming host, peering and pool.
"""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model

REAL = {
    "name": "real",
    "provider_node_selector": {"catamaran.io/lab-node-kind": "real"},
    "provider_tolerations": [
        {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    ],
}
GPU = {
    "name": "gpu",
    "provider_node_selector": {"catamaran.io/lab-node-kind": "kwok"},
    "sharing_percentage": 40,
    "node_labels": {"example.com/gpu": "true"},
    "node_taints": [{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}],
}


def inventory(pools=None, cordoned_pools=None, **peering):
    entry = {"provider": "cluster-2", **peering}
    if pools is not None:
        entry["pools"] = pools
    provider = {"catamaran_cluster_id": "cluster-2", "catamaran_kubeconfig": "/k2"}
    if cordoned_pools is not None:
        provider["catamaran_cordoned_pools"] = cordoned_pools
    return {
        "h1": {"catamaran_cluster_id": "cluster-1", "catamaran_kubeconfig": "/k1", "catamaran_peerings": [entry]},
        "h2": provider,
        "h3": {"catamaran_cluster_id": "cluster-3", "catamaran_kubeconfig": "/k3"},
    }


def model(hostvars):
    return federation_model(hostvars, sorted(hostvars))


def test_the_model_passes_each_pool_with_its_share_and_its_providers_cordon():
    resolved = model(
        inventory(
            [REAL, GPU],
            cordoned_pools={"cluster-1": {"gpu": {"state": "drained", "reason": "driver upgrade"}}},
            sharing_percentage=60,
        )
    )
    (peering,) = resolved["peerings"]["cluster-1"]
    assert peering["pools"] == [
        {
            "name": "real",
            "provider_node_selector": {"catamaran.io/lab-node-kind": "real"},
            "provider_tolerations": REAL["provider_tolerations"],
            "sharing_percentage": 60,  # the peering's
            "node_labels": {},
            "node_taints": [],
        },
        {
            "name": "gpu",
            "provider_node_selector": {"catamaran.io/lab-node-kind": "kwok"},
            "provider_tolerations": [],
            "sharing_percentage": 40,
            "node_labels": {"example.com/gpu": "true"},
            "node_taints": GPU["node_taints"],
            "cordon": {"state": "drained", "reason": "driver upgrade"},
        },
    ]
    assert "cordon" not in peering  # a pool's cordon is not the tenant's
    # Per consumer and provider, the names of the pools: the controller role's controller_virtual_kubelet_pools.
    assert resolved["pools"] == {"cluster-1": {"cluster-2": ["real", "gpu"]}, "cluster-2": {}, "cluster-3": {}}


@pytest.mark.parametrize("pools", [None, []])
def test_a_peering_without_pools_has_an_empty_list(pools):
    resolved = model(inventory(pools))
    (peering,) = resolved["peerings"]["cluster-1"]
    assert peering["pools"] == []
    assert resolved["pools"]["cluster-1"] == {"cluster-2": []}


def test_a_cordon_defaults_to_cordoned_without_a_reason():
    (peering,) = model(inventory([REAL], cordoned_pools={"cluster-1": {"real": None}}))["peerings"]["cluster-1"]
    assert peering["pools"][0]["cordon"] == {"state": "cordoned"}


WHERE = r"host h1: catamaran_peerings\[0\]: pools"


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ([{"name": "GPU"}], WHERE + r"\[0\]\.name: 'GPU' is not a pool name"),
        ([{"name": "g" * 21}], WHERE + r"\[0\]\.name: 'g{21}' is not a pool name .* at most 20 characters"),
        ([{"provider_node_selector": {}}], WHERE + r"\[0\]: a pool needs a name"),
        ([{"name": "a"}, {"name": "a"}], WHERE + r"\[1\]: pool a is listed before, as pools\[0\]"),
        ([{"name": f"p{n}"} for n in range(17)], WHERE + r": at most 16 pools per peering, got 17"),
        ([{"name": "a", "gpus": 1}], WHERE + r"\[0\]: unknown gpus \(allowed: name, provider_node_selector, "),
        ({"a": {}}, WHERE + r" must be a list of pools"),
        (
            [{"name": "a", "cordon": {"state": "drained"}}],
            WHERE + r"\[0\]: a pool's cordon is its provider's to set: in host h2's catamaran_cordoned_pools, under "
            r"cluster-1 and the pool's name",
        ),
        ([{"name": "a", "sharing_percentage": 0}], WHERE + r"\[0\] \(pool a\)\.sharing_percentage must be an integer"),
        (
            [{"name": "a", "sharing_percentage": True}],
            WHERE + r"\[0\] \(pool a\)\.sharing_percentage must be an integer from 1 to 100, got True",
        ),
        (
            [{"name": "a", "provider_tolerations": [{"operator": "Exists", "value": "v"}]}],
            WHERE + r"\[0\] \(pool a\)\.provider_tolerations\[0\]: operator Exists takes no value",
        ),
        (
            [{"name": "a", "provider_tolerations": [{"key": "k", "tolerate": True}]}],
            WHERE + r"\[0\] \(pool a\)\.provider_tolerations\[0\]: unknown tolerate",
        ),
        (
            [{"name": "a", "node_labels": {"example.com/gpu": 1}}],
            WHERE + r"\[0\] \(pool a\)\.node_labels\.example\.com/gpu: label value must be a string, got 1",
        ),
        (
            [{"name": "a", "node_taints": [{"key": "k", "effect": "Never"}]}],
            WHERE + r"\[0\] \(pool a\)\.node_taints\[0\]\.effect must be one of NoSchedule",
        ),
    ],
)
def test_a_bad_pool_is_refused_naming_host_peering_and_pool(pools, message):
    with pytest.raises(AnsibleFilterError, match=message):
        model(inventory(pools))


def test_a_pool_whose_virtual_node_name_is_too_long_is_refused_naming_the_node():
    hostvars = inventory([{"name": "y" * 20}])
    long_id = "cluster-" + "2" * 27  # catamaran-<35>.<20> is 66 characters
    hostvars["h1"]["catamaran_peerings"][0]["provider"] = long_id
    hostvars["h2"]["catamaran_cluster_id"] = long_id
    with pytest.raises(
        AnsibleFilterError,
        match=WHERE + rf"\[0\] \(pool y{{20}}\): the pool's virtual node catamaran-{long_id}\.y{{20}} would have 66 "
        r"characters, more than the 63 of a kubernetes.io/hostname label \(with provider .*, a pool name of at most 17 "
        r"characters fits\)",
    ):
        model(hostvars)


@pytest.mark.parametrize(
    ("cordoned", "message"),
    [
        (
            {"cluster-1": {"gpu": {}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-1\.gpu: the peering of cluster-1 \(host h1\) with cluster-2 "
            r"declares no pool gpu \(its pools: real\)$",
        ),
        (
            {"cluster-3": {"real": {}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-3: cluster cluster-3 \(host h3\) does not peer with "
            r"cluster-2, so it has no pool real to cordon$",
        ),
        (
            {"cluster-9": {"real": {}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-9: no cluster with id 'cluster-9' in the inventory",
        ),
        (
            {"cluster-1": {"real": {"state": "paused"}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-1\.real\.state: 'paused' is not one of cordoned, drained",
        ),
        (
            {"cluster-1": {"real": {"why": "x"}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-1\.real: unknown why \(allowed: state, reason\)",
        ),
        (
            {"cluster-1": {"real": {"reason": "x" * 257}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-1\.real\.reason: at most 256 characters",
        ),
        (
            {"cluster-1": {"Real": {}}},
            r"^host h2: catamaran_cordoned_pools\.cluster-1\.Real: 'Real' is not a pool name",
        ),
        ({"cluster-1": ["real"]}, r"^host h2: catamaran_cordoned_pools\.cluster-1 must be a mapping of pool names"),
        (["cluster-1"], r"^host h2: catamaran_cordoned_pools must be a mapping of consumer cluster ids"),
        ({"Cluster_1": {}}, r"^host h2: catamaran_cordoned_pools\.Cluster_1: 'Cluster_1' is not a DNS-1123 label"),
    ],
)
def test_a_wrong_pool_cordon_is_refused_naming_it(cordoned, message):
    with pytest.raises(AnsibleFilterError, match=message):
        model(inventory([REAL], cordoned_pools=cordoned))


def test_every_error_of_pools_and_their_cordons_is_listed_at_once():
    hostvars = inventory([REAL, {"name": "Bad"}], cordoned_pools={"cluster-3": {"gpu": {}}})
    hostvars["h3"]["catamaran_peerings"] = [{"provider": "cluster-2", "pools": [{"name": "a", "node_labels": []}]}]
    with pytest.raises(AnsibleFilterError) as failure:
        model(hostvars)
    message = str(failure.value)
    assert message.startswith("the inventory has 2 errors:")
    assert "host h1: catamaran_peerings[0]: pools[1].name: 'Bad' is not a pool name" in message
    assert "host h3: catamaran_peerings[0]: pools[0] (pool a).node_labels must be a mapping of labels" in message
    # cluster-3's cordoned gpu is not reported again: its peering with cluster-2 has an error of its own.
    assert "catamaran_cordoned_pools" not in message


def test_the_cordon_of_a_pool_is_checked_against_the_consumer_once_its_peering_is_valid():
    hostvars = inventory([REAL], cordoned_pools={"cluster-1": {"real": {"state": "cordoned"}}})
    hostvars["h1"]["catamaran_peerings"][0]["sharing_percentage"] = 0  # the peering itself is wrong
    with pytest.raises(AnsibleFilterError) as failure:
        model(hostvars)
    assert "sharing_percentage must be an integer from 1 to 100, got 0" in str(failure.value)
    assert "catamaran_cordoned_pools" not in str(failure.value)


def test_catamaran_cordoned_pools_is_a_known_variable_and_a_misspelling_is_not():
    model(inventory([REAL], cordoned_pools={}))
    hostvars = inventory([REAL])
    hostvars["h2"]["catamaran_cordoned_pool"] = {"cluster-1": {"real": {}}}
    with pytest.raises(
        AnsibleFilterError,
        match=r"host h2: unknown variable catamaran_cordoned_pool \(did you mean catamaran_cordoned_pools\?\)",
    ):
        model(hostvars)
