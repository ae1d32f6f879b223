"""One home per default: the controller's constants. Wherever a default is also written for people to read (the
CRDs, the modules' documentation, the roles' argument specs), it must say the same; a role passes an unset option
on as omitted, so the module's default (the constant) applies, and never restates the number."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from catamaran.constants import (
    DEFAULT_ALLOWED_POD_ANNOTATIONS,
    DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    DEFAULT_POD_SECURITY_LEVEL,
    DEFAULT_SHARING_PERCENTAGE,
    KUBELET_PORT,
    MAX_TERMINATION_GRACE_SECONDS,
)
from catamaran.networks import DEFAULT_REMAP_POOL
from catamaran.steering import ENABLED_LABEL
from catamaran.vk.reflection.policy import DEFAULT_WORKERS
from catamaran.vk.reflection.secrets import TOKEN_BINDING_TYPE

ROOT = Path(__file__).resolve().parents[3]
# (option, ForeignCluster field) of each reflected kind: the options spell the fields in snake_case.
KINDS = [(re.sub(r"(?<!^)(?=[A-Z])", "_", field).lower(), field) for field in DEFAULT_WORKERS]
CRDS = ROOT / "controller" / "crds"
# The options whose defaults the constants hold, and those constants.
OPTION_DEFAULTS = {
    "sharing_percentage": DEFAULT_SHARING_PERCENTAGE,
    "pod_security": DEFAULT_POD_SECURITY_LEVEL,
    "credential_lifetime": DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    "max_termination_grace_period": DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    "allowed_pod_annotations": list(DEFAULT_ALLOWED_POD_ANNOTATIONS),
}


def module_documentation(name: str) -> dict:
    tree = ast.parse((ROOT / "plugins" / "modules" / f"{name}.py").read_text())
    (text,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION"
    ]
    return yaml.safe_load(text)


def crd_spec(name: str) -> dict:
    crd = yaml.safe_load((CRDS / name).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def option_trees(node: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every option (name path, its spec) of a module's documentation or a role's argument spec."""
    for key in ("options", "suboptions"):
        for name, spec in (node.get(key) or {}).items():
            yield f"{path}.{name}".lstrip("."), spec
            yield from option_trees(spec, f"{path}.{name}")


def number_after(pattern: str, text: str, where: str) -> int:
    match = re.search(pattern, " ".join(text) if isinstance(text, list) else text)
    assert match, f"{where}: no default in {text!r}"
    return int(match.group(1))


def workers_documented() -> Iterator[tuple[str, str, int]]:
    """(where, kind, number) for every place that documents a reflected kind's default worker count."""
    kinds = crd_spec("core.catamaran.io_foreignclusters.yaml")["reflection"]["properties"]["kinds"]["properties"]
    for _, field in KINDS:
        text = kinds[field]["properties"]["workers"]["description"]
        yield "ForeignCluster CRD", field, number_after(r"unset: (\d+)", text, f"CRD {field}")
    listed = dict(option_trees(module_documentation("peering")))["reflection.kinds"]["description"]
    for option, field in KINDS:
        yield "peering module", field, number_after(rf"\b{option} (\d+)", listed, f"peering module {option}")
    specs = yaml.safe_load((ROOT / "roles" / "peering" / "meta" / "argument_specs.yml").read_text())
    for entry, spec in specs["argument_specs"].items():
        for path, option in option_trees(spec):
            if path.endswith("reflection.kinds"):
                for kind, field in KINDS:
                    text = option["description"]
                    yield f"peering role ({entry})", field, number_after(rf"\b{kind} (\d+)", text, path)


def test_every_documented_worker_default_is_the_controllers():
    found = list(workers_documented())
    assert {where for where, _, _ in found} >= {"ForeignCluster CRD", "peering module"}
    wrong = [(where, kind, number) for where, kind, number in found if number != DEFAULT_WORKERS[kind]]
    assert not wrong, f"defaults that disagree with vk/reflection/policy.py DEFAULT_WORKERS: {wrong}"


def test_the_peering_modules_documented_defaults_are_the_constants():
    documented = dict(option_trees(module_documentation("peering")))
    assert {option: documented[option].get("default") for option in OPTION_DEFAULTS} == OPTION_DEFAULTS


def test_the_crds_defaults_are_the_constants():
    assert (
        crd_spec("core.catamaran.io_foreignclusters.yaml")["sharingPercentage"]["default"] == DEFAULT_SHARING_PERCENTAGE
    )
    offer = crd_spec("offloading.catamaran.io_resourceoffers.yaml")
    documented = {
        "sharingPercentage": (r"default (\d+)", DEFAULT_SHARING_PERCENTAGE),
        "credentialLifetimeSeconds": (r"default (\d+)", DEFAULT_CREDENTIAL_LIFETIME_SECONDS),
    }
    for field, (pattern, constant) in documented.items():
        assert number_after(pattern, offer[field]["description"], field) == constant, field
    pods = offer["pods"]["properties"]
    assert pods["maxTerminationGracePeriodSeconds"]["maximum"] == MAX_TERMINATION_GRACE_SECONDS
    grace = pods["maxTerminationGracePeriodSeconds"]["description"]
    assert number_after(r"default (\d+)", grace, "maxTerminationGracePeriodSeconds") == (
        DEFAULT_MAX_TERMINATION_GRACE_SECONDS
    )
    described = " ".join(pods["allowedAnnotations"]["description"].split())
    for annotation in DEFAULT_ALLOWED_POD_ANNOTATIONS:
        assert annotation.removesuffix("/*").split(".")[0] in described, annotation
    assert f"default {DEFAULT_POD_SECURITY_LEVEL}" in offer["podSecurity"]["description"]


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir()))
def test_roles_leave_the_modules_defaults_to_the_modules(role):
    """An argument spec states no default of an option the constants hold, and no task restates one."""
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    restated = [
        (entry, path)
        for entry, spec in specs["argument_specs"].items()
        for path, option in option_trees(spec)
        if path.split(".")[-1] in OPTION_DEFAULTS and "default" in option
    ]
    assert not restated, f"{role}: argument specs restate the module's default: {restated}"
    for task_file in (ROOT / "roles" / role / "tasks").glob("*.yml"):
        text = task_file.read_text()
        for option, constant in OPTION_DEFAULTS.items():
            assert not re.search(rf"{option} \| default\((?!omit)", text), f"{task_file.name}: {option} restated"
            assert f"default({constant})" not in text, task_file.name
            assert f"default('{constant}')" not in text, task_file.name


def test_a_policys_offloading_spec_is_the_namespace_offloadings_spec():
    """The policy CRD holds a copy of the NamespaceOffloading spec schema (a CRD cannot reference another's):
    defaults, enums and rules must stay the same, or a policy would make offloadings the API refuses."""
    namespace_offloading = yaml.safe_load((CRDS / "offloading.catamaran.io_namespaceoffloadings.yaml").read_text())
    own = namespace_offloading["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert crd_spec("offloading.catamaran.io_namespaceoffloadingpolicies.yaml")["offloading"] == own


# Where a role's argument spec and its defaults/main.yml may differ, and why. Nothing else may.
SPEC_DEFAULT_EXCEPTIONS = {
    # Shared by every role and set by the inventory; the tasks read it with default(omit, true), so the spec's "" only
    # documents that unset means the current context.
    "catamaran_context": "read as catamaran_context | default(omit, true)",
    # The defaults compute the home directory; the spec shows it as a person writes it.
    "controller_state_dir": "the spec shows the expression's value",
}
# Set in defaults/main.yml from the collection's version; the spec describes it in words.
COMPUTED_DEFAULTS = {"controller_image", "controller_networkpolicy_canary_image"}


def role_defaults(role: str) -> dict:
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def spec_options(role: str) -> dict[str, dict[str, dict]]:
    """Entry point -> its top-level options, from the role's argument spec."""
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return {entry: spec.get("options") or {} for entry, spec in specs.items()}


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir()))
def test_a_roles_argument_specs_and_defaults_say_the_same(role):
    """A role's defaults are written twice: in defaults/main.yml, which applies them, and in the argument spec, which
    documents them (ansible-doc, the docs site). Every default in one must be in the other, with the same value."""
    defaults, entries = role_defaults(role), spec_options(role)
    disagree, undocumented = [], []
    for entry, options in entries.items():
        for name, option in options.items():
            if "default" not in option or name in SPEC_DEFAULT_EXCEPTIONS:
                continue
            if defaults.get(name, "<not in defaults/main.yml>") != option["default"]:
                disagree.append(f"{entry}.{name}: spec {option['default']!r}, defaults {defaults.get(name)!r}")
    for name in defaults:
        documented = [options[name] for options in entries.values() if name in options]
        if not documented:
            undocumented.append(f"{name}: in no entry point's argument spec")
        elif name not in COMPUTED_DEFAULTS | set(SPEC_DEFAULT_EXCEPTIONS):
            disagree += [f"{name}: the spec states no default" for option in documented if "default" not in option]
    assert not disagree, f"roles/{role}: argument_specs.yml and defaults/main.yml disagree: {disagree}"
    assert not undocumented, f"roles/{role}: defaults no argument spec documents: {undocumented}"


def test_the_remap_pool_and_kubelet_port_written_elsewhere_are_the_constants():
    """The peering module's documentation names the remap pool (networks.py, which the collection links to); the
    controller role's deployment passes the kubelet port to the container and declares it as its port."""
    pool = " ".join(dict(option_trees(module_documentation("peering")))["network"]["description"])
    assert f"C({DEFAULT_REMAP_POOL})" in pool, f"the peering module's network option does not name {DEFAULT_REMAP_POOL}"
    deployment = yaml.safe_load((ROOT / "roles" / "controller" / "vars" / "deployment.yml").read_text())
    assert deployment["__controller_kubelet_port"] == KUBELET_PORT


def test_teardown_assumes_the_controller_roles_default_mode():
    """teardown.yml reads controller_mode after the role's scope has ended, so it writes the role's default again."""
    defaults = yaml.safe_load((ROOT / "roles" / "controller" / "defaults" / "main.yml").read_text())
    teardown = (ROOT / "playbooks" / "teardown.yml").read_text()
    assumed = re.findall(r"controller_mode \| default\('(\w+)'\)", teardown)
    assert assumed, "teardown.yml no longer reads controller_mode: drop this test"
    assert set(assumed) == {defaults["controller_mode"]}


def test_the_token_binding_policy_names_the_reflectors_binding_type_and_the_offloaded_label():
    """The controller role's admission policy admits the token reflector's bindings in offloaded namespaces: the
    type the reflector writes and the label the manager puts on those namespaces, written again in its vars."""
    deployment = yaml.safe_load((ROOT / "roles" / "controller" / "vars" / "deployment.yml").read_text())
    assert deployment["__controller_token_binding_type"] == TOKEN_BINDING_TYPE
    assert deployment["__controller_offloaded_label"] == ENABLED_LABEL
