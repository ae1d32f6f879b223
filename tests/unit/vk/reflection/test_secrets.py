"""Reflected Secrets (vk/reflection/secrets.py)."""

from __future__ import annotations

from catamaran.vk.reflection.secrets import TOKEN_BINDING_TYPE, Secrets, is_token_secret
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_service_account_token_secrets_become_opaque():
    local = {"metadata": meta(), "type": "kubernetes.io/service-account-token", "data": {"token": "dA=="}}
    assert Secrets().content(local, CONTEXT, local=True)["type"] == "Opaque"
    assert Secrets().local_name("catamaran-token.web-1") is None


def test_the_token_reflectors_secrets_are_not_reflected_either_way():
    """Its bindings stay on the consumer; its token Secrets in the twin answer to no local Secret."""
    assert Secrets().skipped({"metadata": meta(), "type": TOKEN_BINDING_TYPE}, CONTEXT)
    assert not Secrets().skipped({"metadata": meta(), "type": "Opaque"}, CONTEXT)
    assert Secrets().local_name("catamaran-token.sa.default") is None
    shared = {"metadata": {"annotations": {"catamaran.io/token-for-service-account": "default"}}}
    per_pod = {"metadata": {"annotations": {"catamaran.io/token-for-pod": "web-1"}}}
    assert is_token_secret(shared)
    assert is_token_secret(per_pod)
    assert not is_token_secret({"metadata": meta()})
