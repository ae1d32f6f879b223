"""Reflected Services (vk/reflection/services.py)."""

from __future__ import annotations

from catamaran.vk.reflection.kind import Context
from catamaran.vk.reflection.policy import ReflectionSettings
from catamaran.vk.reflection.services import Services, keep_allocations
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_services_leave_allocation_to_the_provider_and_headless_stays_headless():
    local = {
        "metadata": meta(),
        "spec": {
            "type": "NodePort",
            "clusterIP": "10.96.0.10",
            "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
            "selector": {"app": "web"},
            "sessionAffinity": "None",
            "externalTrafficPolicy": "Cluster",
        },
    }
    nodeports = Context(
        settings=ReflectionSettings(), own_nodes=frozenset({"catamaran-p"}), service_types=("ClusterIP", "NodePort")
    )
    spec = Services().content(local, nodeports, local=True)["spec"]
    assert spec["type"] == "NodePort"
    assert "clusterIP" not in spec
    assert "clusterIPs" not in spec
    assert spec["ports"] == [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]
    headless = {"metadata": meta(), "spec": {"clusterIP": "None", "selector": {"app": "web"}}}
    assert Services().content(headless, CONTEXT, local=True)["spec"]["clusterIP"] == "None"
    assert Services().skipped({"metadata": meta("kubernetes", "default")}, CONTEXT)
    current = {"spec": {"clusterIP": "10.0.0.7", "type": "NodePort", "ports": [{"port": 80, "nodePort": 31000}]}}
    body = keep_allocations({"metadata": {}, "spec": dict(spec)}, current)
    assert body["spec"]["clusterIP"] == "10.0.0.7"
    assert body["spec"]["ports"][0]["nodePort"] == 31000


def test_a_service_type_the_provider_refuses_is_reflected_as_cluster_ip_and_said_so():
    local = {
        "metadata": meta(),
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
            "selector": {"app": "web"},
            "externalTrafficPolicy": "Local",
            "loadBalancerClass": "example.com/vip",
            "externalIPs": ["203.0.113.10"],
        },
    }
    spec = Services().content(local, CONTEXT, local=True)["spec"]
    assert spec["type"] == "ClusterIP"
    assert not {"externalTrafficPolicy", "loadBalancerClass", "externalIPs"} & set(spec)
    (warning,) = Services().adjustments(local, CONTEXT)
    assert "type LoadBalancer is not allowed by the provider's terms (allowed: ClusterIP)" in warning
    allowed = Context(
        settings=ReflectionSettings(), own_nodes=frozenset({"catamaran-p"}), service_types=("ClusterIP", "LoadBalancer")
    )
    assert Services().content(local, allowed, local=True)["spec"]["loadBalancerClass"] == "example.com/vip"
    assert "externalIPs" not in Services().content(local, allowed, local=True)["spec"]  # never, whatever the terms
    assert Services().adjustments(local, allowed) == []
