"""Pod ranges (networks.py): covering networks, the ranges a consumer consented to at peering (issue 37), remaps."""

from __future__ import annotations

import pytest

from catamaran import networks
from catamaran.networks import covering_networks, free_range, seen_as
from catamaran.vk import ip_translation
from tests.unit.consent import CONSENT


def test_covering_network_keeps_every_node_range():
    assert covering_networks({"10.102.1.0/24", "10.102.3.0/24"}) == ["10.102.0.0/22"]


@pytest.mark.parametrize("announced", ["8.8.8.0/24", "52.0.0.0/8", "10.0.0.0/8", "10.103.0.0/16"])
def test_a_range_outside_the_consent_is_refused(announced):
    accepted, refused = networks.judge_announced([announced], CONSENT)
    assert accepted == []
    assert refused == [(announced, networks.OUTSIDE_CONSENT, "outside the consented ranges (10.102.0.0/16)")]


def test_the_consent_and_its_sub_ranges_are_accepted():
    accepted, refused = networks.judge_announced(["10.102.0.0/16", "10.102.128.0/17", "10.102.3.0/24"], CONSENT)
    assert (accepted, refused) == (["10.102.0.0/16", "10.102.128.0/17", "10.102.3.0/24"], [])


def test_a_longer_prefix_of_another_providers_range_is_refused_even_inside_the_consent():
    others = {"cluster-3": ["10.101.0.0/16"]}
    accepted, refused = networks.judge_announced(["10.101.7.0/24"], ["10.96.0.0/12"], others)
    assert accepted == []
    assert refused == [
        ("10.101.7.0/24", networks.OTHER_PROVIDERS_RANGE, "overlaps provider cluster-3's range 10.101.0.0/16")
    ]


def test_no_consent_accepts_nothing_and_garbage_is_named():
    accepted, refused = networks.judge_announced(["10.102.0.0/16", "nonsense"], [])
    assert accepted == []
    assert [reason for _, reason, _ in refused] == [networks.OUTSIDE_CONSENT, networks.NOT_A_RANGE]


def test_what_a_peering_consents_to_see():
    assert networks.consented_view({"podCIDRs": CONSENT}) == CONSENT
    assert networks.consented_view({"podCIDRs": CONSENT, "podCIDRRemap": "100.64.0.0/16"}) == ["100.64.0.0/16"]
    assert networks.consented_view({"mode": "Fabric"}) is None
    # The virtual kubelet: the real ranges; without a record (a peering of an earlier release), no check until the
    # peering runs again, so that an upgrade keeps the peering's traffic.
    assert ip_translation.consented_pod_cidrs({"mode": "Fabric", "podCIDRs": CONSENT}) == CONSENT
    assert ip_translation.consented_pod_cidrs({"mode": "Fabric"}) is None
    assert ip_translation.consented_pod_cidrs({"mode": "Fabric", "podCIDRRemap": "100.64.0.0/16"}) is None
    assert ip_translation.consented_pod_cidrs({"mode": "Flat"}) is None


def test_a_range_is_remapped_only_when_it_overlaps_and_keeps_its_mapping():
    assert seen_as(["10.101.0.0/16"], taken=["10.102.0.0/16"]) == [("10.101.0.0/16", "10.101.0.0/16")]
    first = seen_as(["10.100.0.0/16"], taken=["10.100.0.0/16"])
    assert first == [("10.100.0.0/16", "100.64.0.0/16")]
    # Another peer already holds the first free range: the next one.
    assert seen_as(["10.100.0.0/16"], taken=["10.100.0.0/16", "100.64.0.0/16"])[0][1] == "100.65.0.0/16"
    # An earlier mapping still free is kept, even if a lower range has come free since.
    kept = [("10.100.0.0/16", "100.70.0.0/16")]
    assert seen_as(["10.100.0.0/16"], taken=["10.100.0.0/16"], kept=kept) == kept
    assert free_range("10.0.0.0/8", taken=[]) is None  # larger than the pool
    with pytest.raises(ValueError, match=r"no range of 100\.64\.0\.0/10 left to remap 10\.0\.0\.0/10"):
        seen_as(["10.0.0.0/10"], taken=["10.0.0.0/10", "100.64.0.0/10"])
