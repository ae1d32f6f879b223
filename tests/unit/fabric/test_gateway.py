"""What the gateway builds from the peerings' objects: one peering's bad input leaves the others' tunnels alone,
and a tenant's tunnel opens only to that tenant's pods. Pure logic over the informer caches (nothing runs)."""

from __future__ import annotations

from catamaran.fabric import keys
from catamaran.fabric.dataplane import Dataplane
from catamaran.fabric.gateway import Gateway
from catamaran.fabric.plan import routes, wg_set_arguments

NS = "catamaran-system"
KEYS = "catamaran-fabric"
PRIVATE = keys.generate_private_key()
PEER = keys.public_key(keys.generate_private_key())


def foreign(
    provider: str,
    public_key: str = PEER,
    remap: list | None = None,
    seen: str = "100.64.0.0/16",
    announced: list | None = None,
) -> dict:
    """A provider seen at `seen` (its remap range, so the consented view); `announced`: what the virtual kubelet
    wrote as its ranges (`seen` unless given)."""
    networking = {
        "mode": "Fabric",
        "gateway": {"endpoint": "192.0.2.1:51820", "publicKey": public_key},
        "podCIDRs": ["10.102.0.0/16"],
        "podCIDRRemap": seen,
    }
    if remap:
        networking["localPodCIDRRemap"] = remap
    return {
        "metadata": {"name": provider, "namespace": NS},
        "spec": {"clusterID": provider, "networking": networking},
        "status": {"network": {"remotePodCIDRs": [seen] if announced is None else announced}},
    }


def offer(consumer: str) -> dict:
    network = {"mode": "Fabric", "gateway": {"listenPort": 51820, "publicKey": PEER}}
    return {
        "metadata": {"name": "resources", "namespace": f"catamaran-tenant-{consumer}"},
        "spec": {"network": network, "consumerPodCIDRs": ["100.64.0.0/16"]},
    }


def gateway(**caches) -> Gateway:
    built = Gateway(client=None, dataplane=Dataplane("cmgw"))
    for name, entries in caches.items():
        for key, value in entries.items():
            getattr(built, name)._store(key, value)
    return built


def test_a_bad_peering_is_reported_and_leaves_the_others_alone():
    built = gateway(
        foreigns={
            (NS, "good"): foreign("good"),
            (NS, "bad-key"): foreign("bad-key", public_key="not-a-key"),
            (NS, "bad-remap"): foreign("bad-remap", remap=[{"podCIDR": "10.0.0.0/16", "seenAs": "100.64.0.0/24"}]),
            (NS, "no-key"): foreign("no-key"),
        },
        keys={(KEYS, f"catamaran-fabric-to-{p}"): PRIVATE for p in ("good", "bad-key", "bad-remap")},
    )
    assert [t.peering for t in built.consumer_tunnels()] == ["good"]
    assert "not base64" in built.problems["bad-key"]
    assert "same family and prefix" in built.problems["bad-remap"]
    assert built.problems["no-key"] == f"Secret {KEYS}/catamaran-fabric-to-no-key (this side's key) is missing"


def test_a_tenants_tunnel_opens_only_to_its_own_pods():
    built = gateway(
        offers={("catamaran-tenant-c1", "resources"): offer("c1"), ("catamaran-tenant-c2", "resources"): offer("c2")},
        keys={(KEYS, "catamaran-fabric-from-c1"): PRIVATE, (KEYS, "catamaran-fabric-from-c2"): PRIVATE},
        pods={
            ("twin-c1", "a"): ("c1", "10.102.255.3"),
            ("twin-c2", "b"): ("c2", "10.102.255.4"),
            ("twin-c1", "pending"): ("c1", None),
        },
    )
    tunnels = {t.peering: t for t in built.provider_tunnels()}
    assert tunnels["c1"].allowed_destinations == ("10.102.255.3",)
    assert tunnels["c2"].allowed_destinations == ("10.102.255.4",)
    assert tunnels["c1"].interface != tunnels["c2"].interface
    assert tunnels["c1"].listen_port == 51820


def test_a_providers_tunnel_opens_only_to_the_namespaces_extended_to_it_and_the_providers_relayed_to():
    built = gateway(
        foreigns={(NS, "p1"): foreign("p1"), (NS, "p2"): foreign("p2", seen="100.65.0.0/16")},
        keys={(KEYS, f"catamaran-fabric-to-{p}"): PRIVATE for p in ("p1", "p2")},
        offloadings={("shop", "offloading"): frozenset({"p1", "p2"}), ("billing", "offloading"): frozenset({"p2"})},
        pods={
            ("shop", "web"): (None, "10.101.0.5"),
            ("shop", "cart"): (None, "100.65.0.7"),  # offloaded to p2: its IP as this cluster shows it
            ("billing", "ledger"): (None, "10.101.0.6"),
            ("billing", "audit"): (None, "100.65.0.8"),  # offloaded to p2, in a namespace p1 does not share
            ("kube-system", "dns"): (None, "10.101.0.2"),
            ("shop", "starting"): (None, None),
        },
    )
    tunnels = {t.peering: t for t in built.consumer_tunnels()}
    # p1 reaches the shop's pods, here and (relayed by this consumer) on p2; never billing's, here or on p2 (not
    # shared with p1), nor kube-system's (shared with nobody), nor the rest of p2's range.
    assert tunnels["p1"].allowed_destinations == ("10.101.0.5", "100.65.0.7")
    assert tunnels["p2"].allowed_destinations == ("10.101.0.5", "10.101.0.6", "100.65.0.7", "100.65.0.8")


def test_only_consented_ranges_apart_from_other_providers_are_routed_and_allowed():
    """Issue 37: whatever the status says, a tunnel routes and accepts (allowed IPs) only its provider's consent,
    and never a part of another provider's."""
    plain = foreign("p1", seen="10.102.0.0/16", announced=["10.102.0.0/16", "8.8.8.0/24"])
    plain["spec"]["networking"].pop("podCIDRRemap")  # no overlap, no remap: its consented pod ranges are routed
    stealing = foreign("p2", seen="10.103.0.0/16", announced=["10.103.0.0/16", "10.102.5.0/24"])
    stealing["spec"]["networking"]["podCIDRs"] = ["10.102.5.0/24", "10.103.0.0/16"]  # even a consent can't take it
    stealing["spec"]["networking"].pop("podCIDRRemap")
    unconsented = foreign("p3", seen="10.104.0.0/16")
    for field in ("podCIDRs", "podCIDRRemap"):
        unconsented["spec"]["networking"].pop(field)  # a peering of an earlier release: as accepted, until it runs
    built = gateway(
        foreigns={(NS, "p1"): plain, (NS, "p2"): stealing, (NS, "p3"): unconsented},
        keys={(KEYS, f"catamaran-fabric-to-{p}"): PRIVATE for p in ("p1", "p2", "p3")},
    )
    tunnels = {t.peering: t for t in built.consumer_tunnels()}
    # Two consents that overlap (only a hand edit makes them: the peering remaps instead) leave the overlap to neither.
    assert (tunnels["p1"].remote_cidrs, tunnels["p2"].remote_cidrs, tunnels["p3"].remote_cidrs) == (
        (),
        ("10.103.0.0/16",),
        ("10.104.0.0/16",),
    )
    assert routes(list(tunnels.values())) == {
        "10.103.0.0/16": tunnels["p2"].interface,
        "10.104.0.0/16": tunnels["p3"].interface,
    }
    arguments = wg_set_arguments(tunnels["p2"])
    assert arguments[arguments.index("allowed-ips") + 1] == "10.103.0.0/16"
    assert built.unrouted["p1"] == (
        "10.102.0.0/16 (overlaps provider p2's range 10.102.5.0/24)",
        "8.8.8.0/24 (outside the consented ranges (10.102.0.0/16))",
    )
    assert built.unrouted["p2"] == ("10.102.5.0/24 (overlaps provider p1's range 10.102.0.0/16)",)
    assert "p3" not in built.unrouted


def test_a_pod_on_its_nodes_network_or_finished_is_never_a_destination():
    from types import SimpleNamespace

    from catamaran.fabric.gateway import _pod_address

    def pod(host_network: bool, labels: dict, phase: str = "Running") -> SimpleNamespace:
        return SimpleNamespace(
            metadata=SimpleNamespace(labels=labels),
            spec=SimpleNamespace(hostNetwork=host_network),
            status=SimpleNamespace(podIP="10.0.0.9", phase=phase),
        )

    tenant = {"catamaran.io/managed-by": "catamaran", "catamaran.io/origin-cluster-id": "c1"}
    assert _pod_address(pod(True, tenant)) == ("c1", None)
    assert _pod_address(pod(False, tenant)) == ("c1", "10.0.0.9")
    assert _pod_address(pod(False, tenant, phase="Succeeded")) == ("c1", None)  # its IP may be reused
    # The origin label alone, on a pod Catamaran did not make, ties it to no tenant.
    assert _pod_address(pod(False, {"catamaran.io/origin-cluster-id": "c1"})) == (None, "10.0.0.9")
