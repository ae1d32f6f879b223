"""Covering networks (plugins/module_utils/networks.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.networks import covering_networks


def test_node_pod_ranges_are_covered_per_family_as_the_provider_reports_them():
    ranges = ["10.244.0.0/24", "10.244.1.0/24", "10.244.3.0/24", "fd00:1::/64"]
    assert covering_networks(ranges) == ["10.244.0.0/22", "fd00:1::/64"]
