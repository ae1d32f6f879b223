"""How the inventory model makes a peering's network from both clusters' catamaran_network
(plugins/filter/federation_model.py).
"""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model


def inventory(consumer_network=None, provider_network=None):
    def host(cluster_id, kubeconfig, network, **more):
        return {
            "catamaran_cluster_id": cluster_id,
            "catamaran_kubeconfig": kubeconfig,
            **({"catamaran_network": network} if network is not None else {}),
            **more,
        }

    return {
        "h1": host("cluster-1", "/k1", consumer_network, catamaran_peerings=[{"provider": "cluster-2"}]),
        "h2": host("cluster-2", "/k2", provider_network),
    }


def test_the_model_makes_a_peerings_network_from_both_clusters():
    (flat,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    assert flat["network"] == {"mode": "flat"}
    fabric = {"mode": "fabric", "gateway_address": "192.0.2.10"}
    (through,) = federation_model(inventory({"mode": "fabric"}, fabric), ["h1", "h2"])["peerings"]["cluster-1"]
    assert through["network"] == {"mode": "fabric", "gateway_address": "192.0.2.10", "gateway_port": 51820}


def test_a_provider_behind_a_service_needs_no_address_and_passes_the_service_on():
    service = {"type": "NodePort", "node_port": 31000}
    provider = {"mode": "fabric", "gateway_service": service}
    (through,) = federation_model(inventory({"mode": "fabric"}, provider), ["h1", "h2"])["peerings"]["cluster-1"]
    assert through["network"] == {
        "mode": "fabric",
        "gateway_address": None,
        "gateway_port": 51820,
        "gateway_service": service,
    }


@pytest.mark.parametrize(
    ("consumer_network", "provider_network", "message"),
    [
        ({"mode": "fabric"}, None, "host h1 has catamaran_network.mode fabric but host h2 has flat"),
        (
            {"mode": "fabric"},
            {"mode": "fabric"},
            r"host h2 \(provider cluster-2\) .* sets neither catamaran_network.gateway_address nor",
        ),
        ({"mode": "mesh"}, None, r"host h1: catamaran_network.mode: 'mesh' is not one of fabric, flat"),
        (None, {"gateway_port": 70000}, r"host h2: catamaran_network.gateway_port: 70000 is not a UDP port"),
        (None, {"gateway": "x"}, r"host h2: catamaran_network: unknown keys \['gateway'\]"),
        (
            None,
            {"gateway_service": {"type": "ClusterIP"}},
            r"host h2: catamaran_network.gateway_service.type: 'ClusterIP' is not one of NodePort, LoadBalancer",
        ),
        (
            None,
            {"gateway_service": {"type": "NodePort", "node_port": 70000}},
            r"host h2: catamaran_network.gateway_service.node_port: 70000 is not a port \(1-65535\)",
        ),
        (
            None,
            {"gateway_service": {"type": "NodePort", "nodeport": 31000}},
            r"host h2: catamaran_network.gateway_service: unknown keys \['nodeport'\]",
        ),
    ],
)
def test_the_model_refuses_a_network_the_two_clusters_cannot_share(consumer_network, provider_network, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(consumer_network, provider_network), ["h1", "h2"])


def test_a_provider_cordons_one_of_its_tenants_and_only_that_peering_carries_it():
    model = inventory()
    model["h2"]["catamaran_cordoned_tenants"] = {"cluster-1": {"state": "drained", "reason": "maintenance"}}
    (peering,) = federation_model(model, ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering["cordon"] == {"state": "drained", "reason": "maintenance"}
    model["h2"]["catamaran_cordoned_tenants"] = {"cluster-9": {}}
    (peering,) = federation_model(model, ["h1", "h2"])["peerings"]["cluster-1"]
    assert "cordon" not in peering


@pytest.mark.parametrize(
    ("cordoned", "message"),
    [
        ({"cluster-1": {"state": "paused"}}, r"catamaran_cordoned_tenants.cluster-1.state: 'paused' is not one of"),
        ({"cluster-1": {"why": "x"}}, r"catamaran_cordoned_tenants.cluster-1: unknown keys \['why'\]"),
        (["cluster-1"], r"catamaran_cordoned_tenants must be a mapping of consumer cluster ids"),
        ({"cluster-1": {"reason": "x" * 257}}, r"catamaran_cordoned_tenants.cluster-1.reason: at most 256 characters"),
    ],
)
def test_a_wrong_cordon_is_refused_naming_it(cordoned, message):
    model = inventory()
    model["h2"]["catamaran_cordoned_tenants"] = cordoned
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(model, ["h1", "h2"])
