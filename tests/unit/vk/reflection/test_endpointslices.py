"""Resource reflection: what each kind reflects, the policy knobs and the token lifetimes. Pure logic."""

from __future__ import annotations

import pytest

from catamaran.consumer.offloading import reflection_binding
from catamaran.networks import remapper
from catamaran.vk.reflection.claims import PersistentVolumeClaims
from catamaran.vk.reflection.configmaps import ConfigMaps
from catamaran.vk.reflection.endpointslices import EndpointSlices
from catamaran.vk.reflection.ingresses import Ingresses
from catamaran.vk.reflection.kind import Context, digest
from catamaran.vk.reflection.policy import ALLOW_LIST, KindPolicy, ReflectionSettings, settings_from_spec
from catamaran.vk.reflection.secrets import Secrets
from catamaran.vk.reflection.services import Services, keep_allocations
from catamaran.vk.reflection.tokens import refresh_delay, token_secret_name
from catamaran.vk.reflection.volumes import volume_for

CONTEXT = Context(settings=ReflectionSettings(), node_name="catamaran-p")


def meta(name="web", namespace="shop", **extra):
    return {"name": name, "namespace": namespace, "uid": "u-1", **extra}


def test_a_copy_read_back_compares_equal_to_its_local_object():
    local = {
        "metadata": meta(labels={"app": "web"}, annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
        "data": {"a": "1"},
    }
    copy = {
        "metadata": meta(
            namespace="shop-c",
            uid="remote",
            resourceVersion="9",
            labels={"app": "web", "catamaran.io/managed-by": "reflection", "catamaran.io/origin-cluster-id": "c"},
            annotations={"catamaran.io/local-uid": "u-1"},
        ),
        "data": {"a": "1"},
    }
    kind = ConfigMaps()
    reflected = kind.content(local, CONTEXT, local=True)
    assert reflected == {"metadata": {"labels": {"app": "web"}}, "data": {"a": "1"}}
    assert digest(kind.content(copy, CONTEXT, local=False)) == digest(reflected)
    copy["data"]["b"] = "tampered"
    assert digest(kind.content(copy, CONTEXT, local=False)) != digest(reflected)


def test_the_consumers_root_ca_gets_its_own_name_and_the_providers_maps_to_nothing():
    kind = ConfigMaps()
    assert kind.remote_name("kube-root-ca.crt") == "catamaran-root-ca.crt"
    assert kind.local_name("catamaran-root-ca.crt") == "kube-root-ca.crt"
    assert kind.local_name("kube-root-ca.crt") is None


def test_service_account_token_secrets_become_opaque():
    local = {"metadata": meta(), "type": "kubernetes.io/service-account-token", "data": {"token": "dA=="}}
    assert Secrets().content(local, CONTEXT, local=True)["type"] == "Opaque"
    assert Secrets().local_name("catamaran-token.web-1") is None


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
    nodeports = Context(settings=ReflectionSettings(), node_name="catamaran-p", service_types=("ClusterIP", "NodePort"))
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
    translated = Context(settings=ReflectionSettings(), node_name="catamaran-p", translate=lambda ip: f"x{ip}")
    content = EndpointSlices().content(local, translated, local=True)
    assert content["endpoints"] == [
        {"addresses": ["x10.1.0.5"], "conditions": {"ready": True}},
        {"addresses": ["x10.201.0.9"], "conditions": {"ready": True}},
    ]
    assert content["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "reflection.catamaran.io"
    assert EndpointSlices().skipped({"metadata": meta("x")}, CONTEXT)  # no Service: nothing to reflect it for


def test_ingress_class_is_the_providers_unless_configured():
    local = {"metadata": meta(), "spec": {"ingressClassName": "consumer-nginx", "rules": [{"host": "a"}]}}
    assert "ingressClassName" not in Ingresses().content(local, CONTEXT, local=True)["spec"]
    configured = Context(settings=ReflectionSettings(ingress_class="public"), node_name="n")
    assert Ingresses().content(local, configured, local=True)["spec"]["ingressClassName"] == "public"
    tampered = {"metadata": meta(), "spec": {"ingressClassName": "other", "rules": [{"host": "a"}]}}
    assert Ingresses().content(tampered, configured, local=False)["spec"]["ingressClassName"] == "other"


@pytest.mark.parametrize(
    ("policy", "annotations", "allowed"),
    [
        (KindPolicy(), {}, True),
        (KindPolicy(), {"catamaran.io/skip-reflection": "true"}, False),
        (KindPolicy(policy=ALLOW_LIST), {}, False),
        (KindPolicy(policy=ALLOW_LIST), {"catamaran.io/allow-reflection": "true"}, True),
    ],
)
def test_deny_and_allow_lists_follow_the_annotations(policy, annotations, allowed):
    assert policy.allows(annotations) is allowed


def test_settings_from_the_foreign_cluster():
    settings = settings_from_spec(
        {
            "kinds": {"secrets": {"workers": 0}, "configMaps": {"policy": "AllowList"}},
            "filteredLabels": ["team/"],
            "ingressClassName": "public",
        }
    )
    assert not settings.kind("secrets").enabled
    assert settings.kind("configMaps") == KindPolicy(policy=ALLOW_LIST, workers=16)
    assert settings.kind("services").workers == 4
    assert settings.labels({"team/owner": "x", "app": "y", "catamaran.io/managed-by": "z"}) == {"app": "y"}
    assert settings.annotations({"service.beta.kubernetes.io/aws-load-balancer-type": "nlb", "a": "b"}) == {"a": "b"}
    assert settings.ingress_class == "public"


def test_tokens_are_refreshed_at_80_percent_of_the_shortest_lifetime():
    assert refresh_delay([3607.0, 600.0]) == pytest.approx(480.0)
    assert token_secret_name("web-1") == "catamaran-token.web-1"
    assert len(token_secret_name("x" * 250)) == 253


def test_the_reflection_role_is_bound_to_the_controllers_service_accounts_in_the_offloaded_namespace_only():
    binding = reflection_binding("shop", "catamaran-system")
    assert binding["metadata"]["namespace"] == "shop"
    assert binding["roleRef"]["name"] == "catamaran-vk-reflection"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:serviceaccounts:catamaran-system"}
    ]


def test_claims_are_reflected_once_the_scheduler_picked_this_virtual_node():
    claim = {
        "metadata": meta("data", annotations={"volume.kubernetes.io/selected-node": "catamaran-p"}),
        "spec": {
            "storageClassName": "catamaran",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeMode": "Filesystem",
        },
    }
    kind = PersistentVolumeClaims()
    assert not kind.skipped(claim, CONTEXT)
    elsewhere = {**claim, "metadata": meta("data", annotations={"volume.kubernetes.io/selected-node": "node-1"})}
    assert kind.skipped(elsewhere, CONTEXT)
    configured = Context(settings=ReflectionSettings(storage_class="fast"), node_name="catamaran-p")
    assert kind.content(claim, configured, local=True)["spec"]["storageClassName"] == "fast"
    assert "storageClassName" not in kind.content(claim, CONTEXT, local=True)["spec"]
    volume = volume_for({**claim, "metadata": {**claim["metadata"], "uid": "u-9"}}, "catamaran-p", "p", "shop-c")
    assert volume["metadata"]["name"] == "pvc-u-9"
    assert volume["spec"]["claimRef"]["uid"] == "u-9"
    assert volume["spec"]["capacity"] == {"storage": "1Gi"}
    assert volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "catamaran-p"
    ]


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
        settings=ReflectionSettings(), node_name="catamaran-p", service_types=("ClusterIP", "LoadBalancer")
    )
    assert Services().content(local, allowed, local=True)["spec"]["loadBalancerClass"] == "example.com/vip"
    assert "externalIPs" not in Services().content(local, allowed, local=True)["spec"]  # never, whatever the terms
    assert Services().adjustments(local, allowed) == []


def test_endpoint_addresses_outside_the_providers_ranges_are_left_out():
    local = {
        "metadata": meta("web-abc", labels={"kubernetes.io/service-name": "web"}),
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.101.0.9"], "conditions": {"ready": True}},
            {"addresses": ["172.31.40.165"], "conditions": {"ready": True}},
        ],
    }
    ranged = Context(settings=ReflectionSettings(), node_name="catamaran-p", endpoint_ranges=("10.101.0.0/16",))
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
        node_name="catamaran-p",
        translate=remapper([("10.100.0.0/16", "100.64.0.0/16")]),
        endpoint_ranges=("100.64.0.0/16",),
    )
    (endpoint,) = EndpointSlices().content(local, remapped, local=True)["endpoints"]
    assert endpoint == {"addresses": ["100.64.255.9"], "conditions": {"ready": True, "serving": True}}
    down = Context(settings=ReflectionSettings(), node_name="catamaran-p", network_down=True)
    (endpoint,) = EndpointSlices().content(local, down, local=True)["endpoints"]
    assert endpoint["conditions"] == {"ready": False, "serving": False}
