"""The tenant's bound credential (tenancy.py): manifests and renewal decisions; the lent service types both sides
read alike.
"""

from __future__ import annotations

import json

import pytest

from catamaran import tenancy
from catamaran.constants import TENANT_CLUSTER_ROLE, TENANT_CREDENTIAL_SECRET, TENANT_TOKEN_BINDING_SECRET
from catamaran.provider.offers import TenantTerms


def test_both_sides_read_the_lent_service_types_alike():
    from catamaran.tenancy import lent_service_types
    from catamaran.vk.assembly import reflection_terms

    spec = {"services": {"allowedTypes": ["NodePort", "Bogus"]}}
    assert lent_service_types(None) == ("ClusterIP",)
    assert (
        TenantTerms.from_offer_spec(spec).service_types
        == reflection_terms({"spec": spec})[0]
        == (
            "ClusterIP",
            "NodePort",
        )
    )


LIFETIME = 1000
ISSUED = 1_700_000_000.0


def secret(issued=ISSUED, expires=ISSUED + LIFETIME, lifetime=LIFETIME, bound_to="uid-1", token="t0k3n") -> dict:
    return tenancy.credential_secret("c1", token, issued, expires, lifetime, bound_to)


def test_tenant_manifests_bind_tokens_to_an_empty_secret_and_mint_no_legacy_token():
    manifests = tenancy.tenant_manifests("c1")
    secrets = [m for m in manifests if m["kind"] == "Secret"]
    assert secrets == [tenancy.token_binding_secret("c1")]
    (binding,) = secrets
    assert binding["type"] == "Opaque"
    assert binding["metadata"]["name"] == TENANT_TOKEN_BINDING_SECRET
    assert binding["metadata"]["namespace"] == "catamaran-tenant-c1"
    assert "data" not in binding


def test_tenant_may_read_only_its_credential_secret():
    (role,) = [r for r in tenancy.provider_cluster_roles() if r["metadata"]["name"] == TENANT_CLUSTER_ROLE]
    secret_rules = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert secret_rules == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": [TENANT_CREDENTIAL_SECRET],
        }
    ]


def test_token_request_is_bound_to_the_binding_secret_with_the_lifetime():
    request = tenancy.credential_token_request("uid-7", 600)
    assert request["spec"] == {
        "expirationSeconds": 600,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": TENANT_TOKEN_BINDING_SECRET, "uid": "uid-7"},
    }


def test_credential_secret_holds_the_token_and_its_dates():
    made = secret()
    assert made["metadata"]["name"] == TENANT_CREDENTIAL_SECRET
    assert made["metadata"]["namespace"] == "catamaran-tenant-c1"
    annotations = made["metadata"]["annotations"]
    assert annotations[tenancy.ANNOTATION_CREDENTIAL_ISSUED_AT] == "2023-11-14T22:13:20Z"
    assert annotations[tenancy.ANNOTATION_CREDENTIAL_EXPIRES_AT] == "2023-11-14T22:30:00Z"
    assert annotations[tenancy.ANNOTATION_CREDENTIAL_LIFETIME] == "1000"
    assert annotations[tenancy.ANNOTATION_CREDENTIAL_BOUND_TO] == "uid-1"
    assert tenancy.credential_token(made) == "t0k3n"
    assert tenancy.parse_timestamp(annotations[tenancy.ANNOTATION_CREDENTIAL_EXPIRES_AT]) == ISSUED + LIFETIME
    # The token appears only in data, never in metadata that tools print.
    assert "t0k3n" not in json.dumps(made["metadata"])


@pytest.mark.parametrize(
    ("elapsed", "fraction", "expected"),
    [
        (0, 0.8, (None, 800.0)),
        (500, 0.8, (None, 300.0)),
        (800, 0.8, ("renewal due", 0.0)),
        (1200, 0.8, ("renewal due", 0.0)),
        (50, 0.1, (None, 50.0)),
        (100, 0.1, ("renewal due", 0.0)),
    ],
)
def test_renewal_at_a_fraction_of_the_life(elapsed, fraction, expected):
    assert tenancy.credential_renewal(secret(), "uid-1", LIFETIME, ISSUED + elapsed, fraction) == expected


def test_renewal_at_once_when_missing_revoked_retermed_or_unreadable():
    now = ISSUED + 10
    assert tenancy.credential_renewal(None, "uid-1", LIFETIME, now) == ("missing", 0.0)
    assert tenancy.credential_renewal(secret(), "uid-2", LIFETIME, now) == ("revoked", 0.0)
    assert tenancy.credential_renewal(secret(), "uid-1", 600, now) == ("lifetime changed", 0.0)
    no_token = secret()
    no_token["data"] = {}
    assert tenancy.credential_renewal(no_token, "uid-1", LIFETIME, now) == ("unreadable", 0.0)
    garbled = secret()
    garbled["metadata"]["annotations"][tenancy.ANNOTATION_CREDENTIAL_EXPIRES_AT] = "tomorrow"
    assert tenancy.credential_renewal(garbled, "uid-1", LIFETIME, now) == ("unreadable", 0.0)
    unannotated = secret()
    del unannotated["metadata"]["annotations"]
    assert tenancy.credential_renewal(unannotated, "uid-1", LIFETIME, now) == ("unreadable", 0.0)


@pytest.mark.parametrize(
    ("host", "lent", "expected"),
    [
        ("shop.c1.example", ["*.c1.example"], True),
        ("*.a.c1.example", ["*.c1.example"], True),  # a wildcard host under the lent pattern
        ("*.c1.example", ["*.c1.example"], True),
        ("c1.example", ["*.c1.example"], False),  # the pattern's own domain is not under it
        ("evilc1.example", ["*.c1.example"], False),
        ("*", ["*.c1.example"], False),  # a catch-all needs `*` itself
        ("*", ["*"], True),
        ("shop.c1.example", ["shop.c1.example"], True),
        ("cart.c1.example", ["shop.c1.example"], False),
        ("shop.c1.example", [], False),
    ],
)
def test_ingress_hosts_are_lent_by_exact_name_pattern_or_star(host, lent, expected):
    assert tenancy.host_lent(host, lent) is expected


def test_the_ingress_policies_match_tenant_writes_of_ingresses_and_read_the_served_hosts():
    objects = {obj["metadata"]["name"] + "/" + obj["kind"]: obj for obj in tenancy.tenant_admission_policy()}
    terms = objects["catamaran-tenant-terms/ValidatingAdmissionPolicy"]["spec"]
    assert {"networking.k8s.io"} <= {
        group for r in terms["matchConstraints"]["resourceRules"] for group in r["apiGroups"]
    }
    hosts = objects["catamaran-tenant-ingress-hosts/ValidatingAdmissionPolicy"]["spec"]
    assert hosts["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert hosts["matchConditions"] == terms["matchConditions"]
    binding = objects["catamaran-tenant-ingress-hosts/ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding["paramRef"] == {
        "name": "catamaran-ingress-hosts",
        "namespace": "catamaran-system",
        "parameterNotFoundAction": "Deny",  # no record yet: refused, not let through
    }
