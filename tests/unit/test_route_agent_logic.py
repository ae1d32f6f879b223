"""The route agent's decisions: which ranges a node sends to the gateway's node, and the rules it holds. Pure."""

from __future__ import annotations

import argparse

import pytest

from catamaran.__main__ import _labels
from catamaran.fabric.plan import NODE_CHAIN, node_ranges, node_rules
from catamaran.fabric.routeagent import wanted


def foreign(provider: str, mode: str, remote: list[str]) -> dict:
    return {
        "spec": {"clusterID": provider, "networking": {"mode": mode}},
        "status": {"network": {"remotePodCIDRs": remote}},
    }


def offer(namespace: str, mode: str, consumer_ranges: list[str]) -> dict:
    return {
        "metadata": {"namespace": namespace, "name": "catamaran"},
        "spec": {"network": {"mode": mode}, "consumerPodCIDRs": consumer_ranges},
    }


FOREIGNS = [foreign("cluster-2", "Fabric", ["100.64.0.0/16"]), foreign("cluster-3", "Flat", ["10.103.0.0/16"])]
OFFERS = [offer("catamaran-tenant-cluster-4", "Fabric", ["10.104.0.0/16", "100.65.0.0/16"])]
GATEWAY = [("node-a", "172.30.0.1")]


def test_another_node_routes_every_fabric_peerings_ranges_to_the_gateways_node():
    ranges, address, idle = wanted(FOREIGNS, OFFERS, GATEWAY, "node-b")
    # A Flat peering's ranges are the clusters' own routing, not the gateway's.
    assert ranges == ["10.104.0.0/16", "100.64.0.0/16", "100.65.0.0/16"]
    assert (address, idle) == ("172.30.0.1", None)


def test_the_gateways_own_node_holds_nothing():
    assert wanted(FOREIGNS, OFFERS, GATEWAY, "node-a") == ([], None, "the gateway runs on this node and routes its "
                                                                     "ranges itself")  # fmt: skip


def test_nothing_without_a_placed_gateway_or_a_range():
    ranges, address, idle = wanted(FOREIGNS, OFFERS, [None, ("node-a", None)], "node-b")
    assert (ranges, address) == ([], None)
    assert "not placed" in idle
    ranges, address, idle = wanted([foreign("cluster-2", "Fabric", [])], [], GATEWAY, "node-b")
    assert (ranges, address) == ([], None)
    assert "announces" in idle


def test_an_offer_outside_a_tenant_namespace_is_no_tenants():
    ranges, _, _ = wanted([], [offer("default", "Fabric", ["10.9.0.0/16"])], GATEWAY, "node-b")
    assert ranges == []


def test_ranges_are_normalised_deduplicated_and_ipv4_only():
    assert node_ranges(["10.1.2.3/16", "10.1.0.0/16", "fd00::/64", "10.0.0.0/24"]) == ["10.0.0.0/24", "10.1.0.0/16"]


def test_the_nodes_chain_is_written_whole():
    assert node_rules(["10.1.0.0/16"]) == (
        f"*nat\n:{NODE_CHAIN} - [0:0]\n-A {NODE_CHAIN} -d 10.1.0.0/16 -j ACCEPT\nCOMMIT\n"
    )
    assert node_rules([]) == f"*nat\n:{NODE_CHAIN} - [0:0]\nCOMMIT\n"


def test_gateway_selector_parses_labels_and_refuses_what_is_not_one():
    assert _labels("app.kubernetes.io/name=catamaran,app.kubernetes.io/component=gateway") == {
        "app.kubernetes.io/name": "catamaran",
        "app.kubernetes.io/component": "gateway",
    }
    for bad in ("", "name", "=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _labels(bad)
