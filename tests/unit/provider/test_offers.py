"""The provider's ResourceOffer (provider/offers.py): what it counts, its placement, the tenant's default terms."""

from __future__ import annotations

from catamaran import quantities
from catamaran.constants import DEFAULT_POD_SECURITY_LEVEL, DEFAULT_SHARING_PERCENTAGE
from catamaran.provider.offers import NodeSummary, Placement, PodSummary, TenantTerms, offer_status
from tests.unit.provider.placements import placement


def summary(node, tenant=None, cpu="1"):
    return PodSummary(node=node, tenant=tenant, requests={"cpu": quantities.parse(cpu)})


def test_offer_ignores_the_tenants_own_pods_and_unschedulable_nodes():
    nodes = {
        (None, "a"): NodeSummary(True, {"cpu": "4", "pods": "10"}, ("10.1.1.0/24",), frozenset()),
        (None, "b"): NodeSummary(False, {"cpu": "100"}, ("10.1.2.0/24",), frozenset()),
    }
    pods = {
        ("x", "mine"): summary("a", tenant="consumer", cpu="2"),
        ("x", "other"): summary("a", tenant=None, cpu="1"),
        ("x", "elsewhere"): summary("b", tenant=None, cpu="50"),
    }
    status = offer_status(nodes, pods, "consumer")
    assert status["free"] == {"cpu": "3", "pods": "10"}
    assert status["nodes"] == 1
    assert status["podCIDRs"] == ["10.1.0.0/22"]


def test_pressure_is_reported_only_when_every_node_has_it():
    nodes = {
        (None, "a"): NodeSummary(True, {"cpu": "1"}, (), frozenset({"MemoryPressure", "DiskPressure"})),
        (None, "b"): NodeSummary(True, {"cpu": "1"}, (), frozenset({"MemoryPressure"})),
    }
    assert offer_status(nodes, {}, "t")["pressure"] == ["MemoryPressure"]


REAL = (("catamaran.io/lab-node-kind", "real"),)
REAL_TAINT = ("catamaran.io/lab-node-kind", "real", "NoSchedule")


def test_placement_admits_nodes_it_selects_and_whose_taints_it_tolerates():
    tainted_real = NodeSummary(True, {"cpu": "2"}, (), frozenset(), REAL, (REAL_TAINT,))
    plain = NodeSummary(True, {"cpu": "8"}, (), frozenset(), (("other", "x"),), ())
    real_only = placement({"catamaran.io/lab-node-kind": "real"})
    assert not real_only.admits(tainted_real), "the taint is not tolerated"
    assert not real_only.admits(plain)
    exact = {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    assert placement({"catamaran.io/lab-node-kind": "real"}, [exact]).admits(tainted_real)
    assert placement(tolerations=[{"operator": "Exists"}]).admits(tainted_real)
    assert not placement(tolerations=[{**exact, "effect": "NoExecute"}]).admits(tainted_real)
    assert Placement().admits(plain)
    assert not Placement().admits(tainted_real), "an empty placement keeps off tainted nodes, as before"


def test_offer_counts_only_the_nodes_the_placement_admits():
    nodes = {
        (None, "real"): NodeSummary(True, {"cpu": "2", "pods": "110"}, ("10.1.255.0/24",), frozenset(), REAL),
        (None, "fake"): NodeSummary(True, {"cpu": "8", "pods": "110"}, ("10.1.1.0/24",), frozenset(), ()),
    }
    status = offer_status(nodes, {}, "t", placement({"catamaran.io/lab-node-kind": "real"}))
    assert status["free"]["cpu"] == "2"
    assert status["nodes"] == 1
    assert offer_status(nodes, {}, "t")["free"]["cpu"] == "10"


def test_terms_default_to_restricted_and_the_default_share():
    terms = TenantTerms.from_offer_spec({"clusterID": "p"})
    assert (terms.pod_security, terms.sharing_percentage) == (DEFAULT_POD_SECURITY_LEVEL, DEFAULT_SHARING_PERCENTAGE)
    assert terms == TenantTerms()
    given = TenantTerms.from_offer_spec(
        {"podSecurity": "privileged", "sharingPercentage": 50, "nodeSelector": {"k": "v"}}
    )
    assert (given.pod_security, given.sharing_percentage, given.placement) == (
        "privileged",
        50,
        Placement(node_selector=(("k", "v"),)),
    )
