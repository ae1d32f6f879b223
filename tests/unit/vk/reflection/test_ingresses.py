"""Reflected Ingresses (vk/reflection/ingresses.py)."""

from __future__ import annotations

from catamaran.vk.reflection.ingresses import Ingresses
from catamaran.vk.reflection.kind import Context
from catamaran.vk.reflection.policy import ReflectionSettings
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_ingress_class_is_the_providers_unless_configured():
    local = {"metadata": meta(), "spec": {"ingressClassName": "consumer-nginx", "rules": [{"host": "a"}]}}
    assert "ingressClassName" not in Ingresses().content(local, CONTEXT, local=True)["spec"]
    configured = Context(settings=ReflectionSettings(ingress_class="public"), own_nodes=frozenset({"n"}))
    assert Ingresses().content(local, configured, local=True)["spec"]["ingressClassName"] == "public"
    tampered = {"metadata": meta(), "spec": {"ingressClassName": "other", "rules": [{"host": "a"}]}}
    assert Ingresses().content(tampered, configured, local=False)["spec"]["ingressClassName"] == "other"


def test_an_update_keeps_the_class_the_providers_admission_filled_in():
    body = {"spec": {"defaultBackend": {"service": {"name": "web"}}}}
    kept = Ingresses().with_allocations(body, {"spec": {"ingressClassName": "provider-default"}})
    assert kept["spec"] == {**body["spec"], "ingressClassName": "provider-default"}
    configured = {"spec": {"ingressClassName": "public"}}
    assert Ingresses().with_allocations(configured, {"spec": {"ingressClassName": "other"}}) == configured
    assert Ingresses().with_allocations(body, {"spec": {}}) == body
