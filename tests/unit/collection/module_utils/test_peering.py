"""The peering module's logic (plugins/module_utils/peering.py): tolerations, reflection settings, node taints,
terms, and unpeering with force.
"""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.kube import ClusterError, ClusterUnreachable
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, api_toleration, connect_both

from tests.unit.collection.reflection_argspec import module_argspec


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


def test_the_resource_offer_carries_the_tenants_terms_with_defaults():
    peering = Peering(None, None, None, "c1", "p1")
    spec = peering.resource_offer(peering_params())["spec"]
    expected = {
        "clusterID": "p1",
        "podSecurity": "restricted",
        "sharingPercentage": 90,
        "credentialLifetimeSeconds": 86400,
    }
    assert {key: spec[key] for key in expected} == expected  # the other terms: test_peering_terms.py, beside this
    params = peering_params(pod_security="baseline", sharing_percentage=40, credential_lifetime=3600)
    spec = peering.resource_offer(params)["spec"]
    assert (spec["podSecurity"], spec["sharingPercentage"], spec["credentialLifetimeSeconds"]) == ("baseline", 40, 3600)
    assert foreign_spec(params)["sharingPercentage"] == 40  # the consumer keeps its copy for the virtual node


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


class Reached:
    """A connected cluster as connect_both sees it: how its certificate was checked and the CA known for it."""

    def __init__(self, label, verifies_tls=True, ca_data="Q0E="):
        self.label, self.verifies_tls, self.ca_data = label, verifies_tls, ca_data
        self.source = f"kubeconfig /k/{label}, context {label}"


class ReachingModule:
    def __init__(self, **clusters):
        self.clusters = clusters

    def connect(self, label, options):
        return self.clusters[label]


@pytest.mark.parametrize(
    ("provider", "refused"),
    [
        (Reached("p1", verifies_tls=False, ca_data=None), True),  # nothing the virtual kubelet could verify with
        (Reached("p1", verifies_tls=False), False),  # this run skips the check; the virtual kubelet has the CA
        (Reached("p1", ca_data=None), False),  # verified by the system's trust, as the virtual kubelet will be
    ],
)
def test_a_provider_reached_without_verification_needs_a_ca_for_the_virtual_kubelet(provider, refused):
    module = ReachingModule(c1=Reached("c1"), p1=provider)
    params = peering_params(consumer={}, provider={}, state="present")
    if not refused:
        assert connect_both(module, params, "c1", "p1").provider is provider
        return
    with pytest.raises(ClusterError, match=r"^p1: kubeconfig /k/p1, context p1 skips certificate verification and"):
        connect_both(module, params, "c1", "p1")
    # Un-peering needs no CA for anyone.
    assert connect_both(module, unpeer_params(False), "c1", "p1").provider is provider
