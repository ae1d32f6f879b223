"""What the fabric reads of the peerings (fabric/peerings.py)."""

from __future__ import annotations

from catamaran.fabric.peerings import consumer_behind, provider_behind
from catamaran.fabric.routeagent import wanted
from tests.unit.fabric.fabric_objects import GATEWAY, foreign, offer


def test_nothing_without_a_range():
    assert wanted([provider_behind(foreign("cluster-2", "Fabric", []))], GATEWAY, "node-b")[:2] == ([], None)


def test_an_offer_outside_a_tenant_namespace_is_no_tenants():
    assert consumer_behind(offer("default", "Fabric", ["10.9.0.0/16"])) is None
