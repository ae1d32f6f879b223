"""The rules and routes a gateway's and a node's host hold (fabric/plan.py)."""

from __future__ import annotations

import pytest

from catamaran.fabric.plan import (
    CHAIN,
    INTERFACE_NAME_MAX,
    NODE_CHAIN,
    Tunnel,
    check_remap,
    interface_name,
    iptables_restore,
    node_ranges,
    node_rules,
    routes,
    wg_set_arguments,
)
from tests.unit.fabric.wireguard_keys import PEER, PRIVATE


def test_ranges_are_normalised_deduplicated_and_ipv4_only():
    assert node_ranges(["10.1.2.3/16", "10.1.0.0/16", "fd00::/64", "10.0.0.0/24"]) == ["10.0.0.0/24", "10.1.0.0/16"]


def test_the_nodes_chain_is_written_whole():
    assert node_rules(["10.1.0.0/16"]) == (
        f"*nat\n:{NODE_CHAIN} - [0:0]\n-A {NODE_CHAIN} -d 10.1.0.0/16 -j ACCEPT\nCOMMIT\n"
    )
    assert node_rules([]) == f"*nat\n:{NODE_CHAIN} - [0:0]\nCOMMIT\n"


def consumer_tunnel() -> Tunnel:
    return Tunnel(
        peering="cluster-2",
        interface=interface_name("cmgw", "to-cluster-2"),
        private_key=PRIVATE,
        peer_public_key=PEER,
        remote_cidrs=("10.102.0.0/16",),
        peer_endpoint="172.30.4.2:51820",
    )


def provider_tunnel(pods=("10.102.255.7", "10.102.255.3")) -> Tunnel:
    return Tunnel(
        peering="cluster-1",
        interface=interface_name("cmgw", "from-cluster-1"),
        private_key=PRIVATE,
        peer_public_key=PEER,
        remote_cidrs=("10.101.0.0/16",),
        listen_port=51821,
        allowed_destinations=pods,
    )


def test_interface_names_fit_the_kernel_and_differ_per_peering_and_prefix():
    names = {interface_name(prefix, peering) for prefix in ("cmgw", "cm1a2b3cw") for peering in ("to-a", "from-a")}
    assert len(names) == 4
    assert all(len(name) == INTERFACE_NAME_MAX for name in names)
    assert interface_name("cmgw", "to-a") == interface_name("cmgw", "to-a")
    with pytest.raises(ValueError, match="fewer than 4 characters"):
        interface_name("x" * 12, "to-a")


def test_the_private_key_never_reaches_the_command_line():
    arguments = wg_set_arguments(consumer_tunnel())
    assert PRIVATE not in " ".join(arguments)
    assert arguments[1:3] == ["private-key", "/dev/stdin"]
    assert "endpoint" in arguments
    assert "listen-port" not in arguments
    provider = wg_set_arguments(provider_tunnel())
    assert provider[provider.index("listen-port") + 1] == "51821"
    assert "endpoint" not in provider  # learnt from the consumer's handshake


def test_remote_ranges_are_routed_into_their_tunnel():
    consumer, provider = consumer_tunnel(), provider_tunnel()
    assert routes([consumer, provider]) == {
        "10.102.0.0/16": consumer.interface,
        "10.101.0.0/16": provider.interface,
    }


def test_a_tenant_tunnel_opens_connections_only_to_the_tenants_pods():
    tunnel = provider_tunnel()
    rules = iptables_restore([tunnel]).splitlines()
    forward = [line for line in rules if line.startswith(f"-A {CHAIN} ")]
    assert forward == [
        f"-A {CHAIN} -i {tunnel.interface} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
        f"-A {CHAIN} -i {tunnel.interface} -d 10.102.255.3/32 -j ACCEPT",
        f"-A {CHAIN} -i {tunnel.interface} -d 10.102.255.7/32 -j ACCEPT",
        f"-A {CHAIN} -i {tunnel.interface} -j DROP",
    ]
    assert f"-A {CHAIN}-INPUT -i {tunnel.interface} -j DROP" in rules
    # A tenant with no pod here reaches nothing.
    empty = iptables_restore([provider_tunnel(pods=())])
    assert f"-A {CHAIN} -i {tunnel.interface} -j DROP" in empty
    assert "-d " not in empty


def test_traffic_through_any_tunnel_keeps_its_pod_address_and_a_clamped_mss():
    consumer = consumer_tunnel()
    rules = iptables_restore([consumer])
    assert f"-A {CHAIN}-POSTROUTING -o {consumer.interface} -j ACCEPT" in rules
    clamp = "-p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu"
    assert f"-A {CHAIN}-MSS -i {consumer.interface} {clamp}" in rules
    assert f"-A {CHAIN}-MSS -o {consumer.interface} {clamp}" in rules
    assert f"-A {CHAIN} " not in rules  # the consumer's side opens its pods to the provider's replies and calls


def test_no_tunnel_leaves_every_chain_declared_and_empty():
    rules = iptables_restore([])
    for table in ("*nat", "*mangle"):
        assert table in rules
    assert "*filter" not in rules  # the tunnels' filtering is in mangle, ahead of any NetworkPolicy engine's
    assert rules.count("COMMIT") == 2
    assert rules.count(":CATAMARAN-FABRIC") == 5
    assert "-A " not in rules


def test_overlapping_ranges_are_remapped_both_ways_at_this_sides_gateway():
    tunnel = Tunnel(
        peering="cluster-2",
        interface="cmgwremap",
        private_key=PRIVATE,
        peer_public_key=PEER,
        remote_cidrs=("100.64.0.0/16",),  # the provider's 10.100.0.0/16, as seen here
        peer_endpoint="172.30.4.2:51820",
        remapped=(("10.100.0.0/16", "100.65.0.0/16"),),  # this side's pods as the provider sees them
    )
    rules = iptables_restore([tunnel]).splitlines()
    post = [line for line in rules if line.startswith(f"-A {CHAIN}-POSTROUTING")]
    assert post == [
        f"-A {CHAIN}-POSTROUTING -o cmgwremap -s 10.100.0.0/16 -j NETMAP --to 100.65.0.0/16",
        f"-A {CHAIN}-POSTROUTING -o cmgwremap -j ACCEPT",
    ]
    assert f"-A {CHAIN}-PREROUTING -i cmgwremap -d 100.65.0.0/16 -j NETMAP --to 10.100.0.0/16" in rules
    assert routes([tunnel]) == {"100.64.0.0/16": "cmgwremap"}
    check_remap("10.100.0.0/16", "100.65.0.0/16")
    with pytest.raises(ValueError, match="same family and prefix"):
        check_remap("10.100.0.0/16", "100.65.0.0/24")
