"""The tenant's bound credential: manifests, renewal decisions, and the virtual kubelet's token swap."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import yaml
from lightkube import KubeConfig

from catamaran import tenancy
from catamaran.constants import (
    TENANT_CLUSTER_ROLE,
    TENANT_CREDENTIAL_SECRET,
    TENANT_TOKEN_BINDING_SECRET,
)
from catamaran.kube.clients import BearerToken, async_client, bearer_token
from catamaran.vk.kubelet.channel import ProviderChannel
from catamaran.vk.peering import bound_to, issued_at, kubeconfig_token, kubeconfig_with_token, newer_token, reissued

LIFETIME = 1000
ISSUED = 1_700_000_000.0


def secret(issued=ISSUED, expires=ISSUED + LIFETIME, lifetime=LIFETIME, bound_to="uid-1", token="t0k3n") -> dict:
    return tenancy.credential_secret("c1", token, issued, expires, lifetime, bound_to)


def jwt(iat: int, binding_uid: str = "uid-1") -> str:
    """Claims shaped like a service-account token bound to a Secret; the signature is never checked here."""

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {"iat": iat, "sub": "x", "kubernetes.io": {"secret": {"name": "binding", "uid": binding_uid}}}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


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


def kubeconfig_text(token: str, ca_data: str = "Q0E=") -> str:
    return yaml.safe_dump(tenancy.tenant_kubeconfig("https://10.0.0.1:6443", ca_data, token, "p1", "c1"))


def test_kubeconfig_token_swap_matches_what_the_peering_writes():
    old = kubeconfig_text("old-token")
    assert kubeconfig_token(old) == "old-token"
    # Byte for byte what the peering module would store with the new token: a later peering run changes nothing.
    assert kubeconfig_with_token(old, "new-token") == kubeconfig_text("new-token")
    assert kubeconfig_token("users: [") is None
    assert kubeconfig_token(yaml.safe_dump({"clusters": []})) is None
    client_cert = yaml.safe_load(old)
    client_cert["users"][0]["user"] = {"client-certificate-data": "x", "client-key-data": "y"}
    assert kubeconfig_token(yaml.safe_dump(client_cert)) is None


def test_newer_token_orders_by_issue_time_when_known():
    early, late = jwt(100), jwt(200)
    assert issued_at(late) == 200
    assert newer_token(late, early)
    assert not newer_token(early, late)  # a stale copy never replaces a renewed token
    assert not newer_token(late, late)
    assert newer_token(jwt(200, "uid-2"), late)  # the same second: a re-issue right after a renewal is taken
    assert issued_at("opaque") is None
    assert newer_token("opaque-2", "opaque-1")  # without dates, a different token is taken
    assert newer_token(late, "opaque-1")


def test_a_token_bound_to_a_new_binding_is_a_reissue():
    renewal, current = jwt(200, "uid-1"), jwt(100, "uid-1")
    after_revocation = jwt(300, "uid-2")
    assert bound_to(after_revocation) == "uid-2"
    assert not reissued(renewal, current)
    assert reissued(after_revocation, current)
    assert not reissued("opaque", current)  # unknown binding: judged by issue time alone
    assert bound_to("not.a.jwt") is None


def test_swapped_token_reaches_requests_and_websocket_headers():
    async def scenario():
        # No CA: the default trust store, since building the channel's TLS context needs a real one.
        config = KubeConfig.from_dict(yaml.safe_load(kubeconfig_text("first", ca_data="")))
        client = async_client(config, None, "tests")
        token = bearer_token(client)
        assert isinstance(token, BearerToken)
        assert "first" not in repr(token)
        channel = ProviderChannel(client, config.get())
        http = client._client._client
        assert (await channel._authorization()) == {"Authorization": "Bearer first"}
        token.token = "second"
        request = http.build_request("GET", "/api")
        flow = http.auth.auth_flow(request)
        assert next(flow).headers["Authorization"] == "Bearer second"
        assert (await channel._authorization()) == {"Authorization": "Bearer second"}
        await client.close()

    asyncio.run(scenario())


def test_no_replaceable_token_for_other_credentials():
    config = yaml.safe_load(kubeconfig_text("x", ca_data=""))
    config["users"][0]["user"] = {"username": "u", "password": "p"}

    async def scenario():
        client = async_client(KubeConfig.from_dict(config), None, "tests")
        assert bearer_token(client) is None
        await client.close()

    asyncio.run(scenario())
