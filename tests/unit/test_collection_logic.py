"""Pure logic of the catamaran.federation collection: inventory model, diffs, secrecy, reflection settings."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model
from ansible_collections.catamaran.federation.plugins.module_utils.changes import comparable, redacted
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.constants import TENANT_WORKLOAD_CLUSTER_ROLE
from ansible_collections.catamaran.federation.plugins.module_utils.info import peerings_report
from ansible_collections.catamaran.federation.plugins.module_utils.kube import ClusterError, ClusterUnreachable
from ansible_collections.catamaran.federation.plugins.module_utils.networks import covering_networks
from ansible_collections.catamaran.federation.plugins.module_utils.peering import (
    Peering,
    api_toleration,
    connect_both,
)
from ansible_collections.catamaran.federation.plugins.module_utils.tenancy import provider_cluster_roles
from ansible_collections.catamaran.federation.plugins.module_utils.validation import InvalidSetting, remap_covers
from ansible_collections.catamaran.federation.plugins.modules.peering import argument_spec, reflection_options


def inventory(**cluster_1):
    return {
        "h1": {"catamaran_cluster_id": "cluster-1", "catamaran_kubeconfig": "/k1", **cluster_1},
        "h2": {
            "catamaran_cluster_id": "cluster-2",
            "catamaran_kubeconfig": "/k2",
            "catamaran_context": "ctx-2",
            "catamaran_cluster_labels": {"topology.kubernetes.io/region": "region-b"},
        },
    }


def test_peerings_resolve_the_providers_connection_and_labels():
    model = federation_model(
        inventory(catamaran_peerings=[{"provider": "cluster-2", "node_labels": {"tier": "gold"}}]), ["h1", "h2"]
    )
    (peering,) = model["peerings"]["cluster-1"]
    assert peering["kubeconfig"] == "/k2"
    assert peering["context"] == "ctx-2"
    assert peering["sharing_percentage"] == 90
    assert peering["node_labels"] == {"topology.kubernetes.io/region": "region-b", "tier": "gold"}
    assert peering["node_taints"] == []
    assert model["peerings"]["cluster-2"] == []
    assert model["hosts"] == {"h1": "cluster-1", "h2": "cluster-2"}


@pytest.mark.parametrize(
    ("cluster_1", "message"),
    [
        ({"catamaran_peerings": [{"provider": "cluster-9"}]}, "no cluster with id 'cluster-9'"),
        ({"catamaran_peerings": [{"provider": "cluster-2", "sharing_percentage": 150}]}, "got 150"),
        ({"catamaran_peerings": [{"provider": "cluster-2", "sharing_percentage": True}]}, "got True"),
        ({"catamaran_peerings": [{"provider": "cluster-1"}]}, "cannot peer with itself"),
        ({"catamaran_peerings": [{"provider": "cluster-2"}, {"provider": "cluster-2"}]}, "peered twice"),
        ({"catamaran_peerings": [{"provider": "cluster-2", "sharing": 5}]}, "unknown keys ['sharing']"),
        ({"catamaran_cluster_id": "Cluster_1"}, "not a DNS-1123 label"),
        ({"catamaran_cluster_id": "cluster-2"}, "both have cluster id cluster-2"),
        ({"catamaran_kubeconfig": ""}, "catamaran_kubeconfig is not set"),
        ({"catamaran_offloaded_namespaces": [{"namespace": "demo"}]}, "peers with no provider"),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloaded_namespaces": [{"namespace": "demo", "pod_offloading_strategy": "Anywhere"}],
            },
            "pod_offloading_strategy must be one of",
        ),
        (
            {"catamaran_offloading_policies": [{"name": "team", "namespace_selector": {"matchLabels": {"t": "a"}}}]},
            "peers with no provider",
        ),
        (
            {"catamaran_peerings": [{"provider": "cluster-2"}], "catamaran_offloading_policies": [{"name": "team"}]},
            "catamaran_offloading_policies[0]: namespace_selector must hold matchLabels or matchExpressions",
        ),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloading_policies": [
                    {
                        "name": "team",
                        "namespace_selector": {"matchLabels": {"t": "a"}},
                        "namespace_mapping_strategy": "SelectedName",
                    }
                ],
            },
            "SelectedName names one twin",
        ),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloading_policies": [
                    {"name": "team", "namespace_selector": {"matchLabels": {"t": "a"}}},
                    {"name": "team", "namespace_selector": {"matchLabels": {"t": "b"}}},
                ],
            },
            "policy team is listed twice",
        ),
    ],
)
def test_invalid_inventories_name_the_host_and_field(cluster_1, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        federation_model(inventory(**cluster_1), ["h1", "h2"])


def test_offloading_policies_resolve_with_the_modules_defaults():
    policy = {"name": "team", "namespace_selector": {"matchLabels": {"team": "blue"}}}
    model = federation_model(
        inventory(catamaran_peerings=[{"provider": "cluster-2"}], catamaran_offloading_policies=[policy]), ["h1", "h2"]
    )
    assert model["offloading_policies"] == {
        "cluster-1": [
            {
                **policy,
                "pod_offloading_strategy": "LocalAndRemote",
                "namespace_mapping_strategy": "DefaultName",
                "cluster_selector": None,
            }
        ],
        "cluster-2": [],
    }


def test_comparable_ignores_what_the_server_changes_on_every_write():
    live = {
        "kind": "ConfigMap",
        "metadata": {"name": "a", "resourceVersion": "7", "managedFields": [{}], "uid": "u", "generation": 2},
        "data": {"k": "v"},
        "status": {"x": 1},
    }
    assert comparable(live) == {"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}


def test_secret_values_become_digests_and_other_kinds_are_untouched():
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"kubeconfig": "c2VjcmV0"}}
    shown = redacted(secret)
    assert "c2VjcmV0" not in str(shown)
    assert shown["data"]["kubeconfig"].startswith("<redacted sha256:")
    assert redacted({**secret, "data": {"kubeconfig": "b3RoZXI="}}) != shown
    assert secret["data"]["kubeconfig"] == "c2VjcmV0"
    config_map = {"kind": "ConfigMap", "data": {"k": "v"}}
    assert redacted(config_map) is config_map


def test_a_peerings_placement_reaches_the_resolved_model():
    toleration = {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    entry = {"provider": "cluster-2", "provider_node_selector": {"pool": "real"}, "provider_tolerations": [toleration]}
    model = federation_model(inventory(catamaran_peerings=[entry]), ["h1", "h2"])
    peering = model["peerings"]["cluster-1"][0]
    assert peering["provider_node_selector"] == {"pool": "real"}
    assert peering["provider_tolerations"] == [toleration]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"provider_node_selector": ["pool=real"]}, "provider_node_selector must be a mapping"),
        ({"provider_tolerations": {"key": "k"}}, "provider_tolerations must be a list of mappings"),
    ],
)
def test_a_malformed_placement_is_refused_naming_the_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2", **entry}]), ["h1", "h2"])


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"operator": "Equal"}, r"provider_tolerations\[0\]: operator Equal needs a key"),
        ({"key": "k", "operator": "Exists", "value": "v"}, r"operator Exists takes no value"),
        ({"key": "k", "effect": "Sometimes"}, r"effect must be one of"),
    ],
)
def test_the_peering_module_refuses_a_bad_toleration_before_any_change(toleration, message):
    params = {"consumer_id": "c1", "provider_id": "p1", "provider_tolerations": [toleration]}
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(params)


def test_module_tolerations_are_written_as_the_api_spells_them():
    written = api_toleration(
        {"key": "k", "operator": "Exists", "value": None, "effect": "NoExecute", "toleration_seconds": 30}
    )
    assert written == {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}


# -- resource reflection -------------------------------------------------------------------------------------------


def peering_params(**extra):
    return {"consumer_id": "c1", "provider_id": "p1", **extra}


def foreign_spec(params):
    peering = Peering(None, None, None, "c1", "p1")
    return peering.foreign_cluster(params, {})["spec"]


def module_argspec(reflection):
    """The module's own argument spec applied to O(reflection), as AnsibleModule does before main's body."""
    validator = ArgumentSpecValidator({"reflection": {"type": "dict", "options": reflection_options()}})
    return validator.validate({"reflection": reflection})


def module_reflection(**given):
    """O(reflection) as the module's body gets it: every suboption present, unset ones None."""
    result = module_argspec(given)
    assert not result.error_messages
    return result.validated_parameters["reflection"]


def test_reflection_settings_become_the_foreign_clusters_spec_in_camel_case():
    reflection = module_reflection(
        kinds={
            "config_maps": {"workers": 8},
            "secrets": {"policy": "AllowList"},
            "endpoint_slices": {"policy": "DenyList", "workers": 0},
            "service_account_tokens": {"workers": 1},
            "persistent_volume_claims": {"policy": "AllowList", "workers": 3},
        },
        filtered_labels=["billing.example.com/", "team"],
        filtered_annotations=[],
        ingress_class_name="nginx",
        storage_class_name="fast-ssd",
    )
    Peering.validate(peering_params(reflection=reflection))
    assert foreign_spec({"reflection": reflection})["reflection"] == {
        "kinds": {
            "configMaps": {"workers": 8},
            "secrets": {"policy": "AllowList"},
            "endpointSlices": {"policy": "DenyList", "workers": 0},
            "serviceAccountTokens": {"workers": 1},
            "persistentVolumeClaims": {"policy": "AllowList", "workers": 3},
        },
        "filteredLabels": ["billing.example.com/", "team"],
        "filteredAnnotations": [],  # kept: filter no key, unlike unset (the controller's defaults)
        "ingressClassName": "nginx",
        "storageClassName": "fast-ssd",
    }


@pytest.mark.parametrize(
    "reflection",
    [
        None,
        {},
        module_reflection(),
        module_reflection(ingress_class_name=""),
        module_reflection(storage_class_name=""),
        module_reflection(kinds={"persistent_volume_claims": {}}),
    ],
)
def test_unset_reflection_settings_leave_the_spec_without_reflection(reflection):
    Peering.validate(peering_params(reflection=reflection))
    assert "reflection" not in foreign_spec({"reflection": reflection})


@pytest.mark.parametrize(
    ("reflection", "message"),
    [
        ({"kinds": {"pods": {"workers": 1}}}, r"reflection\.kinds: unknown pods \(allowed: config_maps, secrets, "),
        (
            {"kinds": {"configMaps": {}}},
            r"unknown configMaps .*options are snake_case: configMaps \(write config_maps\)",
        ),
        (
            {"kinds": {"secrets": {"policy": "Deny"}}},
            r"reflection\.kinds\.secrets\.policy must be one of DenyList, Allow",
        ),
        (
            {"kinds": {"services": {"workers": 65}}},
            r"reflection\.kinds\.services\.workers must be an integer from 0 to 64, got 65",
        ),
        ({"kinds": {"ingresses": {"workers": -1}}}, r"reflection\.kinds\.ingresses\.workers .* got -1"),
        ({"kinds": {"config_maps": {"workers": True}}}, r"reflection\.kinds\.config_maps\.workers .* got True"),
        ({"kinds": {"config_maps": {"workers": "4"}}}, r"reflection\.kinds\.config_maps\.workers .* got '4'"),
        (
            {"kinds": {"service_account_tokens": {"policy": "AllowList"}}},
            r"service_account_tokens: unknown policy \(allowed: workers\)",
        ),
        ({"kinds": {"secrets": "AllowList"}}, r"reflection\.kinds\.secrets must be a mapping"),
        ({"kinds": ["secrets"]}, r"reflection\.kinds must be a mapping"),
        ({"filtered_labels": "team"}, r"reflection\.filtered_labels must be a list"),
        ({"filtered_annotations": ["a/", ""]}, r"reflection\.filtered_annotations\[1\] must be a non-empty string"),
        ({"ingress_class_name": 7}, r"reflection\.ingress_class_name must be a string"),
        ({"ingressClassName": "nginx"}, r"reflection: unknown ingressClassName .*\(write ingress_class_name\)"),
        ({"storage_class_name": ["fast"]}, r"reflection\.storage_class_name must be a string, got \['fast'\]"),
        ({"storageClassName": "fast"}, r"reflection: unknown storageClassName .*\(write storage_class_name\)"),
        (
            {"kinds": {"persistentVolumeClaims": {}}},
            r"unknown persistentVolumeClaims .*\(write persistent_volume_claims\)",
        ),
        (
            {"kinds": {"persistent_volume_claims": {"policy": "allow"}}},
            r"reflection\.kinds\.persistent_volume_claims\.policy must be one of DenyList, AllowList, got 'allow'",
        ),
        (
            {"kinds": {"persistent_volume_claims": {"workers": 65}}},
            r"reflection\.kinds\.persistent_volume_claims\.workers must be an integer from 0 to 64, got 65",
        ),
        (["kinds"], r"reflection must be a mapping"),
    ],
)
def test_the_peering_module_refuses_bad_reflection_settings_naming_the_field(reflection, message):
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(peering_params(reflection=reflection))


@pytest.mark.parametrize(
    ("reflection", "message"),
    [
        ({"kinds": {"pods": {}}}, "reflection.kinds.pods. Supported parameters include: config_maps,"),
        (
            {"kinds": {"secrets": {"policy": "Allow"}}},
            "policy must be one of: DenyList, AllowList, got: Allow found in ",
        ),
        (
            {"kinds": {"secrets": {"workers": "many"}}},
            "'workers' is of type str found in 'reflection -> kinds -> secrets'",
        ),
        (
            {"kinds": {"persistent_volume_claims": {"policy": "Allow"}}},
            "policy must be one of: DenyList, AllowList, got: Allow found in reflection -> kinds -> "
            "persistent_volume_claims",
        ),
        ({"storageClassName": "fast"}, "reflection.storageClassName. Supported parameters include:"),
    ],
)
def test_the_modules_argument_spec_already_refuses_unknown_kinds_and_policies(reflection, message):
    assert message in " ".join(module_argspec(reflection).error_messages)


@pytest.mark.parametrize(("workers", "accepted"), [(-1, False), (0, True), (64, True), (65, False)])
def test_workers_are_held_to_0_to_64_after_the_argument_spec(workers, accepted):
    params = peering_params(reflection=module_reflection(kinds={"services": {"workers": workers}}))
    if accepted:
        Peering.validate(params)
        assert foreign_spec(params)["reflection"] == {"kinds": {"services": {"workers": workers}}}
    else:
        with pytest.raises(
            InvalidInput, match=r"^reflection\.kinds\.services\.workers must be an integer from 0 to 64"
        ):
            Peering.validate(params)


def test_a_peerings_reflection_overrides_its_providers_key_by_key():
    hosts = inventory(
        catamaran_peerings=[
            {
                "provider": "cluster-2",
                "reflection": {
                    "kinds": {"secrets": {"policy": "AllowList"}, "ingresses": {"workers": 2}},
                    "filtered_labels": ["team"],
                },
            }
        ]
    )
    hosts["h2"]["catamaran_provider_reflection"] = {
        "kinds": {
            "ingresses": {"policy": "AllowList", "workers": 0},
            "services": {"workers": 1},
            "persistent_volume_claims": {"workers": 1},
        },
        "filtered_labels": ["a/", "b/"],
        "ingress_class_name": "nginx",
        "storage_class_name": "fast-ssd",
    }
    (peering,) = federation_model(hosts, ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering["reflection"] == {
        "kinds": {
            "ingresses": {"policy": "AllowList", "workers": 2},
            "services": {"workers": 1},
            "persistent_volume_claims": {"workers": 1},
            "secrets": {"policy": "AllowList"},
        },
        "filtered_labels": ["team"],
        "ingress_class_name": "nginx",
        "storage_class_name": "fast-ssd",
    }


def test_without_reflection_settings_the_model_carries_an_empty_mapping():
    model = federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2"}]), ["h1", "h2"])
    assert model["peerings"]["cluster-1"][0]["reflection"] == {}


@pytest.mark.parametrize(
    ("where", "settings", "message"),
    [
        ("peering", {"kinds": {"pods": {}}}, r"host h1: catamaran_peerings\[0\]: reflection\.kinds: unknown pods"),
        (
            "peering",
            {"kinds": {"secrets": {"policy": "Allow"}}},
            r"catamaran_peerings\[0\]: reflection\.kinds\.secrets\.policy",
        ),
        (
            "provider",
            {"kinds": {"secrets": {"workers": 100}}},
            r"host h2: catamaran_provider_reflection\.kinds\.secrets\.workers",
        ),
        (
            "provider",
            {"storage_class_name": 7},
            r"host h2: catamaran_provider_reflection\.storage_class_name must be a string",
        ),
        (
            "peering",
            {"kinds": {"persistent_volume_claims": {"workers": -1}}},
            r"catamaran_peerings\[0\]: reflection\.kinds\.persistent_volume_claims\.workers .* got -1",
        ),
    ],
)
def test_bad_reflection_settings_in_the_inventory_name_the_host_and_field(where, settings, message):
    if where == "peering":
        hosts = inventory(catamaran_peerings=[{"provider": "cluster-2", "reflection": settings}])
    else:
        hosts = inventory(catamaran_peerings=[{"provider": "cluster-2"}])
        hosts["h2"]["catamaran_provider_reflection"] = settings
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(hosts, ["h1", "h2"])


def test_the_tenant_reflects_with_exactly_the_verbs_reflection_uses():
    (workload,) = [r for r in provider_cluster_roles() if r["metadata"]["name"] == TENANT_WORKLOAD_CLUSTER_ROLE]
    granted = {}
    for rule in workload["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    reflected = [
        ("", "configmaps"),
        ("", "secrets"),
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
        ("networking.k8s.io", "ingresses"),
        ("", "persistentvolumeclaims"),
    ]
    for key in reflected:
        assert granted[key] == {"get", "list", "watch", "create", "update", "delete"}, key
    # The provider's volumes are its own: the tenant neither reads nor makes PersistentVolumes or classes.
    assert ("", "persistentvolumes") not in granted
    assert ("storage.k8s.io", "storageclasses") not in granted


# -- the tenant's terms and input checks (issue 12) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"node_labels": {"bad key!": "x"}}, "node_labels: label key 'bad key!'"),
        ({"node_labels": {"Example.com/zone": "x"}}, "the prefix 'Example.com' must be a DNS-1123 subdomain"),
        ({"node_labels": {"x" * 64: "v"}}, "the name 'x{64}' must be at most 63"),
        ({"node_labels": {"tier": "-gold"}}, "node_labels.tier: label value '-gold'"),
        ({"node_taints": [{"key": "bad key", "effect": "NoSchedule"}]}, r"node_taints\[0\]: taint key 'bad key'"),
        (
            {"node_taints": [{"key": "k", "value": "a b", "effect": "NoSchedule"}]},
            r"node_taints\[0\]\.value: taint value 'a b' must",
        ),
        ({"node_taints": [{"key": "k", "effect": "Never"}]}, r"node_taints\[0\].effect must be one of NoSchedule"),
        (
            {"node_taints": [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}]},
            r"node_taints\[1\]: a taint with key k and effect NoSchedule is listed before",
        ),
        (
            {"node_taints": [{"key": "virtual-node.catamaran.io/not-allowed", "effect": "NoExecute"}]},
            "the virtual kubelet sets the taint virtual-node.catamaran.io/not-allowed itself",
        ),
        ({"provider_node_selector": {"pool/": "real"}}, "provider_node_selector: label key 'pool/'"),
        ({"pod_cidr_remap": "10.200.0.0"}, "pod_cidr_remap: '10.200.0.0' is not a CIDR"),
        ({"pod_cidr_remap": "banana/16"}, "pod_cidr_remap: 'banana/16' is not a CIDR"),
        ({"health_check": {"period_seconds": 0}}, "health_check.period_seconds must be a positive integer, got 0"),
        ({"health_check": {"failure_threshold": -1}}, "health_check.failure_threshold must be a positive"),
        ({"wait_timeout": 0}, "wait_timeout must be a positive integer, got 0"),
        ({"drain_timeout": -5}, "drain_timeout must be a positive integer, got -5"),
        ({"provider": {"request_timeout": 0}}, "provider.request_timeout must be a positive integer"),
        ({"pod_security": "root"}, "pod_security must be one of restricted, baseline, privileged, got 'root'"),
        ({"credential_lifetime": 599}, "credential_lifetime must be an integer of at least 600 seconds"),
        ({"credential_lifetime": 0}, "credential_lifetime must be an integer of at least 600 seconds"),
        ({"force": True}, "force applies only to state=absent"),
        ({"state": "absent", "rotate_credential": True}, "rotate_credential applies only to state=present"),
    ],
)
def test_the_peering_module_refuses_bad_input_naming_the_field(extra, message):
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(peering_params(**extra))


def test_valid_labels_cidrs_and_terms_pass():
    Peering.validate(
        peering_params(
            node_labels={"topology.kubernetes.io/region": "region-b", "tier": "", "a_b.c": "X-1"},
            provider_node_selector={"catamaran.io/lab-node-kind": "real"},
            pod_cidr_remap="10.200.0.0/16",
            health_check={"period_seconds": 5, "timeout_seconds": 2, "failure_threshold": 3},
            pod_security="privileged",
            credential_lifetime=600,
            state="absent",
            force=True,
        )
    )


@pytest.mark.parametrize(
    ("remap", "provider", "message"),
    [
        ("10.200.0.0/24", ["10.244.0.0/16"], "smaller than the provider's pod range 10.244.0.0/16 .a prefix of /16"),
        ("10.200.0.0/17", ["10.244.0.0/24", "10.245.0.0/16"], "smaller than the provider's pod range 10.245.0.0/16"),
        ("fd00::/64", ["10.244.0.0/16"], "fd00::/64 is IPv6 but the provider's pod range 10.244.0.0/16 is IPv4"),
    ],
)
def test_a_remap_range_smaller_than_the_providers_pod_range_is_refused(remap, provider, message):
    with pytest.raises(InvalidSetting, match=message):
        remap_covers(remap, provider, "pod_cidr_remap")


def test_a_remap_range_as_large_or_larger_than_the_providers_passes():
    remap_covers("10.200.0.0/16", ["10.244.0.0/16"], "pod_cidr_remap")
    remap_covers("10.192.0.0/12", ["10.244.0.0/16", "10.245.3.0/24"], "pod_cidr_remap")


def test_node_pod_ranges_are_covered_per_family_as_the_provider_reports_them():
    ranges = ["10.244.0.0/24", "10.244.1.0/24", "10.244.3.0/24", "fd00:1::/64"]
    assert covering_networks(ranges) == ["10.244.0.0/22", "fd00:1::/64"]


def test_node_taints_become_the_foreign_clusters_spec_without_unset_values():
    taints = [
        {"key": "example.com/costly", "value": "true", "effect": "NoSchedule"},
        {"key": "example.com/costly", "value": None, "effect": "NoExecute"},  # the argument spec's unset value
    ]
    Peering.validate(peering_params(node_taints=taints))
    assert foreign_spec(peering_params(node_taints=taints))["nodeTaints"] == [
        {"key": "example.com/costly", "value": "true", "effect": "NoSchedule"},
        {"key": "example.com/costly", "effect": "NoExecute"},
    ]
    # None set: no field, so applying removes one an earlier run wrote.
    assert "nodeTaints" not in foreign_spec(peering_params(node_taints=[]))


def test_the_peerings_report_shows_the_node_taints():
    class Cluster:
        def get(self, *args):
            return {"kind": "CustomResourceDefinition"}

        def list(self, api_version, kind, namespace=None, labels=None):
            if kind == "Node":
                return []
            taint = {"key": "example.com/costly", "effect": "NoSchedule"}
            return [
                {"metadata": {"name": "p1"}, "spec": {"clusterID": "p1", "nodeTaints": [taint]}},
                {"metadata": {"name": "p2"}, "spec": {"clusterID": "p2"}},
            ]

    first, second = peerings_report(Cluster())
    assert first["node_taints"] == [{"key": "example.com/costly", "effect": "NoSchedule"}]
    assert second["node_taints"] == []


def test_the_resource_offer_carries_the_tenants_terms_with_defaults():
    peering = Peering(None, None, None, "c1", "p1")
    spec = peering.resource_offer(peering_params())["spec"]
    expected = {
        "clusterID": "p1",
        "podSecurity": "restricted",
        "sharingPercentage": 90,
        "credentialLifetimeSeconds": 86400,
    }
    assert {key: spec[key] for key in expected} == expected  # the other terms: tests/unit/test_peering_terms.py
    params = peering_params(pod_security="baseline", sharing_percentage=40, credential_lifetime=3600)
    spec = peering.resource_offer(params)["spec"]
    assert (spec["podSecurity"], spec["sharingPercentage"], spec["credentialLifetimeSeconds"]) == ("baseline", 40, 3600)
    assert foreign_spec(params)["sharingPercentage"] == 40  # the consumer keeps its copy for the virtual node


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"pod_security": "root"}, "pod_security must be one of"),
        ({"sharing": 5}, "sharing. Supported parameters include"),
        ({"health_check": {"period": 5}}, "health_check.period. Supported parameters include"),
        ({"credential_lifetime": "a day"}, "credential_lifetime"),
        ({"node_taints": [{"key": "k"}]}, "missing required arguments: effect found in node_taints"),
        (
            {"node_taints": [{"key": "k", "effect": "Never"}]},
            "effect must be one of: NoSchedule, PreferNoSchedule, NoExecute, got: Never",
        ),
        ({"node_taints": [{"key": "k", "effect": "NoSchedule", "operator": "Exists"}]}, "node_taints.operator."),
    ],
)
def test_the_modules_argument_spec_refuses_unknown_options_and_levels(given, message):
    required = {"consumer": {"kubeconfig": "/k1"}, "provider": {"kubeconfig": "/k2"}}
    result = ArgumentSpecValidator(argument_spec()).validate(
        dict(required, consumer_id="c1", provider_id="p1", **given)
    )
    assert any(message in error for error in result.error_messages), result.error_messages


class FakeModule:
    """Connects like CatamaranModule, except that the clusters named in `down` cannot be reached."""

    def __init__(self, down):
        self.down = down

    def connect(self, label, options):
        if label in self.down:
            raise ClusterUnreachable(f"{label}: cannot reach https://127.0.0.1:1: Connection refused")
        return f"connection to {label}"


def unpeer_params(force):
    return peering_params(consumer={}, provider={}, state="absent", force=force)


def test_without_force_an_unreachable_cluster_fails_naming_it():
    with pytest.raises(ClusterUnreachable, match=r"^p1: cannot reach"):
        connect_both(FakeModule({"p1"}), unpeer_params(False), "c1", "p1")


@pytest.mark.parametrize(("down", "kept"), [({"p1"}, "consumer"), ({"c1"}, "provider")])
def test_with_force_the_reachable_side_is_enough(down, kept):
    peering = connect_both(FakeModule(down), unpeer_params(True), "c1", "p1")
    assert getattr(peering, kept) is not None
    assert getattr(peering, "provider" if kept == "consumer" else "consumer") is None


def test_with_force_both_sides_down_is_still_an_error():
    with pytest.raises(ClusterError, match="neither cluster can be reached"):
        connect_both(FakeModule({"c1", "p1"}), unpeer_params(True), "c1", "p1")


def test_peerings_carry_pod_security_and_credential_lifetime_with_defaults():
    model = federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2"}]), ["h1", "h2"])
    (peering,) = model["peerings"]["cluster-1"]
    assert (peering["pod_security"], peering["credential_lifetime"]) == ("restricted", 86400)
    assert model["clusters"]["cluster-2"]["allowed_pod_security"] == ["restricted", "baseline"]


def test_privileged_only_when_the_providers_inventory_allows_it():
    entry = {"provider": "cluster-2", "pod_security": "privileged", "credential_lifetime": 3600}
    with pytest.raises(
        AnsibleFilterError,
        match=r"host h1: catamaran_peerings\[0\]: pod_security privileged is not allowed by provider cluster-2 "
        r"\(host h2: catamaran_allowed_pod_security is restricted, baseline\)",
    ):
        federation_model(inventory(catamaran_peerings=[entry]), ["h1", "h2"])
    variables = inventory(catamaran_peerings=[entry])
    variables["h2"]["catamaran_allowed_pod_security"] = ["privileged", "restricted"]
    (peering,) = federation_model(variables, ["h1", "h2"])["peerings"]["cluster-1"]
    assert (peering["pod_security"], peering["credential_lifetime"]) == ("privileged", 3600)


def test_a_peerings_node_taints_reach_the_resolved_model():
    taints = [{"key": "example.com/costly", "value": "true", "effect": "NoSchedule"}]
    entry = {"provider": "cluster-2", "node_taints": taints}
    (peering,) = federation_model(inventory(catamaran_peerings=[entry]), ["h1", "h2"])["peerings"]["cluster-1"]
    assert peering["node_taints"] == taints


def test_a_provider_can_lend_less_than_the_default():
    variables = inventory(catamaran_peerings=[{"provider": "cluster-2", "pod_security": "baseline"}])
    variables["h2"]["catamaran_allowed_pod_security"] = ["restricted"]
    with pytest.raises(AnsibleFilterError, match="pod_security baseline is not allowed by provider cluster-2"):
        federation_model(variables, ["h1", "h2"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"pod_security": "root"}, r"catamaran_peerings\[0\]: pod_security must be one of"),
        ({"credential_lifetime": 100}, r"catamaran_peerings\[0\]: credential_lifetime must be an integer of at least"),
        ({"node_labels": {"bad key": "x"}}, r"catamaran_peerings\[0\]: node_labels: label key 'bad key'"),
        ({"node_labels": {"tier": 5}}, r"node_labels.tier: label value must be a string, got 5"),
        ({"provider_node_selector": {"pool": "a b"}}, r"provider_node_selector.pool: label value 'a b'"),
        ({"pod_cidr_remap": "10.200.0.0"}, r"catamaran_peerings\[0\]: pod_cidr_remap: '10.200.0.0' is not a CIDR"),
        ({"health_check": {"period_seconds": 0}}, r"health_check.period_seconds must be a positive integer, got 0"),
        ({"health_check": {"period": 5}}, r"catamaran_peerings\[0\]: health_check: unknown period"),
        ({"provider_tolerations": [{"key": "k", "efect": "NoSchedule"}]}, r"provider_tolerations\[0\]: unknown keys"),
        (
            {"node_taints": [{"key": "k", "efect": "NoSchedule"}]},
            r"catamaran_peerings\[0\]: node_taints\[0\]: unknown efect \(allowed: key, value, effect\)",
        ),
        ({"node_taints": {"key": "k"}}, r"catamaran_peerings\[0\]: node_taints must be a list of taints"),
        ({"node_taints": [{"key": "k", "effect": "NoSchedule"}] * 2}, r"node_taints\[1\]: a taint with key k"),
    ],
)
def test_bad_peering_settings_in_the_inventory_name_the_host_and_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(catamaran_peerings=[{"provider": "cluster-2", **entry}]), ["h1", "h2"])


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"catamaran_allowed_pod_security": ["root"]}, r"host h1: catamaran_allowed_pod_security\[0\] must be one of"),
        ({"catamaran_allowed_pod_security": []}, r"host h1: catamaran_allowed_pod_security must be a non-empty list"),
        ({"catamaran_cluster_labels": {"Region!": "a"}}, r"host h1: catamaran_cluster_labels: label key 'Region!'"),
        (
            {
                "catamaran_peerings": [{"provider": "cluster-2"}],
                "catamaran_offloaded_namespaces": [{"namespace": "demo", "x": 1}],
            },
            r"catamaran_offloaded_namespaces\[0\]: unknown keys \['x'\]",
        ),
    ],
)
def test_bad_cluster_settings_name_the_host_and_field(variables, message):
    with pytest.raises(AnsibleFilterError, match=message):
        federation_model(inventory(**variables), ["h1", "h2"])


def test_a_field_is_served_only_when_a_version_of_the_served_crd_declares_it():
    from ansible_collections.catamaran.federation.plugins.module_utils.crds import serves_field

    def crd(networking: dict) -> dict:
        schema = {"properties": {"spec": {"properties": {"networking": {"properties": networking}}}}}
        return {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": schema}}]}}

    class Served:
        def __init__(self, served):
            self.served = served

        def get(self, api_version, kind, name, namespace=None):
            assert (api_version, kind) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            return self.served

    path = ("spec", "networking", "podCIDRs")
    assert serves_field(Served(crd({"podCIDRs": {"type": "array"}})), "foreignclusters.core.catamaran.io", path)
    assert not serves_field(Served(crd({"mode": {"type": "string"}})), "foreignclusters.core.catamaran.io", path)
    assert not serves_field(Served(None), "foreignclusters.core.catamaran.io", path)  # no CRD yet
