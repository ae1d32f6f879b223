"""The catamaran_* variables: the federation model refuses any it does not know (plugins/filter/federation_model.py),
so every one the playbooks, roles and examples read must be in its list, and every cluster variable in its
documentation."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.filter import federation_model

# Names with the prefix that are not variables of a host.
NOT_VARIABLES = {
    "catamaran_clusters": "the inventory group",
    "catamaran_reachable": "a group site.yml makes",
    "catamaran_crds": "a field of cluster_info's result",
    "catamaran_controller": "the controller wheel's file name",
    "catamaran_skipped": "a task's own variable",
}
SOURCES = ("playbooks", "roles", "examples")


def names_used() -> dict[str, Path]:
    used = {}
    for source in SOURCES:
        for path in sorted((REPO_ROOT / source).rglob("*.yml")):
            for name in re.findall(r"\bcatamaran_[a-z_]+\b", path.read_text()):
                used.setdefault(name, path.relative_to(REPO_ROOT))
    return used


def test_every_catamaran_variable_the_collection_reads_is_known_to_the_model():
    used = names_used()
    assert "catamaran_peerings" in used  # the scan sees the files
    unknown = {
        name: str(path)
        for name, path in used.items()
        if name not in NOT_VARIABLES and name not in federation_model.KNOWN_VARIABLES
    }
    assert unknown == {}, "site.yml would refuse these as misspelt; add them to the model's lists"


def test_every_cluster_variable_is_documented_by_the_model():
    documentation = federation_model.DOCUMENTATION
    assert [name for name in federation_model.CLUSTER_VARIABLES if f"C({name})" not in documentation] == []
