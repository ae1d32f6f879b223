"""The route agent's decisions (fabric/routeagent.py): which ranges a node sends to the gateway's node, only
what the gateway routes. Pure.
"""

from __future__ import annotations

from lightkube.models.core_v1 import HostIP, PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from catamaran.fabric.peerings import consumer_behind, provider_behind, routed_ranges
from catamaran.fabric.routeagent import _gateway_placement, wanted
from tests.unit.consent import CONSENT
from tests.unit.fabric.fabric_objects import GATEWAY, foreign, offer


def test_route_agents_route_only_what_the_gateway_routes():
    foreigns = [
        {
            "spec": {"clusterID": "p1", "networking": {"mode": "Fabric", "podCIDRs": CONSENT}},
            "status": {"network": {"remotePodCIDRs": ["10.102.0.0/16", "52.0.0.0/8"]}},
        },
        {
            "spec": {"clusterID": "p2", "networking": {"mode": "Fabric", "podCIDRs": ["10.103.0.0/16"]}},
            "status": {"network": {"remotePodCIDRs": ["10.103.0.0/16", "10.102.9.0/24"]}},
        },
    ]
    routed, refused = routed_ranges(provider_behind(f) for f in foreigns)
    assert routed == {"p1": ("10.102.0.0/16",), "p2": ("10.103.0.0/16",)}
    assert set(refused) == {"p1", "p2"}
    ranges, _, _ = wanted(list(routed.items()), [("node-a", "172.30.0.1")], "node-b")
    assert ranges == ["10.102.0.0/16", "10.103.0.0/16"]


FOREIGNS = [foreign("cluster-2", "Fabric", ["100.64.0.0/16"]), foreign("cluster-3", "Flat", ["10.103.0.0/16"])]
OFFERS = [offer("catamaran-tenant-cluster-4", "Fabric", ["10.104.0.0/16", "100.65.0.0/16"])]
BEHIND = [provider_behind(f) for f in FOREIGNS] + [consumer_behind(o) for o in OFFERS]


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


def test_two_gateway_pods_give_every_node_the_same_choice():
    placed = [("node-z", "172.30.0.9"), ("node-a", "172.30.0.1")]
    assert wanted(BEHIND, placed, "node-b")[1] == wanted(BEHIND, list(reversed(placed)), "node-c")[1] == "172.30.0.1"


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
