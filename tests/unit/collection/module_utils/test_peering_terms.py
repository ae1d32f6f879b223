"""The provider's terms a peering writes into the tenant's ResourceOffer, the consumer's announced pod ranges
and the cluster-wide objects all tenants share (plugins/module_utils/peering.py).
"""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils import kube, validation
from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    DEFAULT_ALLOWED_POD_ANNOTATIONS,
    DEFAULT_ALLOWED_SERVICE_TYPES,
    DEFAULT_CONTAINER_LIMITS,
    DEFAULT_CONTAINER_REQUESTS,
    DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    DEFAULT_OBJECT_QUOTA,
    DEFAULT_TWIN_NAME_POLICY,
    TENANT_PRIORITY_CLASS,
)
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, terms
from ansible_collections.catamaran.federation.plugins.module_utils.tenancy import (
    provider_cluster_objects,
    tenant_manifests,
)

from tests.unit.collection.peering_fakes import (
    INSTALLED_CRDS,
    OFFER,
    FakeCluster,
    FakeModule,
    clusters,
    node,
    params,
)

# -- terms(params) ---------------------------------------------------------------------------------------------------


def test_unset_terms_are_the_controllers_defaults():
    agreed = terms(params())
    assert agreed["services"] == {
        "allowedTypes": list(DEFAULT_ALLOWED_SERVICE_TYPES),
        "allowedLoadBalancerClasses": [],
    }
    assert agreed["twinNamespaceNames"] == DEFAULT_TWIN_NAME_POLICY
    assert agreed["priorityClassName"] == TENANT_PRIORITY_CLASS
    assert agreed["allowedPriorityClasses"] == []
    assert agreed["containerDefaults"] == {"requests": DEFAULT_CONTAINER_REQUESTS, "limits": DEFAULT_CONTAINER_LIMITS}
    assert agreed["objectQuota"] == DEFAULT_OBJECT_QUOTA
    assert agreed["pods"] == {
        "maxTerminationGracePeriodSeconds": DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
        "allowedAnnotations": list(DEFAULT_ALLOWED_POD_ANNOTATIONS),
    }
    # None named: a tenant claim may name only the provider's default class (the manager follows which it is).
    assert agreed["storage"] == {"allowedClasses": []}
    # None lent: the provider refuses every tenant Ingress until it lends a class and hosts.
    assert agreed["ingress"] == {"allowedClasses": [], "allowedHosts": [], "allowedAnnotations": []}
    # None lent: a tenant's pods reach, and are reached from, only their own twin, the cluster DNS and the fabric;
    # never the provider's API server.
    assert agreed["isolation"] == {
        "ingressFromNamespaces": [],
        "egressToNamespaces": [],
        "egressToCIDRs": [],
        "egressToAPIServer": False,
    }


def test_unset_ingress_terms_are_written_empty_in_the_offer():
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params())["spec"]
    assert spec["ingress"] == {"allowedClasses": [], "allowedHosts": [], "allowedAnnotations": []}


def test_unset_network_terms_are_written_empty_in_the_offer():
    """Written empty (and false) rather than left out, so un-setting an option takes back what was lent before."""
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params())["spec"]
    assert spec["isolation"] == {
        "ingressFromNamespaces": [],
        "egressToNamespaces": [],
        "egressToCIDRs": [],
        "egressToAPIServer": False,
    }


@pytest.mark.parametrize("unset", [{}, {"network_egress_to_api_server": None}, {"network_egress_to_api_server": False}])
def test_the_provider_api_server_once_lent_is_taken_back_by_false_or_unset(unset):
    """The field is always written: an offer that lent it (true) is replaced by one that says false."""
    peering = Peering(None, None, None, "c1", "p1")
    lent = peering.resource_offer(params(network_egress_to_api_server=True))["spec"]["isolation"]
    assert lent["egressToAPIServer"] is True
    Peering.validate(params(**unset))
    taken_back = peering.resource_offer(params(**unset))["spec"]["isolation"]
    assert taken_back["egressToAPIServer"] is False


def test_unset_storage_terms_are_written_empty_in_the_offer():
    """Written empty rather than left out, so un-setting the option takes back the classes lent before."""
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params())["spec"]
    assert spec["storage"] == {"allowedClasses": []}
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params(allowed_storage_classes=["fast-ssd"]))["spec"]
    assert spec["storage"] == {"allowedClasses": ["fast-ssd"]}


@pytest.mark.parametrize(
    ("option", "value", "path", "written"),
    [
        ("allowed_service_types", ["ClusterIP", "NodePort"], ("services", "allowedTypes"), ["ClusterIP", "NodePort"]),
        ("allowed_service_types", ["NodePort", "NodePort"], ("services", "allowedTypes"), ["NodePort"]),
        (
            "allowed_load_balancer_classes",
            ["example.com/internal-vip"],
            ("services", "allowedLoadBalancerClasses"),
            ["example.com/internal-vip"],
        ),
        ("twin_namespace_names", "Any", ("twinNamespaceNames",), "Any"),
        ("priority_class", "batch-low", ("priorityClassName",), "batch-low"),
        ("allowed_priority_classes", ["batch-high"], ("allowedPriorityClasses",), ["batch-high"]),
        (
            "container_defaults",
            {"requests": {"memory": "256Mi"}, "limits": {"memory": "4Gi", "nvidia.com/gpu": 1}},
            ("containerDefaults",),
            {
                "requests": dict(DEFAULT_CONTAINER_REQUESTS, memory="256Mi"),
                "limits": dict(DEFAULT_CONTAINER_LIMITS, memory="4Gi", **{"nvidia.com/gpu": "1"}),
            },
        ),
        ("object_quota", {"services": 500}, ("objectQuota",), dict(DEFAULT_OBJECT_QUOTA, services="500")),
        ("max_termination_grace_period", 0, ("pods", "maxTerminationGracePeriodSeconds"), 0),
        ("allowed_pod_annotations", [], ("pods", "allowedAnnotations"), []),  # none kept
        (
            "allowed_pod_annotations",
            ["prometheus.io/*", "prometheus.io/*", "example.com/team"],
            ("pods", "allowedAnnotations"),
            ["prometheus.io/*", "example.com/team"],
        ),
        (
            "allowed_storage_classes",
            ["fast-ssd", "standard", "fast-ssd"],
            ("storage", "allowedClasses"),
            ["fast-ssd", "standard"],
        ),
        ("allowed_storage_classes", [], ("storage", "allowedClasses"), []),
        ("allowed_ingress_classes", ["nginx", "nginx"], ("ingress", "allowedClasses"), ["nginx"]),
        (
            "allowed_ingress_hosts",
            ["shop.example.com", "*.example.com", "*"],
            ("ingress", "allowedHosts"),
            ["shop.example.com", "*.example.com", "*"],
        ),
        (
            "allowed_ingress_annotations",
            ["nginx.ingress.kubernetes.io/rewrite-target", "cert-manager.io/*"],
            ("ingress", "allowedAnnotations"),
            ["nginx.ingress.kubernetes.io/rewrite-target", "cert-manager.io/*"],
        ),
        ("allowed_ingress_annotations", [], ("ingress", "allowedAnnotations"), []),
        (
            "network_ingress_from_namespaces",
            ["ingress-nginx", "monitoring", "ingress-nginx"],
            ("isolation", "ingressFromNamespaces"),
            ["ingress-nginx", "monitoring"],
        ),
        ("network_ingress_from_namespaces", [], ("isolation", "ingressFromNamespaces"), []),
        ("network_egress_to_namespaces", ["shared-db"], ("isolation", "egressToNamespaces"), ["shared-db"]),
        (
            "network_egress_to_cidrs",
            ["203.0.113.0/24", "2001:db8::/32", "203.0.113.0/24"],
            ("isolation", "egressToCIDRs"),
            ["203.0.113.0/24", "2001:db8::/32"],
        ),
        ("network_egress_to_cidrs", ["0.0.0.0/0", "::/0"], ("isolation", "egressToCIDRs"), ["0.0.0.0/0", "::/0"]),
        ("network_egress_to_cidrs", [], ("isolation", "egressToCIDRs"), []),
        ("network_egress_to_api_server", True, ("isolation", "egressToAPIServer"), True),
        ("network_egress_to_api_server", False, ("isolation", "egressToAPIServer"), False),
        (
            "object_quota",
            {"count/jobs.batch": "20", "requests.storage": "1Ti"},
            ("objectQuota",),
            dict(DEFAULT_OBJECT_QUOTA, **{"count/jobs.batch": "20", "requests.storage": "1Ti"}),
        ),
    ],
)
def test_each_option_reaches_its_field_of_the_offer(option, value, path, written):
    Peering.validate(params(**{option: value}))
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params(**{option: value}))["spec"]
    for key in path:
        spec = spec[key]
    assert spec == written


def test_a_consumers_announced_pod_ranges_are_written_only_when_there_are_some():
    peering = Peering(None, None, None, "c1", "p1")
    assert "consumerPodCIDRs" not in peering.resource_offer(params())["spec"]
    spec = peering.resource_offer(params(), ["10.244.0.0/16"])["spec"]
    assert spec["consumerPodCIDRs"] == ["10.244.0.0/16"]


# -- validation ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"allowed_service_types": ["NodePort", "Ingress"]}, r"allowed_service_types\[1\] must be one of ClusterIP"),
        ({"allowed_service_types": "NodePort"}, "allowed_service_types must be a list"),
        (
            {"allowed_load_balancer_classes": ["Bad Class"]},
            r"allowed_load_balancer_classes\[0\]: load-balancer class 'Bad Class'",
        ),
        ({"allowed_load_balancer_classes": ["Example.com/vip"]}, "the prefix 'Example.com' must be a DNS-1123"),
        ({"twin_namespace_names": "Same"}, "twin_namespace_names must be one of Suffixed, Any, got 'Same'"),
        ({"priority_class": "High_Priority"}, "priority_class: 'High_Priority' is not a DNS-1123 subdomain"),
        ({"priority_class": "a" * 254}, "priority_class: 'a{254}' is not a DNS-1123 subdomain"),
        ({"allowed_priority_classes": ["ok", "-bad"]}, r"allowed_priority_classes\[1\]: '-bad' is not a DNS-1123"),
        ({"container_defaults": {"requests": {"cpu": "lots"}}}, "container_defaults.requests.cpu: 'lots' is not a"),
        ({"container_defaults": {"limits": {"memory": "-1Gi"}}}, "container_defaults.limits.memory: '-1Gi' is not a"),
        ({"container_defaults": {"limits": {"cpu": True}}}, "container_defaults.limits.cpu: True is not a"),
        (
            {"container_defaults": {"requests": {"bad key!": "1"}}},
            "container_defaults.requests: resource name 'bad key!'",
        ),
        (
            {"container_defaults": {"requests": {"memory": "3Gi"}}},
            r"container_defaults: requests.memory 3Gi is above limits.memory 2Gi",
        ),
        (
            {"container_defaults": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}},
            r"container_defaults: requests.cpu 2 is above limits.cpu 500m",
        ),
        ({"container_defaults": {"request": {}}}, "container_defaults: unknown request"),
        ({"object_quota": {"services": "many"}}, "object_quota.services: 'many' is not a non-negative"),
        ({"object_quota": ["services"]}, "object_quota must be a mapping of resource names to quantities"),
        ({"max_termination_grace_period": 86401}, "max_termination_grace_period must be a whole number of seconds"),
        ({"max_termination_grace_period": -1}, "from 0 to 86400, got -1"),
        ({"allowed_pod_annotations": ["a/*/*"]}, r"allowed_pod_annotations\[0\]: annotation key \(or prefix/\*\)"),
        ({"allowed_pod_annotations": "prometheus.io/*"}, "allowed_pod_annotations must be a list"),
        ({"allowed_storage_classes": ["fast-ssd", "Fast"]}, r"allowed_storage_classes\[1\]: 'Fast' is not a DNS-1123"),
        ({"allowed_storage_classes": [""]}, r"allowed_storage_classes\[0\]: '' is not a DNS-1123"),  # static volumes
        ({"allowed_storage_classes": ["a" * 254]}, r"allowed_storage_classes\[0\]: 'a{254}' is not a DNS-1123"),
        ({"allowed_storage_classes": ["fast_ssd"]}, r"allowed_storage_classes\[0\]: 'fast_ssd' is not a DNS-1123"),
        ({"allowed_storage_classes": [None]}, r"allowed_storage_classes\[0\]: None is not a DNS-1123"),
        ({"allowed_storage_classes": "fast-ssd"}, "allowed_storage_classes must be a list"),
        ({"allowed_ingress_classes": ["nginx", "Nginx"]}, r"allowed_ingress_classes\[1\]: 'Nginx' is not a DNS-1123"),
        ({"allowed_ingress_classes": ["a" * 254]}, r"allowed_ingress_classes\[0\]: 'a{254}' is not a DNS-1123"),
        ({"allowed_ingress_classes": "nginx"}, "allowed_ingress_classes must be a list"),
        (
            {"allowed_ingress_hosts": ["Shop.example.com"]},
            r"allowed_ingress_hosts\[0\]: host 'Shop.example.com' is not",
        ),
        ({"allowed_ingress_hosts": ["*.example.com", "a.*.com"]}, r"allowed_ingress_hosts\[1\]: host 'a.\*.com'"),
        ({"allowed_ingress_hosts": ["*example.com"]}, r"allowed_ingress_hosts\[0\]: host '\*example.com' is not"),
        ({"allowed_ingress_hosts": ["*."]}, r"allowed_ingress_hosts\[0\]: host '\*.' is not"),
        ({"allowed_ingress_hosts": ["**"]}, r"allowed_ingress_hosts\[0\]: host '\*\*' is not"),
        ({"allowed_ingress_hosts": ["shop.example.com."]}, r"allowed_ingress_hosts\[0\]: host 'shop.example.com.'"),
        ({"allowed_ingress_hosts": ["*." + "a" * 252]}, r"allowed_ingress_hosts\[0\]: host '\*.a{252}' is not"),
        ({"allowed_ingress_hosts": [""]}, r"allowed_ingress_hosts\[0\]: host '' is not"),
        ({"allowed_ingress_hosts": "*"}, "allowed_ingress_hosts must be a list"),
        (
            {"allowed_ingress_annotations": ["nginx.ingress.kubernetes.io/*/x"]},
            r"allowed_ingress_annotations\[0\]: annotation key \(or prefix/\*\)",
        ),
        ({"allowed_ingress_annotations": ["Bad Key"]}, r"allowed_ingress_annotations\[0\]: annotation key"),
        ({"allowed_ingress_annotations": "cert-manager.io/*"}, "allowed_ingress_annotations must be a list"),
        (
            {"network_ingress_from_namespaces": ["monitoring", "Ingress-Nginx"]},
            r"network_ingress_from_namespaces\[1\]: 'Ingress-Nginx' is not a namespace name \(a DNS-1123 label",
        ),
        (
            {"network_ingress_from_namespaces": ["a" * 64]},
            r"network_ingress_from_namespaces\[0\]: 'a{64}' is not a namespace name",
        ),
        ({"network_ingress_from_namespaces": "monitoring"}, "network_ingress_from_namespaces must be a list"),
        (
            {"network_egress_to_namespaces": ["shared.db"]},  # a subdomain, not a label
            r"network_egress_to_namespaces\[0\]: 'shared.db' is not a namespace name",
        ),
        ({"network_egress_to_namespaces": ["shared_db"]}, r"network_egress_to_namespaces\[0\]: 'shared_db' is not"),
        ({"network_egress_to_namespaces": [""]}, r"network_egress_to_namespaces\[0\]: '' is not a namespace name"),
        ({"network_egress_to_namespaces": [None]}, r"network_egress_to_namespaces\[0\]: None is not a namespace"),
        (
            {"network_egress_to_namespaces": [f"ns-{index}" for index in range(33)]},
            r"network_egress_to_namespaces: at most 32 namespaces, got 33",
        ),
        (
            {"network_egress_to_cidrs": ["203.0.113.0/24", "10.0.0.1/8"]},
            r"network_egress_to_cidrs\[1\]: '10.0.0.1/8' has host bits set: write the network, 10.0.0.0/8",
        ),
        (
            {"network_egress_to_cidrs": ["2001:db8::1/32"]},
            r"network_egress_to_cidrs\[0\]: '2001:db8::1/32' has host bits set: write the network, 2001:db8::/32",
        ),
        (
            {"network_egress_to_cidrs": ["10.0.0.0"]},  # an address: a range needs its prefix length
            r"network_egress_to_cidrs\[0\]: '10.0.0.0' is not an IPv4 or IPv6 network written as address/prefix",
        ),
        ({"network_egress_to_cidrs": ["10.0.0.0/255.0.0.0"]}, r"'10.0.0.0/255.0.0.0' is not an IPv4 or IPv6"),
        ({"network_egress_to_cidrs": ["10.0.0.0/33"]}, r"'10.0.0.0/33' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": ["::/129"]}, r"'::/129' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": ["10.0.0.0/08"]}, r"'10.0.0.0/08' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": ["fe80::%eth0/64"]}, r"'fe80::%eth0/64' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": ["example.com/32"]}, r"'example.com/32' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": [" 10.0.0.0/8"]}, r"' 10.0.0.0/8' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": [""]}, r"network_egress_to_cidrs\[0\]: '' is not an IPv4 or IPv6 network"),
        ({"network_egress_to_cidrs": [167772160]}, r"network_egress_to_cidrs\[0\]: 167772160 is not an IPv4"),
        ({"network_egress_to_cidrs": "0.0.0.0/0"}, "network_egress_to_cidrs must be a list"),
        (
            {"network_egress_to_cidrs": [f"10.{index}.0.0/16" for index in range(33)]},
            r"network_egress_to_cidrs: at most 32 ranges, got 33",
        ),
        # A string would read as true (and "no" too): only YAML's unquoted true and false.
        (
            {"network_egress_to_api_server": "yes"},
            r"network_egress_to_api_server must be true or false \(a boolean, unquoted\), got 'yes'",
        ),
        ({"network_egress_to_api_server": "true"}, r"network_egress_to_api_server must be true or false .*'true'"),
        ({"network_egress_to_api_server": "no"}, r"network_egress_to_api_server must be true or false .*'no'"),
        ({"network_egress_to_api_server": 1}, r"network_egress_to_api_server must be true or false .*got 1$"),
        ({"network_egress_to_api_server": 0}, r"network_egress_to_api_server must be true or false .*got 0$"),
        ({"network_egress_to_api_server": []}, r"network_egress_to_api_server must be true or false .*got \[\]"),
    ],
)
def test_bad_terms_are_refused_naming_the_option(extra, message):
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(params(**extra))


@pytest.mark.parametrize(
    "hosts",
    [["*"], ["shop.example.com"], ["*.example.com"], ["*.a.example.com", "localhost", "a" * 253], ["*." + "a" * 251]],
)
def test_valid_ingress_host_patterns_pass(hosts):
    Peering.validate(params(allowed_ingress_hosts=hosts))


@pytest.mark.parametrize("classes", [[], ["standard"], ["fast-ssd", "ebs.csi.aws.com-gp3", "a" * 253]])
def test_valid_storage_class_names_pass(classes):
    Peering.validate(params(allowed_storage_classes=classes))


@pytest.mark.parametrize(
    ("option", "values"),
    [
        ("network_ingress_from_namespaces", ["ingress-nginx", "monitoring", "a" * 63, "0"]),
        ("network_egress_to_namespaces", [f"ns-{index}" for index in range(32)]),
        # Counted once each, as the offer writes them.
        ("network_egress_to_namespaces", [f"ns-{index % 32}" for index in range(40)]),
        ("network_egress_to_cidrs", ["0.0.0.0/0", "::/0", "203.0.113.7/32", "2001:DB8::/32", "::ffff:10.0.0.0/104"]),
        ("network_egress_to_cidrs", ["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"]),  # the CRD's 43 characters
        ("network_egress_to_cidrs", [f"10.{index}.0.0/16" for index in range(32)]),
        ("network_egress_to_api_server", True),
        ("network_egress_to_api_server", False),
    ],
)
def test_valid_network_terms_pass(option, values):
    Peering.validate(params(**{option: values}))


def test_valid_quantities_pass():
    for value in ("100m", "1.5", "2Gi", "1e3", "0", 3, 0.5):
        validation.quantity(value, "q")


# -- against (fake) clusters -----------------------------------------------------------------------------------------


def test_the_consumers_pod_ranges_from_its_real_nodes_reach_the_offer():
    consumer, provider = clusters(
        consumer_nodes=[
            node("a", pod_cidrs=["10.244.0.0/24", "fd00:10::/64"]),
            node("b", pod_cidr="10.244.1.0/24"),
            node("catamaran-p9", pod_cidr="10.99.0.0/24", virtual=True),  # a provider's, not the consumer's
        ]
    )
    module = FakeModule()
    plan = Peering(module, consumer, provider, "c1", "p1").present(params())
    assert plan.after[OFFER]["spec"]["consumerPodCIDRs"] == ["10.244.0.0/23", "fd00:10::/64"]
    assert module.ansible.warnings == []


def test_a_consumer_without_pod_ranges_is_warned_about():
    consumer, provider = clusters(consumer_nodes=[node("a")])
    module = FakeModule()
    plan = Peering(module, consumer, provider, "c1", "p1").present(params())
    assert "consumerPodCIDRs" not in plan.after[OFFER]["spec"]
    assert len(module.ansible.warnings) == 1
    assert "no node reports spec.podCIDRs" in module.ansible.warnings[0]


def test_the_shared_cluster_objects_are_applied_with_the_peering():
    consumer, provider = clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(params())
    for obj in provider_cluster_objects():
        assert f"create p1: {obj['kind']} {obj['metadata']['name']}" in plan.actions


@pytest.mark.parametrize("obj", provider_cluster_objects(), ids=lambda obj: obj["kind"])
def test_cluster_scoped_objects_are_planned_created_then_left_alone(obj):
    provider = FakeCluster("p1")
    assert kube.KINDS[(obj["apiVersion"], obj["kind"])][1] is False
    plural, name = kube.KINDS[(obj["apiVersion"], obj["kind"])][0], obj["metadata"]["name"]
    assert provider.path(obj["apiVersion"], obj["kind"], name) == f"/apis/{obj['apiVersion']}/{plural}/{name}"
    plan = ChangeSet(check_mode=True)
    plan.apply(provider, obj)
    assert plan.changed
    assert provider.objects == {}  # a dry run changes nothing
    assert plan.after[f"p1: {obj['kind']} {name}"] == obj
    changes = ChangeSet(check_mode=False)
    changes.apply(provider, obj)
    assert changes.changed
    again = ChangeSet(check_mode=True)
    again.apply(provider, obj)
    assert not again.changed


def test_a_priority_class_the_provider_lacks_is_refused_before_any_change():
    consumer, provider = clusters()
    peering = Peering(FakeModule(), consumer, provider, "c1", "p1")
    with pytest.raises(InvalidInput, match="p1: priority_class batch-low: no such PriorityClass"):
        peering.check_clusters(params(priority_class="batch-low"))
    provider._store({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "batch-low"}})
    peering.check_clusters(params(priority_class="batch-low"))
    peering.check_clusters(params())  # catamaran-tenant is applied with the peering


def tenant_namespace_object(consumer_id):
    (namespace,) = [obj for obj in tenant_manifests(consumer_id) if obj["kind"] == "Namespace"]
    return namespace


@pytest.mark.parametrize(("other_tenant", "removed"), [(True, False), (False, True)])
def test_unpeering_removes_the_shared_objects_only_with_the_last_tenant(other_tenant, removed):
    objects = [*provider_cluster_objects(), tenant_namespace_object("c1")]
    if other_tenant:
        objects.append(tenant_namespace_object("c2"))
    provider = FakeCluster("p1", objects)
    Peering(FakeModule(check_mode=False), None, provider, "c1", "p1")._remove_tenant(ChangeSet(False), 5)
    shared = [(obj["kind"], obj["metadata"]["name"]) for obj in provider_cluster_objects()]
    gone = [entry for entry in provider.deleted if entry in shared]
    assert gone == (list(reversed(shared)) if removed else [])


def test_an_upgrade_plan_writes_the_pod_terms_once_the_crd_it_brings_serves_them():
    """A check-mode run of an upgrade: the served ResourceOffer CRD is still the previous release's, which a dry run
    of spec.pods would fail against (field not declared in schema)."""
    consumer, provider = clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(params())
    assert plan.after[OFFER]["spec"]["pods"]["maxTerminationGracePeriodSeconds"] == 300
    for version in provider.crds["resourceoffers.offloading.catamaran.io"]["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("pods")
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(params())
    assert "pods" not in plan.after[OFFER]["spec"]
    assert any("write the terms of the tenant's pods (spec.pods) once" in action for action in plan.actions)


def test_an_upgrade_plan_writes_the_ingress_terms_once_the_crd_it_brings_serves_them():
    consumer, provider = clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(params(allowed_ingress_classes=["nginx"]))
    assert plan.after[OFFER]["spec"]["ingress"]["allowedClasses"] == ["nginx"]
    for version in provider.crds["resourceoffers.offloading.catamaran.io"]["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("ingress")
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(params(allowed_ingress_classes=["nginx"]))
    assert "ingress" not in plan.after[OFFER]["spec"]
    assert plan.after[OFFER]["spec"]["pods"]["maxTerminationGracePeriodSeconds"] == 300  # served: kept
    assert any("write the terms of the tenant's Ingresses (spec.ingress) once" in action for action in plan.actions)


def test_an_upgrade_plan_writes_the_storage_terms_once_the_crd_it_brings_serves_them():
    consumer, provider = clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    given = params(allowed_storage_classes=["fast-ssd"], allowed_ingress_classes=["nginx"])
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(given)
    assert plan.after[OFFER]["spec"]["storage"] == {"allowedClasses": ["fast-ssd"]}
    for version in provider.crds["resourceoffers.offloading.catamaran.io"]["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("storage")
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(given)
    assert "storage" not in plan.after[OFFER]["spec"]
    assert plan.after[OFFER]["spec"]["ingress"]["allowedClasses"] == ["nginx"]  # served: kept
    awaited = "write the terms of the tenant's PersistentVolumeClaims (spec.storage) once"
    assert any(awaited in action for action in plan.actions)
    assert not any("(spec.ingress) once" in action for action in plan.actions)


def test_an_upgrade_plan_writes_the_network_terms_once_the_crd_it_brings_serves_them():
    consumer, provider = clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    given = params(network_egress_to_cidrs=["203.0.113.0/24"], allowed_storage_classes=["fast-ssd"])
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(given)
    assert plan.after[OFFER]["spec"]["isolation"]["egressToCIDRs"] == ["203.0.113.0/24"]
    for version in provider.crds["resourceoffers.offloading.catamaran.io"]["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("isolation")
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(given)
    assert "isolation" not in plan.after[OFFER]["spec"]
    assert plan.after[OFFER]["spec"]["storage"] == {"allowedClasses": ["fast-ssd"]}  # served: kept
    awaited = "write the terms of the tenant's network (spec.isolation) once"
    assert any(awaited in action for action in plan.actions)
    assert not any("(spec.storage) once" in action for action in plan.actions)


def test_the_network_terms_fit_the_resource_offer_crd():
    """Each list and entry within what the CRD holds: 32 entries, namespaces of 63 characters, ranges of 43; the
    provider's API server a boolean."""
    (crd,) = [crd for crd in INSTALLED_CRDS if crd["metadata"]["name"] == "resourceoffers.offloading.catamaran.io"]
    for version in crd["spec"]["versions"]:
        isolation = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["isolation"]
        fields = isolation["properties"]
        assert set(fields) == {"ingressFromNamespaces", "egressToNamespaces", "egressToCIDRs", "egressToAPIServer"}
        assert fields["egressToAPIServer"]["type"] == "boolean"
        for name in ("ingressFromNamespaces", "egressToNamespaces", "egressToCIDRs"):
            assert fields[name]["maxItems"] == validation.MAX_ISOLATION_ENTRIES
        assert fields["ingressFromNamespaces"]["items"]["maxLength"] == 63
        assert fields["egressToNamespaces"]["items"]["maxLength"] == 63
        assert fields["egressToCIDRs"]["items"]["maxLength"] >= len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")


@pytest.mark.parametrize(
    ("cordon", "expected"),
    [
        (None, None),
        ({"state": "uncordoned", "reason": "back"}, None),
        ({"state": "cordoned"}, {"drain": False}),
        ({"state": "drained", "reason": "maintenance"}, {"drain": True, "reason": "maintenance"}),
    ],
)
def test_the_providers_cordon_of_the_tenant_is_in_its_offer(cordon, expected):
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params(cordon=cordon))["spec"]
    assert spec.get("cordon") == expected


def test_a_cordon_reason_longer_than_the_crd_allows_fails_before_any_change():
    with pytest.raises(InvalidInput, match=r"cordon\.reason: at most 256 characters"):
        Peering.validate(params(cordon={"state": "cordoned", "reason": "x" * 257}))
