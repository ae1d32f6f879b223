"""Pod IPs the consumer shows (vk/ip_translation.py): translated at their offset, only inside the ranges the
provider announced and the consumer consented to, and never over the consumer's own ranges.
"""

from __future__ import annotations

import pytest

from catamaran.vk import ip_translation, status_back
from catamaran.vk.pod_ips import (
    CONSENT_CONDITION,
    NO_CONSENT_RECORDED,
    NO_PROVIDER_RANGES,
    REFUSED_CONDITION,
    UNTRANSLATED_CONDITION,
    translation_conditions,
)
from tests.unit.consent import CONSENT
from tests.unit.vk.provider_reports import API_SERVER, local_status, running


@pytest.mark.parametrize(
    ("provider", "remap", "ip", "expected"),
    [
        (["10.102.0.0/16"], "10.200.0.0/16", "10.102.3.7", "10.200.3.7"),
        (["10.100.0.0/16"], "10.200.0.0/16", "10.100.0.9", "10.200.0.9"),  # overlapping with the consumer
        (["10.102.0.0/16"], None, "10.102.3.7", "10.102.3.7"),
        (["10.102.0.0/16"], "10.200.0.0/16", "192.168.1.1", None),  # outside the provider's range: refused
    ],
)
def test_ip_translation_keeps_the_offset(provider, remap, ip, expected):
    assert ip_translation.IPTranslator(provider, remap)(ip) == expected


def test_remap_range_too_small_translates_what_fits_and_says_so():
    translate = ip_translation.IPTranslator(["10.0.0.0/16"], "10.200.0.0/24")
    assert "10.200.0.0/24" in translate.problem
    assert "10.0.0.0/16" in translate.problem
    assert "prefix /16 or shorter" in translate.problem
    assert translate("10.0.0.7") == "10.200.0.7"
    assert translate("10.0.3.7") is None  # offset beyond the remap range: refused, never shown untranslated
    assert ip_translation.IPTranslator(["10.0.0.0/16"], "10.200.0.0/16").problem == ""


def test_the_translator_shows_and_routes_only_consented_ranges():
    translate = ip_translation.IPTranslator(["10.102.0.0/16", "8.8.8.0/24"], None, (), consented=CONSENT)
    assert translate("10.102.1.5") == "10.102.1.5"
    assert translate("8.8.8.8") is None
    reason, message = translate.refusal("8.8.8.8")
    assert reason == ip_translation.POD_IP_NOT_CONSENTED
    assert "8.8.8.0/24" in message
    assert "outside the consented ranges (10.102.0.0/16)" in message
    assert translate.seen_ranges() == ["10.102.0.0/16"]  # status.network.remotePodCIDRs: what the gateway routes


def test_a_new_consent_is_a_new_verdict():
    before = ip_translation.IPTranslator(["10.102.0.0/16"], None, (), consented=CONSENT)
    after = ip_translation.IPTranslator(["10.102.0.0/16"], None, (), consented=["10.102.0.0/15"])
    assert not before.same_as(after)


CONSUMER = ip_translation.own_ranges(
    [
        ("10.101.1.0/24", "node worker-1's pod range"),
        ("172.31.40.2", "node worker-1's address"),
        ("10.0.0.0/24", "service range (ServiceCIDR kubernetes)"),
        (API_SERVER, "API server's address"),
        ("worker-1", "node worker-1's address"),  # a Hostname address: not an IP, skipped
    ]
)


def ip_condition(status: dict) -> dict | None:
    return next((c for c in status["conditions"] if c["type"] == status_back.POD_IP_CONDITION), None)


# -- pod IPs -------------------------------------------------------------------------------------


def test_an_ip_inside_the_announced_range_is_shown():
    status = local_status(running("10.102.3.7"), ip_translation.IPTranslator(["10.102.0.0/16"], None, CONSUMER))
    assert (status["podIP"], status["podIPs"]) == ("10.102.3.7", [{"ip": "10.102.3.7"}])
    assert ip_condition(status) is None


def test_an_ip_outside_the_announced_range_is_refused_and_said_so():
    status = local_status(running("192.168.7.7"), ip_translation.IPTranslator(["10.102.0.0/16"], None, CONSUMER))
    assert (status["podIP"], status["podIPs"]) == (None, None)  # merge patch nulls: a shown IP goes
    refused = ip_condition(status)
    assert (refused["status"], refused["reason"]) == ("False", ip_translation.POD_IP_OUTSIDE_PROVIDER_RANGES)
    assert "'192.168.7.7'" in refused["message"]
    assert "10.102.0.0/16" in refused["message"]


def test_the_consumers_api_server_address_is_refused():
    """The issue's attack: the provider sets its pod's IP to the consumer's API server address."""
    translate = ip_translation.IPTranslator(["10.102.0.0/16"], None, CONSUMER)
    assert translate(API_SERVER) is None
    status = local_status(running(API_SERVER), translate)
    assert status["podIP"] is None
    assert API_SERVER in ip_condition(status)["message"]


def test_announcing_a_range_around_the_api_server_refuses_every_ip():
    translate = ip_translation.IPTranslator(["172.31.0.0/16"], None, CONSUMER)
    assert translate(API_SERVER) is None
    assert translate("172.31.9.9") is None  # the whole range, not only the consumer's addresses in it
    reason, message = translate.conflict
    assert reason == ip_translation.PROVIDER_RANGE_OVERLAPS_CONSUMER
    assert f"API server's address {API_SERVER}:" in message
    assert "spec.networking.podCIDRRemap" in message
    assert translate.refusal("172.31.9.9") == translate.conflict


def test_no_ip_is_shown_before_the_provider_announces_a_range():
    translate = ip_translation.IPTranslator([], None, CONSUMER)
    status = local_status(running("10.102.3.7"), translate)
    assert status["podIP"] is None
    assert "none yet" in ip_condition(status)["message"]
    conditions = translation_conditions(translate, [])
    assert [(c["type"], c["status"], c["reason"]) for c in conditions] == [
        (CONSENT_CONDITION, "False", NO_CONSENT_RECORDED),
        (REFUSED_CONDITION, "True", NO_PROVIDER_RANGES),
    ]


def test_until_the_ranges_are_known_the_pod_keeps_what_it_shows():
    shown = {"podIP": "10.102.3.7", "podIPs": [{"ip": "10.102.3.7"}]}
    status = local_status(running("10.102.3.8"), None, local=shown)
    assert (status["podIP"], status["podIPs"]) == (shown["podIP"], shown["podIPs"])


@pytest.mark.parametrize("announced", ["10.101.0.0/16", "172.31.40.0/24", "10.0.0.0/8", "0.0.0.0/0", "127.0.0.0/8"])
def test_a_provider_range_overlapping_the_consumers_is_refused_without_a_remap_range(announced):
    translate = ip_translation.IPTranslator([announced], None, CONSUMER)
    assert translate.conflict is not None
    refused = translation_conditions(translate, [])[-1]
    assert (refused["type"], refused["status"], refused["reason"]) == (
        REFUSED_CONDITION,
        "True",
        ip_translation.PROVIDER_RANGE_OVERLAPS_CONSUMER,
    )


def test_an_overlapping_range_is_translated_with_a_remap_range():
    translate = ip_translation.IPTranslator(["10.101.0.0/16"], "10.200.0.0/16", CONSUMER)
    assert translate.conflict is None
    assert translate("10.101.1.5") == "10.200.1.5"
    conditions = {c["type"]: c for c in translation_conditions(translate, [])}
    assert conditions[REFUSED_CONDITION]["status"] == "False"
    assert "as 10.200.0.0/16" in conditions[REFUSED_CONDITION]["message"]
    assert conditions[UNTRANSLATED_CONDITION]["status"] == "False"


def test_a_remap_range_overlapping_the_consumers_is_refused():
    translate = ip_translation.IPTranslator(["10.102.0.0/16"], "10.101.0.0/16", CONSUMER)
    assert translate("10.102.1.5") is None
    reason, message = translate.conflict
    assert reason == ip_translation.REMAP_OVERLAPS_CONSUMER
    assert "node worker-1's pod range 10.101.1.0/24" in message


def test_ips_a_small_remap_range_cannot_hold_are_refused_not_shown_untranslated():
    translate = ip_translation.IPTranslator(["10.0.0.0/16"], "10.200.0.0/24", ())
    status = local_status(running("10.0.3.7"), translate)
    assert status["podIP"] is None
    assert ip_condition(status)["reason"] == ip_translation.POD_IP_NOT_TRANSLATABLE
    assert "beyond the first 256" in ip_condition(status)["message"]


def test_a_remap_range_of_another_family_holds_nothing_of_it():
    translate = ip_translation.IPTranslator(["10.102.0.0/16", "fd00:102::/64"], "10.200.0.0/16", ())
    assert translate("10.102.0.1") == "10.200.0.1"
    assert translate("fd00:102::1") is None
    assert "another address family" in translate.problem


def test_a_pod_shows_at_most_one_ip_per_family_the_primary_first():
    translate = ip_translation.IPTranslator(["10.102.0.0/16", "fd00:102::/64"], None, ())
    remote = running("10.102.0.5", podIPs=[{"ip": "10.102.0.5"}, {"ip": "fd00:102::5"}, {"ip": "10.102.0.6"}])
    status = local_status(remote, translate)
    assert status["podIP"] == "10.102.0.5"
    assert status["podIPs"] == [{"ip": "10.102.0.5"}, {"ip": "fd00:102::5"}]


@pytest.mark.parametrize("ip", ["not-an-ip", "10.102.0.5/32", "169.254.169.254"])
def test_garbage_and_special_ips_are_refused(ip):
    assert ip_translation.IPTranslator(["10.102.0.0/16"], None)(ip) is None


@pytest.mark.parametrize("announced", ["0.0.0.0/0", "169.254.0.0/16", "::/0"])
def test_ranges_holding_addresses_no_pod_has_are_refused_whatever_the_consumer_uses(announced):
    assert ip_translation.IPTranslator([announced], None).conflict is not None


def test_announced_ranges_are_bounded_and_garbage_ignored():
    translate = ip_translation.IPTranslator(["nonsense", *(f"10.{n}.0.0/16" for n in range(102, 122))], None, ())
    assert len(translate.sources) == ip_translation.PROVIDER_RANGES_LIMIT - 1
    assert translate.ignored[0] == "'nonsense'"
    assert translate.ignored[-1].endswith(f"beyond the first {ip_translation.PROVIDER_RANGES_LIMIT}")
    assert "ignored announced ranges" in translation_conditions(translate, [])[-1]["message"]


def test_what_the_check_went_without_is_said():
    translate = ip_translation.IPTranslator(["10.102.0.0/16"], None, CONSUMER)
    refused = translation_conditions(translate, ["Nodes (forbidden to this credential)"])[-1]
    assert refused["status"] == "False"
    assert "checked without the consumer's Nodes (forbidden to this credential)" in refused["message"]


# -- the consumer's own ranges ---------------------------------------------------------------------


def test_the_consumers_ranges_come_from_nodes_servicecidrs_and_the_kubernetes_service():
    node = {
        "metadata": {"name": "worker-1"},
        "spec": {"podCIDR": "10.101.1.0/24"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "172.31.40.2"}, {"type": "Hostname", "address": "w"}]
        },
    }
    entries = [
        *ip_translation.node_entries(node),
        *ip_translation.service_cidr_entries({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.0.0.0/24"]}}),
        *ip_translation.kubernetes_service_entries({"spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}}),
        *ip_translation.api_server_entries({"endpoints": [{"addresses": [API_SERVER]}]}),
    ]
    own = ip_translation.own_ranges(entries)
    described = {what for _, what in own}
    assert {"node worker-1's pod range", "node worker-1's address", "API server's address"} <= described
    assert len(own) == 5  # the Hostname is not an address
    assert ip_translation.kubernetes_service_entries(None) == []
