"""Diffs and secrecy (plugins/module_utils/changes.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.changes import comparable, redacted


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
