"""Reflection's policy knobs (vk/reflection/policy.py)."""

from __future__ import annotations

import pytest

from catamaran.vk.reflection.policy import ALLOW_LIST, KindPolicy, settings_from_spec


@pytest.mark.parametrize(
    ("policy", "annotations", "allowed"),
    [
        (KindPolicy(), {}, True),
        (KindPolicy(), {"catamaran.io/skip-reflection": "true"}, False),
        (KindPolicy(policy=ALLOW_LIST), {}, False),
        (KindPolicy(policy=ALLOW_LIST), {"catamaran.io/allow-reflection": "true"}, True),
    ],
)
def test_deny_and_allow_lists_follow_the_annotations(policy, annotations, allowed):
    assert policy.allows(annotations) is allowed


def test_settings_from_the_foreign_cluster():
    settings = settings_from_spec(
        {
            "kinds": {"secrets": {"workers": 0}, "configMaps": {"policy": "AllowList"}},
            "filteredLabels": ["team/"],
            "ingressClassName": "public",
        }
    )
    assert not settings.kind("secrets").enabled
    assert settings.kind("configMaps") == KindPolicy(policy=ALLOW_LIST, workers=16)
    assert settings.kind("services").workers == 4
    assert settings.labels({"team/owner": "x", "app": "y", "catamaran.io/managed-by": "z"}) == {"app": "y"}
    assert settings.annotations({"service.beta.kubernetes.io/aws-load-balancer-type": "nlb", "a": "b"}) == {"a": "b"}
    assert settings.ingress_class == "public"
