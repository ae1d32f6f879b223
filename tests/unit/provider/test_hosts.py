"""The record of the hosts each namespace's Ingresses serve (provider/hosts.py), which the tenant policy reads."""

from __future__ import annotations

from lightkube.resources.networking_v1 import Ingress

from catamaran.provider.hosts import hosts_config_map, rule_hosts, served_hosts
from catamaran.provider.offers import TenantTerms
from catamaran.provider.terms import twin_annotations


def ingress(*hosts: str | None, default_backend: bool = False) -> Ingress:
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    spec: dict = {"rules": [{"host": h} if h else {} for h in hosts]}
    if default_backend:
        spec["defaultBackend"] = backend
    return Ingress.from_dict({"metadata": {"name": "i", "namespace": "n"}, "spec": spec})


def test_an_ingress_is_cached_as_the_hosts_of_its_rules():
    assert rule_hosts(ingress("a.example", None, "*.b.example", default_backend=True)) == {"a.example", "*.b.example"}
    assert rule_hosts(Ingress.from_dict({"metadata": {"name": "i"}})) == frozenset()


def test_each_host_names_every_namespace_serving_it_and_wildcards_fit_a_configmap_key():
    data = served_hosts(
        [
            ("shop", frozenset({"shop.example", "*.shop.example"})),
            ("twin-c1", frozenset({"shop.example"})),
            ("x", frozenset()),
        ]
    )
    assert data == {"_.shop.example": "shop", "shop.example": "shop,twin-c1"}
    assert hosts_config_map(data)["metadata"]["namespace"] == "catamaran-system"


def test_the_ingress_terms_reach_the_twin_for_the_admission_policy():
    spec = {"ingress": {"allowedClasses": ["public"], "allowedHosts": ["*.c1.example", "a.example"]}}
    annotations = twin_annotations(TenantTerms.from_offer_spec(spec), [])
    assert annotations["terms.catamaran.io/ingress-classes"] == "public"
    assert annotations["terms.catamaran.io/ingress-hosts"] == "*.c1.example,a.example"
    assert annotations["terms.catamaran.io/ingress-annotations"] == ""
    defaults = twin_annotations(TenantTerms(), [])
    assert defaults["terms.catamaran.io/ingress-classes"] == ""  # cautious: no class, so no tenant Ingress
