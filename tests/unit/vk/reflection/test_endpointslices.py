"""Reflected EndpointSlices (vk/reflection/endpointslices.py)."""

from __future__ import annotations

from catamaran.networks import remapper
from catamaran.vk.reflection.endpointslices import EndpointSlices
from catamaran.vk.reflection.kind import Context
from catamaran.vk.reflection.policy import ReflectionSettings
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_endpoints_already_on_this_provider_are_left_to_it():
    local = {
        "metadata": meta("web-abc", labels={"kubernetes.io/service-name": "web"}),
        "addressType": "IPv4",
        "ports": [{"port": 8080, "protocol": "TCP", "name": ""}],
        "endpoints": [
            {"addresses": ["10.1.0.5"], "conditions": {"ready": True}, "nodeName": "node-1", "targetRef": {}},
            {"addresses": ["10.200.0.7"], "conditions": {"ready": False}, "nodeName": "catamaran-p"},
            {"addresses": ["10.201.0.9"], "conditions": {"ready": True}, "nodeName": "catamaran-q"},
        ],
    }
    translated = Context(
        settings=ReflectionSettings(), own_nodes=frozenset({"catamaran-p"}), translate=lambda ip: f"x{ip}"
    )
    content = EndpointSlices().content(local, translated, local=True)
    assert content["endpoints"] == [
        {"addresses": ["x10.1.0.5"], "conditions": {"ready": True}},
        {"addresses": ["x10.201.0.9"], "conditions": {"ready": True}},
    ]
    assert content["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "reflection.catamaran.io"
    assert EndpointSlices().skipped({"metadata": meta("x")}, CONTEXT)  # no Service: nothing to reflect it for


def test_endpoint_addresses_outside_the_providers_ranges_are_left_out():
    local = {
        "metadata": meta("web-abc", labels={"kubernetes.io/service-name": "web"}),
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.101.0.9"], "conditions": {"ready": True}},
            {"addresses": ["172.31.40.165"], "conditions": {"ready": True}},
        ],
    }
    ranged = Context(
        settings=ReflectionSettings(), own_nodes=frozenset({"catamaran-p"}), endpoint_ranges=("10.101.0.0/16",)
    )
    endpoints = EndpointSlices().content(local, ranged, local=True)["endpoints"]
    assert [e["addresses"] for e in endpoints] == [["10.101.0.9"]]
    assert len(EndpointSlices().content(local, CONTEXT, local=True)["endpoints"]) == 2  # no ranges published


def test_reflected_endpoints_follow_the_tunnel_and_the_remapped_addresses():
    local = {
        "metadata": meta("web-abc", labels={"kubernetes.io/service-name": "web"}),
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.100.255.9"], "conditions": {"ready": True, "serving": True}}],
    }
    remapped = Context(
        settings=ReflectionSettings(),
        own_nodes=frozenset({"catamaran-p"}),
        translate=remapper([("10.100.0.0/16", "100.64.0.0/16")]),
        endpoint_ranges=("100.64.0.0/16",),
    )
    (endpoint,) = EndpointSlices().content(local, remapped, local=True)["endpoints"]
    assert endpoint == {"addresses": ["100.64.255.9"], "conditions": {"ready": True, "serving": True}}
    down = Context(settings=ReflectionSettings(), own_nodes=frozenset({"catamaran-p"}), network_down=True)
    (endpoint,) = EndpointSlices().content(local, down, local=True)["endpoints"]
    assert endpoint["conditions"] == {"ready": False, "serving": False}
