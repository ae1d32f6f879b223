"""Reflected Secrets (vk/reflection/secrets.py)."""

from __future__ import annotations

from catamaran.vk.reflection.secrets import Secrets
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_service_account_token_secrets_become_opaque():
    local = {"metadata": meta(), "type": "kubernetes.io/service-account-token", "data": {"token": "dA=="}}
    assert Secrets().content(local, CONTEXT, local=True)["type"] == "Opaque"
    assert Secrets().local_name("catamaran-token.web-1") is None
