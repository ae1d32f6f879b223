"""Remap ranges (plugins/module_utils/validation.py)."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.validation import InvalidSetting, remap_covers


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
