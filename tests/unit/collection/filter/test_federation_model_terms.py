"""The inventory model's tenant terms (plugins/filter/federation_model.py): passed as set, lent by the provider."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model
from ansible_collections.catamaran.federation.plugins.module_utils import validation

from tests.unit.collection.peering_fakes import inventory

LENT = {
    "service_types": ["NodePort"],
    "twin_namespace_names": ["Suffixed", "Any"],
    "priority_classes": ["gold"],
    "pod_annotations": ["prometheus.io/*"],
    "max_termination_grace_period": 3600,
    "network_egress_to_api_server": True,
}


def test_the_model_passes_each_term_as_set_and_leaves_the_rest_to_the_module():
    entry = {
        "allowed_service_types": ["NodePort"],
        "twin_namespace_names": "Any",
        "allowed_priority_classes": ["gold"],
        "container_defaults": {"limits": {"memory": "4Gi"}},
        "object_quota": {"services": 500},
        "allowed_pod_annotations": ["prometheus.io/scrape"],  # within the prefix lent
        "max_termination_grace_period": 600,
        "network_egress_to_api_server": True,
    }
    (peering,) = federation_model(inventory(LENT, **entry), ["h1", "h2"])["peerings"]["cluster-1"]
    for option in validation.TERMS_OPTIONS:
        assert peering.get(option) == entry.get(option)
    (unset,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    assert not set(validation.TERMS_OPTIONS) & set(unset)  # left out, for the role to omit


@pytest.mark.parametrize(
    ("entry", "lent"),
    [
        ({"allowed_service_types": ["ClusterIP", "LoadBalancer"]}, "catamaran_tenant_allowances.service_types"),
        ({"twin_namespace_names": "Any"}, "catamaran_tenant_allowances.twin_namespace_names"),
        ({"allowed_priority_classes": ["platinum"]}, "catamaran_tenant_allowances.priority_classes"),
        ({"allowed_load_balancer_classes": ["example.com/vip"]}, "catamaran_tenant_allowances.load_balancer_classes"),
        ({"allowed_pod_annotations": ["karpenter.sh/do-not-disrupt"]}, "catamaran_tenant_allowances.pod_annotations"),
        ({"allowed_storage_classes": ["fast-ssd"]}, "catamaran_tenant_allowances.storage_classes"),
        ({"allowed_ingress_classes": ["nginx"]}, "catamaran_tenant_allowances.ingress_classes"),
        ({"allowed_ingress_hosts": ["shop.example.com"]}, "catamaran_tenant_allowances.ingress_hosts"),
        (
            {"allowed_ingress_annotations": ["cert-manager.io/issuer"]},
            "catamaran_tenant_allowances.ingress_annotations",
        ),
        (
            {"network_ingress_from_namespaces": ["ingress-nginx"]},
            "catamaran_tenant_allowances.network_ingress_from_namespaces",
        ),
        ({"network_egress_to_namespaces": ["shared-db"]}, "catamaran_tenant_allowances.network_egress_to_namespaces"),
        ({"network_egress_to_cidrs": ["203.0.113.0/24"]}, "catamaran_tenant_allowances.network_egress_to_cidrs"),
        ({"network_egress_to_api_server": True}, "catamaran_tenant_allowances.network_egress_to_api_server"),
    ],
)
def test_a_consumer_entry_cannot_ask_what_the_provider_does_not_lend(entry, lent):
    """The allowances are the provider's own inventory entry's to give, as privileged Pod Security is."""
    with pytest.raises(AnsibleFilterError, match=r"not lent by provider cluster-2 \(host h2: " + lent):
        federation_model(inventory({} if "Any" in str(entry) else None, **entry), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"host h2: catamaran_tenant_allowances: unknown keys \['nodeports'\]"):
        federation_model(inventory({"nodeports": True}), ["h1", "h2"])


INGRESS_LENT = {
    "ingress_classes": ["nginx", "internal"],
    "ingress_hosts": ["*.example.com", "shop.example.org"],
    "ingress_annotations": ["cert-manager.io/*", "nginx.ingress.kubernetes.io/rewrite-target"],
}


@pytest.mark.parametrize(
    ("option", "asked"),
    [
        ("allowed_ingress_classes", ["internal"]),
        ("allowed_ingress_hosts", ["shop.example.com", "*.a.example.com", "a.b.example.com", "shop.example.org"]),
        ("allowed_ingress_hosts", ["*.example.com"]),
        (
            "allowed_ingress_annotations",
            ["cert-manager.io/cluster-issuer", "nginx.ingress.kubernetes.io/rewrite-target"],
        ),
        ("allowed_ingress_annotations", ["cert-manager.io/*"]),
    ],
)
def test_ingress_terms_within_what_the_provider_lends_pass(option, asked):
    (peering,) = federation_model(inventory(INGRESS_LENT, **{option: asked}), ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering[option] == asked


@pytest.mark.parametrize(
    ("option", "asked", "beyond"),
    [
        ("allowed_ingress_classes", ["nginx", "public"], "public"),
        ("allowed_ingress_hosts", ["example.com"], "example.com"),  # *.example.com is the names under it
        ("allowed_ingress_hosts", ["*"], r"\*"),
        ("allowed_ingress_hosts", ["shop.example.com", "*.example.org"], r"\*.example.org"),
        ("allowed_ingress_hosts", ["www.shop.example.org"], "www.shop.example.org"),  # an exact host lends itself
        ("allowed_ingress_hosts", ["evilexample.com"], "evilexample.com"),
        (
            "allowed_ingress_annotations",
            ["nginx.ingress.kubernetes.io/configuration-snippet"],
            "nginx.ingress.kubernetes.io/configuration-snippet",
        ),
        ("allowed_ingress_annotations", ["nginx.ingress.kubernetes.io/*"], r"nginx.ingress.kubernetes.io/\*"),
    ],
)
def test_ingress_terms_beyond_what_the_provider_lends_are_refused(option, asked, beyond):
    name = option.removeprefix("allowed_")
    with pytest.raises(
        AnsibleFilterError,
        match=rf"{option} {beyond}.* not lent by provider cluster-2 \(host h2: catamaran_tenant_allowances.{name} is",
    ):
        federation_model(inventory(INGRESS_LENT, **{option: asked}), ["h1", "h2"])


def test_a_provider_lending_every_host_lends_each():
    lent = {"ingress_hosts": ["*"]}
    for hosts in (["*"], ["example.com", "*.example.com"]):
        federation_model(inventory(lent, allowed_ingress_hosts=hosts), ["h1", "h2"])


@pytest.mark.parametrize(
    ("allowances", "message"),
    [
        (
            {"ingress_classes": ["Nginx"]},
            r"catamaran_tenant_allowances.ingress_classes\[0\]: 'Nginx' is not a DNS-1123",
        ),
        ({"ingress_hosts": ["a.*.com"]}, r"catamaran_tenant_allowances.ingress_hosts\[0\]: host 'a.\*.com' is not"),
        ({"ingress_hosts": "*"}, r"catamaran_tenant_allowances.ingress_hosts must be a list"),
        ({"ingress_annotations": ["a/*/*"]}, r"catamaran_tenant_allowances.ingress_annotations\[0\]: annotation key"),
    ],
)
def test_bad_ingress_allowances_name_the_provider_host_and_key(allowances, message):
    with pytest.raises(AnsibleFilterError, match=r"host h2: " + message):
        federation_model(inventory(allowances), ["h1", "h2"])


def test_the_ingress_allowances_lend_nothing_by_default():
    for option in ("allowed_ingress_classes", "allowed_ingress_hosts", "allowed_ingress_annotations"):
        federation_model(inventory(None, **{option: []}), ["h1", "h2"])  # asking none is always within
        with pytest.raises(AnsibleFilterError, match="not lent by provider cluster-2"):
            federation_model(inventory(None, **{option: ["x"]}), ["h1", "h2"])


STORAGE_LENT = {"storage_classes": ["standard", "fast-ssd"]}


@pytest.mark.parametrize("asked", [[], ["fast-ssd"], ["standard", "fast-ssd"]])
def test_storage_classes_the_provider_lends_pass(asked):
    (peering,) = federation_model(inventory(STORAGE_LENT, allowed_storage_classes=asked), ["h1", "h2"])["peerings"][
        "cluster-1"
    ]
    assert peering["allowed_storage_classes"] == asked


@pytest.mark.parametrize(
    ("asked", "beyond"),
    [
        (["fast-ssd", "backup"], "backup"),
        (["fast"], "fast"),  # lent name by name: no prefix, no pattern
        (["fast-ssd-2"], "fast-ssd-2"),
    ],
)
def test_storage_classes_beyond_what_the_provider_lends_are_refused(asked, beyond):
    with pytest.raises(
        AnsibleFilterError,
        match=rf"allowed_storage_classes {beyond} not lent by provider cluster-2 \(host h2: "
        r"catamaran_tenant_allowances.storage_classes is \['standard', 'fast-ssd'\]\)",
    ):
        federation_model(inventory(STORAGE_LENT, allowed_storage_classes=asked), ["h1", "h2"])


def test_the_storage_allowance_lends_no_class_by_default():
    """Only the provider's default class, which the terms lend without naming it; naming a class, even that one,
    needs the provider's entry to lend it."""
    (peering,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    assert "allowed_storage_classes" not in peering  # the module's default: the provider's default class
    federation_model(inventory(None, allowed_storage_classes=[]), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"catamaran_tenant_allowances.storage_classes is \[\]"):
        federation_model(inventory(None, allowed_storage_classes=["standard"]), ["h1", "h2"])


@pytest.mark.parametrize(
    ("allowances", "message"),
    [
        ({"storage_classes": ["Fast"]}, r"catamaran_tenant_allowances.storage_classes\[0\]: 'Fast' is not a DNS-1123"),
        ({"storage_classes": [""]}, r"catamaran_tenant_allowances.storage_classes\[0\]: '' is not a DNS-1123"),
        ({"storage_classes": "fast-ssd"}, r"catamaran_tenant_allowances.storage_classes must be a list"),
    ],
)
def test_bad_storage_allowances_name_the_provider_host_and_key(allowances, message):
    with pytest.raises(AnsibleFilterError, match=r"host h2: " + message):
        federation_model(inventory(allowances), ["h1", "h2"])


NETWORK_LENT = {
    "network_ingress_from_namespaces": ["ingress-nginx", "monitoring"],
    "network_egress_to_namespaces": ["shared-db"],
    "network_egress_to_cidrs": ["203.0.113.0/24", "10.0.0.0/8", "2001:db8::/32"],
}


@pytest.mark.parametrize(
    ("option", "asked"),
    [
        ("network_ingress_from_namespaces", ["monitoring"]),
        ("network_ingress_from_namespaces", ["ingress-nginx", "monitoring"]),
        ("network_egress_to_namespaces", ["shared-db"]),
        ("network_egress_to_cidrs", ["203.0.113.0/24"]),  # a range lent
        ("network_egress_to_cidrs", ["203.0.113.64/26", "10.1.0.0/16", "10.2.3.4/32"]),  # ranges within those lent
        ("network_egress_to_cidrs", ["2001:db8:1::/48", "2001:db8::1/128"]),
    ],
)
def test_network_terms_within_what_the_provider_lends_pass(option, asked):
    (peering,) = federation_model(inventory(NETWORK_LENT, **{option: asked}), ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering[option] == asked


@pytest.mark.parametrize(
    ("option", "asked", "beyond"),
    [
        ("network_ingress_from_namespaces", ["monitoring", "kube-system"], "kube-system"),
        ("network_ingress_from_namespaces", ["monitor"], "monitor"),  # lent name by name: no prefix
        ("network_egress_to_namespaces", ["ingress-nginx"], "ingress-nginx"),  # lent for ingress only
        ("network_egress_to_cidrs", ["203.0.112.0/23"], "203.0.112.0/23"),  # wider than the range lent
        ("network_egress_to_cidrs", ["0.0.0.0/0"], "0.0.0.0/0"),
        ("network_egress_to_cidrs", ["10.0.0.0/8", "192.168.0.0/16"], "192.168.0.0/16"),
        ("network_egress_to_cidrs", ["169.254.169.254/32"], "169.254.169.254/32"),  # metadata: not lent
        ("network_egress_to_cidrs", ["2001:db9::/32"], "2001:db9::/32"),
        ("network_egress_to_cidrs", ["::ffff:10.0.0.0/104"], "::ffff:10.0.0.0/104"),  # IPv6, whatever it maps
    ],
)
def test_network_terms_beyond_what_the_provider_lends_are_refused(option, asked, beyond):
    with pytest.raises(
        AnsibleFilterError,
        match=rf"{option} {beyond} not lent by provider cluster-2 \(host h2: catamaran_tenant_allowances.{option} is",
    ):
        federation_model(inventory(NETWORK_LENT, **{option: asked}), ["h1", "h2"])


def test_a_range_lent_covers_only_its_own_ip_family():
    """0.0.0.0/0 lends every IPv4 address (the provider's nodes and metadata addresses included), no IPv6 one."""
    lent = {"network_egress_to_cidrs": ["0.0.0.0/0"]}
    for asked in (["0.0.0.0/0"], ["169.254.169.254/32", "10.96.0.1/32", "203.0.113.0/24"]):
        federation_model(inventory(lent, network_egress_to_cidrs=asked), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"network_egress_to_cidrs ::/0 not lent by provider cluster-2"):
        federation_model(inventory(lent, network_egress_to_cidrs=["::/0"]), ["h1", "h2"])
    lent = {"network_egress_to_cidrs": ["::/0"]}
    federation_model(inventory(lent, network_egress_to_cidrs=["2001:db8::/32", "fd00::/8"]), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"network_egress_to_cidrs 10.0.0.0/8 not lent by provider cluster-2"):
        federation_model(inventory(lent, network_egress_to_cidrs=["10.0.0.0/8"]), ["h1", "h2"])


def test_the_network_allowances_lend_nothing_by_default():
    asked = {
        "network_ingress_from_namespaces": ["ingress-nginx"],
        "network_egress_to_namespaces": ["shared-db"],
        "network_egress_to_cidrs": ["203.0.113.0/24"],
    }
    (peering,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    assert not set(asked) & set(peering)  # left out: the module's defaults, none
    for option, values in asked.items():
        federation_model(inventory(None, **{option: []}), ["h1", "h2"])  # asking none is always within
        with pytest.raises(AnsibleFilterError, match=rf"catamaran_tenant_allowances.{option} is \[\]"):
            federation_model(inventory(None, **{option: values}), ["h1", "h2"])


def test_the_provider_api_server_is_lent_only_by_the_providers_true():
    """Not lent by default: a peering's true needs the provider's true; false (as unset) is always within."""
    refused = (
        r"network_egress_to_api_server true not lent by provider cluster-2 \(host h2: "
        r"catamaran_tenant_allowances.network_egress_to_api_server is false\)"
    )
    for allowances in (None, {}, {"network_egress_to_api_server": False}):
        (peering,) = federation_model(inventory(allowances, network_egress_to_api_server=False), ["h1", "h2"])[
            "peerings"
        ]["cluster-1"]
        assert peering["network_egress_to_api_server"] is False  # passed as set: the role omits it, the default
        with pytest.raises(AnsibleFilterError, match=refused):
            federation_model(inventory(allowances, network_egress_to_api_server=True), ["h1", "h2"])
    lent = {"network_egress_to_api_server": True}
    for asked in (True, False):
        (peering,) = federation_model(inventory(lent, network_egress_to_api_server=asked), ["h1", "h2"])["peerings"][
            "cluster-1"
        ]
        assert peering["network_egress_to_api_server"] is asked
    (peering,) = federation_model(inventory(lent), ["h1", "h2"])["peerings"]["cluster-1"]
    assert "network_egress_to_api_server" not in peering  # lent, not asked: the module's default, false
    model = federation_model(inventory(lent), ["h1", "h2"])
    assert model["clusters"]["cluster-2"]["allowances"]["network_egress_to_api_server"] is True
    model = federation_model(inventory(), ["h1", "h2"])
    assert model["clusters"]["cluster-2"]["allowances"]["network_egress_to_api_server"] is False


@pytest.mark.parametrize(
    ("allowances", "message"),
    [
        (
            {"network_ingress_from_namespaces": ["Monitoring"]},
            r"catamaran_tenant_allowances.network_ingress_from_namespaces\[0\]: 'Monitoring' is not a namespace",
        ),
        (
            {"network_egress_to_namespaces": "shared-db"},
            r"catamaran_tenant_allowances.network_egress_to_namespaces must be a list",
        ),
        (
            {"network_egress_to_cidrs": ["203.0.113.1/24"]},
            r"catamaran_tenant_allowances.network_egress_to_cidrs\[0\]: '203.0.113.1/24' has host bits set: write "
            r"the network, 203.0.113.0/24",
        ),
        (
            {"network_egress_to_cidrs": ["203.0.113.0"]},
            r"catamaran_tenant_allowances.network_egress_to_cidrs\[0\]: '203.0.113.0' is not an IPv4 or IPv6",
        ),
        (
            {"network_egress_to_cidrs": [f"10.{index}.0.0/16" for index in range(33)]},
            r"catamaran_tenant_allowances.network_egress_to_cidrs: at most 32 ranges, got 33",
        ),
        # A quoted "yes" (or "false") would read as true: only YAML's unquoted true and false.
        (
            {"network_egress_to_api_server": "yes"},
            r"catamaran_tenant_allowances.network_egress_to_api_server must be true or false \(a boolean, "
            r"unquoted\), got 'yes'",
        ),
        (
            {"network_egress_to_api_server": "false"},
            r"catamaran_tenant_allowances.network_egress_to_api_server must be true or false .*got 'false'",
        ),
        (
            {"network_egress_to_api_server": 1},
            r"catamaran_tenant_allowances.network_egress_to_api_server must be true or false .*got 1",
        ),
        (
            {"network_egress_to_api_server": None},
            r"catamaran_tenant_allowances.network_egress_to_api_server must be true or false .*got None",
        ),
    ],
)
def test_bad_network_allowances_name_the_provider_host_and_key(allowances, message):
    with pytest.raises(AnsibleFilterError, match=r"host h2: " + message):
        federation_model(inventory(allowances), ["h1", "h2"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"allowed_service_types": ["Ingress"]}, r"catamaran_peerings\[0\]: allowed_service_types\[0\] must be one"),
        ({"twin_namespace_names": "Same"}, r"catamaran_peerings\[0\]: twin_namespace_names must be one of"),
        ({"priority_class": "Gold"}, r"catamaran_peerings\[0\]: priority_class: 'Gold' is not a DNS-1123"),
        ({"object_quota": {"services": "lots"}}, r"catamaran_peerings\[0\]: object_quota.services: 'lots'"),
        ({"container_defaults": {"requests": {"cpu": "4"}}}, r"container_defaults: requests.cpu 4 is above limits"),
        ({"allowed_services": ["NodePort"]}, r"catamaran_peerings\[0\]: unknown keys \['allowed_services'\]"),
        ({"allowed_ingress_hosts": ["*.Example.com"]}, r"catamaran_peerings\[0\]: allowed_ingress_hosts\[0\]: host"),
        ({"allowed_ingress_classes": "nginx"}, r"catamaran_peerings\[0\]: allowed_ingress_classes must be a list"),
        ({"allowed_storage_classes": [""]}, r"catamaran_peerings\[0\]: allowed_storage_classes\[0\]: '' is not a"),
        ({"allowed_storage_classes": "fast"}, r"catamaran_peerings\[0\]: allowed_storage_classes must be a list"),
        ({"allowed_storage_classes": ["*"]}, r"catamaran_peerings\[0\]: allowed_storage_classes\[0\]: '\*' is not a"),
        (
            {"network_ingress_from_namespaces": ["Monitoring"]},
            r"catamaran_peerings\[0\]: network_ingress_from_namespaces\[0\]: 'Monitoring' is not a namespace name",
        ),
        (
            {"network_egress_to_namespaces": "shared-db"},
            r"catamaran_peerings\[0\]: network_egress_to_namespaces must be a list",
        ),
        (
            {"network_egress_to_cidrs": ["10.0.0.1/8"]},
            r"catamaran_peerings\[0\]: network_egress_to_cidrs\[0\]: '10.0.0.1/8' has host bits set: write the "
            r"network, 10.0.0.0/8",
        ),
        (
            {"network_egress_to_api_server": "yes"},
            r"catamaran_peerings\[0\]: network_egress_to_api_server must be true or false \(a boolean, unquoted\), "
            r"got 'yes'",
        ),
        (
            {"network_egress_to_api_server": 0},
            r"catamaran_peerings\[0\]: network_egress_to_api_server must be true or false .*got 0",
        ),
    ],
)
def test_bad_terms_in_the_inventory_name_the_host_and_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=r"host h1: .*" + message):
        federation_model(inventory(**entry), ["h1", "h2"])


def test_a_consumer_entry_cannot_ask_a_longer_grace_than_the_provider_lends():
    federation_model(inventory(None, max_termination_grace_period=300), ["h1", "h2"])  # the default lent
    with pytest.raises(
        AnsibleFilterError,
        match=r"max_termination_grace_period 301 is above what provider cluster-2 lends \(host h2: "
        r"catamaran_tenant_allowances.max_termination_grace_period is 300\)",
    ):
        federation_model(inventory(None, max_termination_grace_period=301), ["h1", "h2"])
    federation_model(inventory({"max_termination_grace_period": 3600}, max_termination_grace_period=3600), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"catamaran_tenant_allowances.max_termination_grace_period must be"):
        federation_model(inventory({"max_termination_grace_period": "long"}), ["h1", "h2"])
