"""Which Service names an out-of-cluster manager's pod counters API to the API server (provider/counters.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from catamaran.constants import ENDPOINT_SLICE_MANAGED_BY_LABEL, ENDPOINT_SLICE_SERVICE_LABEL
from catamaran.provider.counters import CounterOptions, external_service


def options(external_name: str) -> CounterOptions:
    return CounterOptions(
        port=26017,
        cert_dir=Path("/unused"),
        hosts=[],
        service_namespace="catamaran-system",
        service_name="catamaran-pod-counters",
        service_port=443,
        external_name=external_name,
    )


def test_an_address_becomes_the_endpoint_of_a_service_without_selector():
    service, endpoints = external_service(options("172.31.40.165"))
    # Resolved by ClusterIP, or by endpoints (an API server with aggregator routing refuses ExternalName).
    assert service["spec"]["type"] == "ClusterIP"
    assert "selector" not in service["spec"]
    assert endpoints["metadata"]["labels"][ENDPOINT_SLICE_SERVICE_LABEL] == service["metadata"]["name"]
    # The API server's EndpointSlice controller must leave it alone.
    assert endpoints["metadata"]["labels"][ENDPOINT_SLICE_MANAGED_BY_LABEL] != "endpointslice-controller.k8s.io"
    assert endpoints["addressType"] == "IPv4"
    assert endpoints["endpoints"][0]["addresses"] == ["172.31.40.165"]
    # The endpoint resolver matches the slice's port to the Service's by name.
    assert endpoints["ports"][0]["name"] == service["spec"]["ports"][0]["name"]
    assert endpoints["ports"][0]["port"] == 26017  # where the manager listens, not the Service's port
    assert service["spec"]["ports"][0]["port"] == 443


def test_an_ipv6_address_gets_an_ipv6_slice():
    _, endpoints = external_service(options("fd00::5"))
    assert endpoints["addressType"] == "IPv6"


@pytest.mark.parametrize("name", ["127.0.0.1", "::1", "0.0.0.0", "169.254.1.1", "fe80::1", "manager.example.com"])
def test_a_host_name_or_an_address_no_endpoint_may_hold_stays_an_external_name(name):
    # No endpoint may hold a loopback, unspecified, link-local or multicast address; a name can only be an ExternalName.
    (service,) = external_service(options(name))
    assert service["spec"] == {"type": "ExternalName", "externalName": name, "ports": [{"port": 443}]}
