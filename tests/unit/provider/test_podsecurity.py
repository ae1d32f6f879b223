"""Pod Security Standards per level (provider/podsecurity.py)."""

from __future__ import annotations

import copy

import pytest

from catamaran.provider import podsecurity
from tests.integration.manifests import container, deployment, real_pod
from tests.unit.provider.pod_specs import compliant_spec


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
