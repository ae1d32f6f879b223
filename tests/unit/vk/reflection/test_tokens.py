"""Service-account tokens of offloaded pods (vk/reflection/tokens.py): names, keys and lifetimes."""

from __future__ import annotations

import pytest

from catamaran.vk.reflection.tokens import (
    account_secret_name,
    binding_name,
    refresh_delay,
    token_keys,
    token_secret_name,
)
from tests.unit.consumer_pods import local_pod


def test_tokens_are_refreshed_at_80_percent_of_the_shortest_lifetime():
    assert refresh_delay([3607.0, 600.0]) == pytest.approx(480.0)


def test_one_token_secret_and_one_binding_per_service_account_each_within_a_secrets_name():
    assert account_secret_name("web") == "catamaran-token.sa.web"
    assert binding_name("provider-a", "web") == "catamaran-token-binding.provider-a.web"
    long = "x" * 250
    assert len(account_secret_name(long)) == len(binding_name("provider-a", long)) == 253
    assert binding_name("provider-a", long) != binding_name("provider-b", long)
    # Earlier releases' per-pod Secrets, still refreshed for the pods that read them.
    assert token_secret_name("web-1") == "catamaran-token.web-1"
    assert len(token_secret_name(long)) == 253


def test_a_pods_keys_are_those_its_projections_ask_for():
    assert token_keys(local_pod()) == {"token.3607s"}
