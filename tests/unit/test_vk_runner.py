"""The virtual kubelet's start-up: what it waits for, and that it waits by watching rather than polling.

An in-memory stand-in for the local API server replaces lightkube's client; no cluster is involved.
"""

from __future__ import annotations

import asyncio
import base64
import time
from types import SimpleNamespace

import pytest
from lightkube.resources.core_v1 import Secret

from catamaran.kube.resources import ForeignCluster
from catamaran.vk.runner import ForeignClusterError, VirtualKubelet, Watched

NAMESPACE = "catamaran-system"
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: p, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: p, user: u}}]
current-context: c
"""


class Listing:
    def __init__(self, items: list[dict], version: str):
        self.items, self.resourceVersion = items, version

    async def __aiter__(self):
        for item in self.items:
            yield item


class FakeClient:
    """Objects by (resource, name); every list answers at `version`; watches follow `watch_script`."""

    def __init__(self, objects: dict | None = None, version: str = "41", watch_script=None):
        self.objects = objects or {}
        self.version = version
        self.watch_script = watch_script or {}
        self.watches: list[tuple] = []

    def list(self, resource, *, namespace, fields):
        assert namespace == NAMESPACE
        found = self.objects.get((resource, fields["metadata.name"]))
        return Listing([found] if found else [], self.version)

    def watch(self, resource, *, namespace, fields, resource_version, server_timeout):
        self.watches.append((resource, namespace, fields["metadata.name"], resource_version))
        return self.watch_script.get(resource, never)()


async def never():
    await asyncio.Event().wait()
    yield  # pragma: no cover


def after(delay: float, *events: tuple[str, int]):
    """A watch that sends these (event, generation) pairs after `delay`, then stays open."""

    async def watch():
        await asyncio.sleep(delay)
        for event, generation in events:
            yield event, SimpleNamespace(metadata=SimpleNamespace(generation=generation))
        await asyncio.Event().wait()

    return watch


async def broken():
    raise ConnectionError("refused")
    yield  # pragma: no cover


def foreign(secret: str = "p-credentials") -> dict:
    return {
        "metadata": {"name": "p", "generation": 3},
        "spec": {"clusterID": "p", "credentialsSecretRef": {"name": secret}},
    }


def secret(text: str) -> dict:
    return {"metadata": {"name": "p-credentials"}, "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}}


def kubelet(client: FakeClient) -> VirtualKubelet:
    return VirtualKubelet(client, foreign_cluster="p", namespace=NAMESPACE, consumer_id="c", node_ip="127.0.0.1")


def connect_error(client: FakeClient) -> ForeignClusterError:
    with pytest.raises(ForeignClusterError) as caught:
        asyncio.run(kubelet(client)._connect())
    return caught.value


def test_missing_foreign_cluster_is_watched_from_the_version_it_was_missing_at():
    error = connect_error(FakeClient(version="41"))
    assert error.reason == "ForeignClusterMissing"
    assert error.watch == (Watched(ForeignCluster, "p", "41", None),)


def test_missing_secret_is_watched_along_with_the_foreign_cluster_that_names_it():
    error = connect_error(FakeClient({(ForeignCluster, "p"): foreign()}))
    assert error.reason == "CredentialMissing"
    assert "p-credentials" in str(error)
    # The ForeignCluster's generation, so that its status updates do not count as a change.
    assert error.watch == (Watched(ForeignCluster, "p", "41", 3), Watched(Secret, "p-credentials", "41", None))


def test_unusable_secret_is_watched_for_a_fix():
    client = FakeClient({(ForeignCluster, "p"): foreign(), (Secret, "p-credentials"): secret("[not: yaml")})
    error = connect_error(client)
    assert error.reason == "CredentialInvalid"
    assert [w.resource for w in error.watch] == [ForeignCluster, Secret]


def test_usable_peering_connects():
    client = FakeClient({(ForeignCluster, "p"): foreign(), (Secret, "p-credentials"): secret(KUBECONFIG)})

    async def connect():
        found, provider = await kubelet(client)._connect()
        await provider.close()
        return found

    assert asyncio.run(connect())["spec"]["clusterID"] == "p"


def wait_seconds(client: FakeClient, watched, recheck_after: float) -> float:
    start = time.monotonic()
    asyncio.run(kubelet(client)._until_changed(watched, recheck_after))
    return time.monotonic() - start


def test_first_event_ends_the_wait_long_before_the_fallback():
    client = FakeClient(watch_script={ForeignCluster: after(0.05, ("ADDED", 1))})
    watched = (Watched(ForeignCluster, "p", "41"), Watched(Secret, "s", "41"))
    waited = wait_seconds(client, watched, recheck_after=30)
    assert waited < 5
    assert client.watches == [
        (ForeignCluster, NAMESPACE, "p", "41"),
        (Secret, NAMESPACE, "s", "41"),
    ]


def test_broken_watch_waits_for_the_fallback_instead_of_spinning():
    client = FakeClient(watch_script={ForeignCluster: broken})
    assert wait_seconds(client, (Watched(ForeignCluster, "p", "41"),), recheck_after=0.3) >= 0.25
    assert len(client.watches) == 1


def test_nothing_to_watch_still_rechecks_after_the_fallback():
    assert 0.25 <= wait_seconds(FakeClient(), (), recheck_after=0.3) < 5


def test_status_updates_do_not_end_the_wait_but_spec_changes_do():
    status_only = FakeClient(watch_script={ForeignCluster: after(0, ("MODIFIED", 3), ("MODIFIED", 3))})
    assert wait_seconds(status_only, (Watched(ForeignCluster, "p", "41", 3),), recheck_after=0.3) >= 0.25
    respecified = FakeClient(watch_script={ForeignCluster: after(0, ("MODIFIED", 3), ("MODIFIED", 4))})
    assert wait_seconds(respecified, (Watched(ForeignCluster, "p", "41", 3),), recheck_after=30) < 5
    deleted = FakeClient(watch_script={ForeignCluster: after(0, ("DELETED", 3))})
    assert wait_seconds(deleted, (Watched(ForeignCluster, "p", "41", 3),), recheck_after=30) < 5
