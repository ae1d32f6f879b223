"""The provider's pod counters (provider/counters.py): a kubelet's counters read per pod, the tenant a credential
names, and which Service names an out-of-cluster manager's counters API to the API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from catamaran.constants import ENDPOINT_SLICE_MANAGED_BY_LABEL, ENDPOINT_SLICE_SERVICE_LABEL
from catamaran.provider.counters import CounterOptions, container_counters, external_service, tenant_of


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


KUBELET_RESOURCE_METRICS = """# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="main",namespace="shop-c1",pod="idle"} 0.020260384 1795592061692
container_cpu_usage_seconds_total{container="main",namespace="other",pod="x"} 7.5 1795592061692
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="main",namespace="shop-c1",pod="idle"} 1.949696e+06 1795592061692
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="main",namespace="shop-c1",pod="idle"} 1.7955920559007473e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 25955.8511718 1795592023121
"""


def test_a_kubelets_counters_are_read_per_pod_with_their_sample_time():
    pods = container_counters(KUBELET_RESOURCE_METRICS)
    assert pods[("shop-c1", "idle")] == [
        {
            "name": "main",
            "cpuSeconds": 0.020260384,
            "sampledAt": 1795592061.692,
            "memoryWorkingSetBytes": 1949696.0,
            "startTime": 1795592055.9007473,
        }
    ]
    assert pods[("other", "x")][0]["cpuSeconds"] == 7.5


@pytest.mark.parametrize(
    ("user", "tenant"),
    [
        ("system:serviceaccount:catamaran-tenant-cluster-1:catamaran-consumer", "cluster-1"),
        ("system:serviceaccount:kube-system:default", None),
        ("system:serviceaccount:catamaran-tenant-cluster-1", None),
        ("admin", None),
    ],
)
def test_only_a_tenant_credential_names_a_tenant(user, tenant):
    assert tenant_of(user) == tenant
