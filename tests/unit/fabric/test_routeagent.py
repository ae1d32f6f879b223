"""The route agent's decisions: which ranges a node sends to the gateway's node, and the rules it holds. Pure."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest
from lightkube.models.core_v1 import HostIP, PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from catamaran.__main__ import _labels
from catamaran.fabric import dataplane
from catamaran.fabric.peerings import consumer_behind, provider_behind
from catamaran.fabric.plan import NODE_CHAIN, ROUTE_METRIC, ROUTE_PROTOCOL, node_ranges, node_rules
from catamaran.fabric.routeagent import _gateway_placement, wanted


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
BEHIND = [provider_behind(f) for f in FOREIGNS] + [consumer_behind(o) for o in OFFERS]
GATEWAY = [("node-a", "172.30.0.1")]


def test_another_node_routes_every_fabric_peerings_ranges_to_the_gateways_node():
    ranges, address, doing = wanted(BEHIND, GATEWAY, "node-b")
    # A Flat peering's ranges are the clusters' own routing, not the gateway's.
    assert ranges == ["10.104.0.0/16", "100.64.0.0/16", "100.65.0.0/16"]
    assert address == "172.30.0.1"
    assert "node-a" in doing


def test_the_gateways_own_node_holds_nothing():
    ranges, address, doing = wanted(BEHIND, GATEWAY, "node-a")
    assert (ranges, address) == ([], None)
    assert "routes the ranges itself" in doing


def test_without_a_placed_gateway_the_ranges_are_held_unreachable():
    ranges, address, doing = wanted(BEHIND, [None], "node-b")
    assert (ranges, address) == (["10.104.0.0/16", "100.64.0.0/16", "100.65.0.0/16"], None)
    assert "unreachable" in doing


def test_nothing_without_a_range():
    assert wanted([provider_behind(foreign("cluster-2", "Fabric", []))], GATEWAY, "node-b")[:2] == ([], None)


def test_two_gateway_pods_give_every_node_the_same_choice():
    placed = [("node-z", "172.30.0.9"), ("node-a", "172.30.0.1")]
    assert wanted(BEHIND, placed, "node-b")[1] == wanted(BEHIND, list(reversed(placed)), "node-c")[1] == "172.30.0.1"


def test_an_offer_outside_a_tenant_namespace_is_no_tenants():
    assert consumer_behind(offer("default", "Fabric", ["10.9.0.0/16"])) is None


def test_a_gateway_pod_counts_once_placed_by_its_nodes_ipv4_address():
    def pod(node=None, host_ips=(), phase="Running", deleting=False):
        return Pod(
            metadata=ObjectMeta(name="gw", deletionTimestamp="2026-11-27T00:00:00Z" if deleting else None),
            spec=PodSpec(containers=[], nodeName=node),
            status=PodStatus(phase=phase, hostIP=host_ips[0] if host_ips else None,
                             hostIPs=[HostIP(ip=ip) for ip in host_ips]),
        )  # fmt: skip

    assert _gateway_placement(pod("node-a", ("fd00::1", "172.30.0.1"))) == ("node-a", "172.30.0.1")
    assert _gateway_placement(pod()) is None  # pending, on no node yet
    assert _gateway_placement(pod("node-a", ("fd00::1",))) is None
    assert _gateway_placement(pod("node-a", ("172.30.0.1",), deleting=True)) is None
    assert _gateway_placement(pod("node-a", ("172.30.0.1",), phase="Failed")) is None


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


def test_node_routing_keeps_its_current_routes_and_removes_only_its_stale_ones(monkeypatch):
    """The commands NodeRouting.apply issues against what `ip` shows (a fake `run`: the host side is the lab's)."""
    shown = {
        ("ip", "-j", "route", "get", "172.31.0.2"): [
            {"dst": "172.31.0.2", "gateway": "172.30.0.1", "dev": "underlay0"}
        ],
        ("ip", "-j", "route", "show", "proto", str(ROUTE_PROTOCOL)): [
            {"dst": "10.9.0.5", "gateway": "172.30.0.1", "dev": "underlay0"},  # a /32, shown without its length
            {"dst": "10.2.0.0/16", "type": "unreachable"},  # a range no peering announces any more
        ],
    }
    issued = []

    async def run(*command, stdin=None, check=True):
        issued.append(command)
        return json.dumps(shown.get(command, []))

    async def succeeds(*command):
        return True

    monkeypatch.setattr(dataplane, "run", run)
    monkeypatch.setattr(dataplane, "succeeds", succeeds)
    asyncio.run(dataplane.NodeRouting().apply(["10.1.0.0/16", "10.9.0.5/32"], "172.31.0.2"))
    own = ("proto", str(ROUTE_PROTOCOL), "metric", str(ROUTE_METRIC))
    changes = [c for c in issued if c[:3] in (("ip", "route", "delete"), ("ip", "route", "replace"))]
    assert changes == [
        ("ip", "route", "delete", "10.2.0.0/16", *own),
        ("ip", "route", "replace", "10.1.0.0/16", "via", "172.30.0.1", "dev", "underlay0", *own),
        ("ip", "route", "replace", "10.9.0.5/32", "via", "172.30.0.1", "dev", "underlay0", *own),
    ]
    issued.clear()
    asyncio.run(dataplane.NodeRouting().apply(["10.1.0.0/16"], None))  # the gateway's pod between nodes
    assert ("ip", "route", "replace", "unreachable", "10.1.0.0/16", *own) in issued
