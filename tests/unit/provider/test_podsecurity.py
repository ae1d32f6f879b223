"""The provider's tenant policy: Pod Security Standards per level, the tenant's quota and its reservations."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest

from catamaran.constants import DEFAULT_POD_SECURITY_LEVEL, DEFAULT_SHARING_PERCENTAGE
from catamaran.provider import podsecurity, quota
from catamaran.provider.offers import Placement, TenantTerms
from catamaran.provider.shadowpods import pod_from_shadow
from catamaran.provider.twins import pod_security_labels, reserved_name
from tests.integration.manifests import container, deployment, real_pod

RESTRICTED_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def compliant_spec() -> dict:
    return {
        "containers": [{"name": "app", "image": "x", "securityContext": copy.deepcopy(RESTRICTED_CONTEXT)}],
        "volumes": [{"name": "config", "configMap": {"name": "c"}}, {"name": "scratch", "emptyDir": {}}],
    }


def with_container_context(**context) -> dict:
    spec = compliant_spec()
    spec["containers"][0]["securityContext"].update(context)
    return spec


def test_a_restricted_pod_passes_every_level():
    for level in ("restricted", "baseline", "privileged"):
        assert podsecurity.violations(compliant_spec(), level) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            with_container_context(privileged=True),
            'privileged (container "app" must not set securityContext.privileged=true)',
        ),
        (
            with_container_context(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN", "CHOWN"]}),
            'non-default capabilities (container "app" must not include "SYS_ADMIN" in '
            "securityContext.capabilities.add)",
        ),
        (
            {**compliant_spec(), "volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
            'hostPath volumes ("root")',
        ),
        (
            {**compliant_spec(), "hostNetwork": True, "hostPID": True},
            "host namespaces (hostNetwork=true, hostPID=true)",
        ),
        (
            with_container_context(procMount="Unmasked"),
            'procMount (container "app" must not set securityContext.procMount to anything but "Default")',
        ),
        (
            with_container_context(seLinuxOptions={"type": "spc_t"}),
            "seLinuxOptions (container \"app\" must not set securityContext.seLinuxOptions type 'spc_t')",
        ),
        (
            {**compliant_spec(), "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
            'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
        ),
        (
            with_container_context(appArmorProfile={"type": "Unconfined"}),
            'appArmorProfile (pod or container "app" must not set appArmorProfile.type to "Unconfined")',
        ),
        (
            {**compliant_spec(), "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
            "forbidden sysctls (kernel.msgmax)",
        ),
        (
            with_container_context(windowsOptions={"hostProcess": True}),
            'hostProcess (pod or container "app" must not set securityContext.windowsOptions.hostProcess=true)',
        ),
    ],
)
def test_baseline_violations_are_named_and_privileged_allows_them(spec, expected):
    assert expected in podsecurity.violations(spec, "baseline")
    assert expected in podsecurity.violations(spec, "restricted")
    assert podsecurity.violations(spec, "privileged") == []


def test_host_ports_of_init_and_ephemeral_containers_count_too():
    spec = compliant_spec()
    spec["initContainers"] = [{"name": "init", "ports": [{"containerPort": 80, "hostPort": 8080}]}]
    spec["ephemeralContainers"] = [{"name": "debug", "securityContext": {"privileged": True}}]
    found = podsecurity.violations(spec, "baseline")
    assert 'hostPort (container "init" uses hostPort 8080)' in found
    assert 'privileged (container "debug" must not set securityContext.privileged=true)' in found


def test_baseline_allows_its_default_capabilities_and_unconfined_apparmor_annotation_is_refused():
    spec = with_container_context(capabilities={"add": ["CHOWN", "NET_BIND_SERVICE"]})
    assert podsecurity.violations(spec, "baseline") == []
    annotations = {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
    assert podsecurity.violations(compliant_spec(), "baseline", annotations) == [
        'AppArmor profile (annotation "container.apparmor.security.beta.kubernetes.io/app"="unconfined")'
    ]


def test_restricted_adds_its_checks_each_naming_the_container():
    spec = {"containers": [{"name": "app", "image": "x"}], "volumes": [{"name": "nfs", "nfs": {"server": "s"}}]}
    assert podsecurity.violations(spec, "baseline") == []
    assert podsecurity.violations(spec, "restricted") == [
        'restricted volume types (volume "nfs" uses nfs)',
        'allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false)',
        'runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true)',
        'seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
        '"Localhost")',
        'unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"])',
    ]


def test_restricted_takes_pod_level_settings_and_container_overrides():
    pod_level = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "Localhost"}},
        "containers": [
            {"name": "a", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
    }
    assert podsecurity.violations(pod_level, "restricted") == []
    overridden = copy.deepcopy(pod_level)
    overridden["containers"][0]["securityContext"].update(runAsNonRoot=False, runAsUser=0)
    assert podsecurity.violations(overridden, "restricted") == [
        'runAsNonRoot != true (pod or container "a" must set securityContext.runAsNonRoot=true)',
        'runAsUser=0 (pod or container "a" must not set runAsUser=0)',
    ]
    added = with_container_context(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]})
    assert podsecurity.violations(added, "restricted") == [
        'unrestricted capabilities (container "app" must not include "CHOWN" in securityContext.capabilities.add; '
        'only "NET_BIND_SERVICE" is allowed)'
    ]


def test_an_unknown_level_is_checked_as_restricted():
    assert podsecurity.violations({"containers": [{"name": "a"}]}, "lenient") == podsecurity.violations(
        {"containers": [{"name": "a"}]}, "restricted"
    )


def test_the_stricter_level_applies_until_a_twin_is_relabelled():
    assert podsecurity.stricter("privileged", "restricted") == "restricted"
    assert podsecurity.stricter("restricted", "privileged") == "restricted"
    assert podsecurity.stricter("privileged", "baseline") == "baseline"
    assert podsecurity.stricter("baseline", None) == "baseline"
    assert podsecurity.stricter("privileged", "not-a-level") == "privileged"


def test_the_integration_tests_pods_meet_restricted():
    for spec in (
        deployment("web", 1)["spec"]["template"]["spec"],
        {"containers": [container(cpu="10m", memory="16Mi")]},
        real_pod("p", ["true"])["spec"],
    ):
        assert podsecurity.violations(spec, "restricted") == []


def test_terms_default_to_restricted_and_the_default_share():
    terms = TenantTerms.from_offer_spec({"clusterID": "p"})
    assert (terms.pod_security, terms.sharing_percentage) == (DEFAULT_POD_SECURITY_LEVEL, DEFAULT_SHARING_PERCENTAGE)
    assert terms == TenantTerms()
    given = TenantTerms.from_offer_spec(
        {"podSecurity": "privileged", "sharingPercentage": 50, "nodeSelector": {"k": "v"}}
    )
    assert (given.pod_security, given.sharing_percentage, given.placement) == (
        "privileged",
        50,
        Placement(node_selector=(("k", "v"),)),
    )


def test_quota_is_the_share_of_the_allocatable_rounded_down():
    cap = quota.tenant_quota([{"cpu": "3", "pods": "11", "memory": "1001"}, {"cpu": "500m", "pods": "10"}], 50)
    assert cap == {"cpu": Fraction(7, 4), "pods": Fraction(10), "memory": Fraction(500)}
    assert quota.formatted(cap) == {"cpu": "1750m", "memory": "500", "pods": "10"}


def test_excess_names_each_resource_with_its_numbers():
    cap = {"cpu": Fraction(1), "pods": Fraction(10)}
    used = {"cpu": Fraction(9, 10), "pods": Fraction(3)}
    wanted = quota.pod_usage({"cpu": Fraction(1, 5), "nvidia.com/gpu": Fraction(1)})
    assert quota.excess(cap, used, wanted) == [
        "cpu (requested 200m, in use 900m, quota 1)",
        "nvidia.com/gpu (requested 1, in use 0, quota 0)",
    ]
    assert quota.excess(cap, used, quota.pod_usage({"cpu": Fraction(1, 10)})) == []


def test_reservations_stop_concurrent_admissions_from_overshooting():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(1), "pods": Fraction(10)}
    half = {"cpu": Fraction(1, 2)}
    assert ledger.admit(("t", "a"), "c", half, cap) == []
    assert ledger.admit(("t", "b"), "c", half, cap) == []
    # Neither pod is visible yet; the third would take the tenant past its quota.
    assert ledger.admit(("t", "c"), "c", half, cap) == ["cpu (requested 500m, in use 1, quota 1)"]
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(2)}
    # Another tenant's quota is its own.
    assert ledger.admit(("u", "a"), "other", half, cap) == []

    ledger.observe(("t", "a"), "c", half)  # the informer sees a pod: its reservation is settled, not counted twice
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(2)}
    ledger.release(("t", "b"))  # its creation failed
    assert ledger.used("c") == {"cpu": Fraction(1, 2), "pods": Fraction(1)}
    assert ledger.admit(("t", "c"), "c", half, cap) == []
    ledger.observe(("t", "a"), None, None)  # gone
    ledger.observe(("t", "c"), "c", half)
    assert ledger.used("c") == {"cpu": Fraction(1, 2), "pods": Fraction(1)}


def test_a_pod_being_replaced_does_not_count_against_its_replacement():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(1), "pods": Fraction(1)}
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1)})
    assert ledger.admit(("t", "a"), "c", {"cpu": Fraction(1)}, cap) == []
    assert ledger.admit(("t", "b"), "c", {"cpu": Fraction(0)}, cap) == ["pods (requested 1, in use 1, quota 1)"]


def test_the_manager_says_whose_pod_it_is_not_the_shadowpod():
    shadow = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "metadata": {"name": "p", "namespace": "ns-c", "uid": "u"},
        "spec": {"pod": {"metadata": {"labels": {"app": "x", "catamaran.io/origin-cluster-id": "someone-else"}}}},
    }
    shadow["spec"]["pod"]["spec"] = compliant_spec()
    labels = pod_from_shadow(shadow, Placement(), "c")["metadata"]["labels"]
    assert labels == {"app": "x", "catamaran.io/origin-cluster-id": "c", "catamaran.io/managed-by": "catamaran"}


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("default", True),
        ("kube-system", True),
        ("kube-anything", True),
        ("catamaran-system", True),
        ("catamaran-fabric", True),  # the fabric's keys: a consumer whose id is `fabric` gets another twin name
        ("catamaran-tenant-cluster-2", True),
        ("shop-cluster-1", False),
        ("kubeflow", False),
        ("catamaran-demo", False),
    ],
)
def test_reserved_twin_names(name, reserved):
    assert reserved_name(name) is reserved


def test_twins_enforce_warn_and_audit_the_level_at_the_latest_version():
    assert pod_security_labels("baseline") == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "baseline",
        "pod-security.kubernetes.io/audit": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn-version": "latest",
        "pod-security.kubernetes.io/audit-version": "latest",
    }
