"""The peering as the virtual kubelet reads it (vk/peering.py): what it waits for at start-up, by watching rather
than polling, and the tenant token it swaps into the provider kubeconfig.

An in-memory stand-in for the local API server answers the lists and watches of kube/informer.py;
no cluster is involved.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from types import SimpleNamespace

import pytest
import yaml
from lightkube.resources.core_v1 import Secret

from catamaran.kube import informer
from catamaran.kube.resources import ForeignCluster
from catamaran.vk.peering import (
    ForeignClusterError,
    PeeringWatch,
    bound_to,
    issued_at,
    kubeconfig_token,
    kubeconfig_with_token,
    newer_token,
    provider_kubeconfig,
    reissued,
)
from tests.unit.kubeconfigs import kubeconfig_text

NAMESPACE = "catamaran-system"
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: p, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: p, user: u}}]
current-context: c
"""
ORIGINS = ("ForeignCluster catamaran-system/p", "Secret catamaran-system/p-credentials")


def as_object(data: dict):
    """What lightkube hands the informer: attribute access to metadata, to_dict() for the rest."""
    meta = SimpleNamespace(namespace=NAMESPACE, resourceVersion="1", **data["metadata"])
    return SimpleNamespace(metadata=meta, to_dict=lambda: data)


class Listing:
    def __init__(self, items: list[dict], version: str):
        self.items, self.resourceVersion = items, version

    async def __aiter__(self):
        for item in self.items:
            yield as_object(item)


class FakeClient:
    """Objects by (resource, name); every list answers at `version`; watches follow `watch_script`."""

    def __init__(self, objects: dict | None = None, version: str = "41", watch_script=None, refuse: bool = False):
        self.objects = objects or {}
        self.version = version
        self.watch_script = watch_script or {}
        self.refuse = refuse
        self.lists: list[tuple] = []
        self.watches: list[tuple] = []

    def list(self, resource, *, chunk_size, namespace, labels, fields):
        assert namespace == NAMESPACE
        if self.refuse:
            raise ConnectionError("connection refused")
        self.lists.append((resource, fields["metadata.name"]))
        found = self.objects.get((resource, fields["metadata.name"]))
        return Listing([found] if found else [], self.version)

    def watch(self, resource, *, resource_version, server_timeout, namespace, labels, fields):
        self.watches.append((resource, fields["metadata.name"], resource_version))
        return self.watch_script.get(resource, never)()


class FakeClientListWatch:
    """The informers' requests (kube.informer.ListWatch) answered by a FakeClient instead of through lightkube."""

    def __init__(
        self, client: FakeClient, resource, *, namespace, labels, fields, server_timeout, read_timeout, plain=False
    ):
        assert not plain, "the peering's informers hand out lightkube models"
        self.client, self.resource, self.server_timeout = client, resource, server_timeout
        self.selectors = {"namespace": namespace, "labels": labels, "fields": fields}

    def list(self):
        return self.client.list(self.resource, chunk_size=500, **self.selectors)

    @contextlib.asynccontextmanager
    async def watch(self, version: str):
        yield self.client.watch(
            self.resource, resource_version=version, server_timeout=self.server_timeout, **self.selectors
        )


@pytest.fixture(autouse=True)
def _informers_ask_the_fake_client(monkeypatch):
    monkeypatch.setattr(informer, "LightkubeListWatch", FakeClientListWatch)


async def never():
    await asyncio.Event().wait()
    yield  # pragma: no cover


def after(delay: float, *events: tuple[str, dict]):
    """A watch that sends these (event, object) pairs after `delay`, then stays open."""

    async def watch():
        await asyncio.sleep(delay)
        for event, data in events:
            yield event, as_object(data)
        await asyncio.Event().wait()

    return watch


def foreign(secret: str = "p-credentials", generation: int = 3) -> dict:
    return {
        "metadata": {"name": "p", "generation": generation},
        "spec": {"clusterID": "p", "credentialsSecretRef": {"name": secret}},
    }


def secret(text: str) -> dict:
    return {"metadata": {"name": "p-credentials"}, "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


async def read(client: FakeClient, within: float = 5):
    peering = PeeringWatch(client, NAMESPACE, "p")
    task = asyncio.get_running_loop().create_task(peering.foreigns.run())
    try:
        return await peering.read(within)
    finally:
        task.cancel()
        peering.stop_secret()


def read_error(client: FakeClient, within: float = 5) -> ForeignClusterError:
    with pytest.raises(ForeignClusterError) as caught:
        asyncio.run(read(client, within))
    return caught.value


def test_missing_foreign_cluster_is_reported_and_watched_from_its_list():
    client = FakeClient(version="41")
    error = read_error(client)
    assert error.reason == "ForeignClusterMissing"
    assert client.watches == [(ForeignCluster, "p", "41")]


def test_missing_secret_is_watched_by_name_along_with_the_foreign_cluster():
    client = FakeClient({(ForeignCluster, "p"): foreign()})
    error = read_error(client)
    assert error.reason == "CredentialMissing"
    assert "p-credentials" in str(error)
    assert client.watches == [(ForeignCluster, "p", "41"), (Secret, "p-credentials", "41")]


def test_unusable_secret_is_reported_without_its_content():
    error = read_error(FakeClient({(ForeignCluster, "p"): foreign(), (Secret, "p-credentials"): secret("[x: s3cr3t")}))
    assert error.reason == "CredentialInvalid"
    assert "s3cr3t" not in str(error)


def test_usable_peering_gives_the_provider_kubeconfig():
    client = FakeClient({(ForeignCluster, "p"): foreign(), (Secret, "p-credentials"): secret(KUBECONFIG)})
    found, config = asyncio.run(read(client))
    assert found["spec"]["clusterID"] == "p"
    assert config.get().cluster.server == "https://127.0.0.1:1"


def test_an_unreadable_foreign_cluster_names_the_error_after_the_recheck_bound():
    started = time.monotonic()
    error = read_error(FakeClient(refuse=True), within=0.3)
    assert error.reason == "ForeignClusterUnreadable"
    assert "connection refused" in str(error)
    assert time.monotonic() - started < 5


def test_key_missing_from_the_secret_is_named():
    with pytest.raises(ForeignClusterError, match="has no key 'kubeconfig'"):
        provider_kubeconfig(foreign(), {"metadata": {}, "data": {}}, ORIGINS)


async def changed_within(client: FakeClient, within: float) -> bool:
    peering = PeeringWatch(client, NAMESPACE, "p")
    task = asyncio.get_running_loop().create_task(peering.foreigns.run())
    try:
        with pytest.raises(ForeignClusterError):
            await peering.read(5)
        started = time.monotonic()
        await peering.until_changed(within)
        return time.monotonic() - started < within * 0.9
    finally:
        task.cancel()
        peering.stop_secret()


def test_the_foreign_cluster_appearing_ends_the_wait_long_before_the_recheck():
    client = FakeClient(watch_script={ForeignCluster: after(0.05, ("ADDED", foreign()))})
    assert asyncio.run(changed_within(client, 30))


def test_the_secret_appearing_ends_the_wait():
    client = FakeClient(
        {(ForeignCluster, "p"): foreign()}, watch_script={Secret: after(0.05, ("ADDED", secret(KUBECONFIG)))}
    )
    assert asyncio.run(changed_within(client, 30))


def test_status_updates_do_not_end_the_wait_but_spec_changes_do():
    status_only = FakeClient(
        {(ForeignCluster, "p"): foreign()},
        watch_script={ForeignCluster: after(0.1, ("MODIFIED", foreign()), ("MODIFIED", foreign()))},
    )
    assert not asyncio.run(changed_within(status_only, 0.5))
    respecified = FakeClient(
        {(ForeignCluster, "p"): foreign()},
        watch_script={ForeignCluster: after(0.1, ("MODIFIED", foreign(secret="other", generation=4)))},
    )
    assert asyncio.run(changed_within(respecified, 30))


def jwt(iat: int, binding_uid: str = "uid-1") -> str:
    """Claims shaped like a service-account token bound to a Secret; the signature is never checked here."""

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    claims = {"iat": iat, "sub": "x", "kubernetes.io": {"secret": {"name": "binding", "uid": binding_uid}}}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


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
