"""What an execution environment and a user's control node are told the collection needs matches what it imports.

requirements.txt (read by ansible-builder through meta/execution-environment.yml) must name every third-party
library the modules, module_utils and the filter import, with the floors the modules document, and admit the
versions the tests run with (requirements/constraints.txt).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[3]
PLUGIN_DIRS = ("plugins/modules", "plugins/module_utils", "plugins/filter")
# The distribution that provides each importable top-level name the plugins use.
DISTRIBUTION_OF = {"kubernetes": "kubernetes", "yaml": "PyYAML", "urllib3": "urllib3", "cryptography": "cryptography"}


def requirements_txt() -> dict[str, Requirement]:
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    parsed = [Requirement(line.split("#", 1)[0]) for line in lines if line.split("#", 1)[0].strip()]
    return {canonicalize_name(req.name): req for req in parsed}


def pinned() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "requirements" / "constraints.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def third_party_imports() -> dict[str, set[str]]:
    """Top-level names imported by the plugins that are neither the standard library, Ansible nor the collection."""
    found: dict[str, set[str]] = {}
    for directory in PLUGIN_DIRS:
        for path in sorted((REPO_ROOT / directory).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in ("ansible", "ansible_collections", "__future__"):
                        continue
                    found.setdefault(top, set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def documented_requirements() -> dict[str, Requirement]:
    """The `requirements:` the modules document (the connection doc fragment holds them for every module)."""
    documented = {}
    for path in sorted((REPO_ROOT / "plugins").glob("*/*.py")):
        for match in re.finditer(r'DOCUMENTATION\s*=\s*r?"""(.*?)"""', path.read_text(), re.S):
            for line in yaml.safe_load(match.group(1)).get("requirements") or []:
                req = Requirement(re.sub(r"\s*\(.*\)\s*$", "", line).replace(" ", ""))
                documented[canonicalize_name(req.name)] = req
    return documented


def test_every_third_party_import_of_the_plugins_is_a_declared_requirement():
    declared = requirements_txt()
    imports = third_party_imports()
    assert imports, "no third-party import found: the scan is broken"
    for top, paths in imports.items():
        assert top in DISTRIBUTION_OF, f"{top} (imported by {sorted(paths)}) has no known distribution"
        dist = canonicalize_name(DISTRIBUTION_OF[top])
        if dist in declared:
            continue
        # Not declared itself: it must come with a declared requirement, as urllib3 comes with kubernetes.
        carriers = [
            name
            for name in declared
            if any(canonicalize_name(Requirement(r).name) == dist for r in importlib.metadata.requires(name) or [])
        ]
        assert carriers, f"{DISTRIBUTION_OF[top]} (imported by {sorted(paths)}) is missing from requirements.txt"


def test_requirements_txt_floors_are_the_documented_ones():
    declared = requirements_txt()
    documented = documented_requirements()
    assert set(documented) == set(declared)
    for name, req in declared.items():
        floors = {spec.version for spec in req.specifier if spec.operator == ">="}
        documented_floors = {spec.version for spec in documented[name].specifier if spec.operator == ">="}
        assert floors == documented_floors, name


@pytest.mark.parametrize("name", ["kubernetes", "pyyaml", "cryptography"])
def test_the_tested_versions_are_within_requirements_txt(name):
    assert pinned()[name] in requirements_txt()[name].specifier


def test_execution_environment_points_to_existing_dependency_files():
    ee = yaml.safe_load((REPO_ROOT / "meta" / "execution-environment.yml").read_text())
    assert ee["version"] == 3
    assert ee["dependencies"] == {"python": "requirements.txt", "system": "bindep.txt"}
    entries = [
        line.strip() for line in (REPO_ROOT / "bindep.txt").read_text().splitlines() if line.split("#")[0].strip()
    ]
    assert entries
    for entry in entries:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]*( \[[a-z0-9:! -]+\])?", entry), entry


def test_the_license_is_apache_2_and_every_module_says_so():
    """tests/sanity/ignore-2.19.txt waives the GPLv3 header of each module because it carries this one instead."""
    assert (REPO_ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["license"] == ["Apache-2.0"]
    modules = sorted((REPO_ROOT / "plugins" / "modules").glob("*.py"))
    waived = {
        line.split()[0]
        for line in (REPO_ROOT / "tests" / "sanity" / "ignore-2.19.txt").read_text().splitlines()
        if "validate-modules:missing-gplv3-license" in line
    }
    assert waived == {str(path.relative_to(REPO_ROOT)) for path in modules}
    for path in modules:
        assert "Apache License 2.0" in "".join(path.read_text().splitlines(keepends=True)[:5]), path
