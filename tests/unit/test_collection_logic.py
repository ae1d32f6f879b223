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
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, api_toleration
from ansible_collections.catamaran.federation.plugins.module_utils.tenancy import provider_cluster_roles
from ansible_collections.catamaran.federation.plugins.modules.peering import reflection_options


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
    ],
)
def test_invalid_inventories_name_the_host_and_field(cluster_1, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        federation_model(inventory(**cluster_1), ["h1", "h2"])


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
