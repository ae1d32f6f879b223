"""The fabric's pure parts: WireGuard keys, interface names, and the rules and routes a gateway's host holds."""

from __future__ import annotations

import base64

import pytest

from catamaran.fabric import keys
from catamaran.fabric.plan import (
    CHAIN,
    INTERFACE_NAME_MAX,
    Tunnel,
    check_remap,
    interface_name,
    iptables_restore,
    routes,
    wg_set_arguments,
)
from catamaran.networks import free_range, seen_as

PRIVATE = keys.generate_private_key()
PEER = keys.public_key(keys.generate_private_key())


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


def test_keys_are_wireguard_keys_and_bad_ones_are_named_without_their_value():
    assert len(base64.b64decode(PRIVATE)) == 32
    assert keys.public_key(PRIVATE) == keys.public_key(PRIVATE) != PRIVATE
    assert keys.check_public_key(PEER) == PEER
    with pytest.raises(ValueError, match="not base64") as bad:
        keys.public_key("secret!!")
    assert "secret" not in str(bad.value)
    with pytest.raises(ValueError, match="holds 3 bytes, not 32"):
        keys.check_public_key(base64.b64encode(b"abc").decode())


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
    for table in ("*filter", "*nat", "*mangle"):
        assert table in rules
    assert rules.count("COMMIT") == 3
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


def test_a_range_is_remapped_only_when_it_overlaps_and_keeps_its_mapping():
    assert seen_as(["10.101.0.0/16"], taken=["10.102.0.0/16"]) == [("10.101.0.0/16", "10.101.0.0/16")]
    first = seen_as(["10.100.0.0/16"], taken=["10.100.0.0/16"])
    assert first == [("10.100.0.0/16", "100.64.0.0/16")]
    # Another peer already holds the first free range: the next one.
    assert seen_as(["10.100.0.0/16"], taken=["10.100.0.0/16", "100.64.0.0/16"])[0][1] == "100.65.0.0/16"
    # An earlier mapping still free is kept, even if a lower range has come free since.
    kept = [("10.100.0.0/16", "100.70.0.0/16")]
    assert seen_as(["10.100.0.0/16"], taken=["10.100.0.0/16"], kept=kept) == kept
    assert free_range("10.0.0.0/8", taken=[]) is None  # larger than the pool
    with pytest.raises(ValueError, match=r"no range of 100\.64\.0\.0/10 left to remap 10\.0\.0\.0/10"):
        seen_as(["10.0.0.0/10"], taken=["10.0.0.0/10", "100.64.0.0/10"])
