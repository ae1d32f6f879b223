"""The peering a virtual kubelet serves: its ForeignCluster and the credential Secret that it names.

Both are followed with the controller's one watch implementation (kube/informer.py), each selected by
name on the server, so a fix (the Secret created, the ForeignCluster pointing elsewhere) wakes the
virtual kubelet at once; a recheck bounds the wait when a watch breaks.

While serving, the tenant token is kept current in place (CredentialFollower): the provider's manager
renews it in the tenant's credential Secret on the provider, the peering may store a new one in the
consumer-side Secret (after a revocation), and the newest of them is swapped into the provider clients.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from ..constants import TENANT_CREDENTIAL_SECRET, tenant_namespace
from ..kube.clients import BearerToken, CredentialError, kubeconfig_from_text
from ..kube.informer import Informer, call
from ..kube.resources import ForeignCluster
from ..logs import fields
from ..objects import as_dict
from ..tenancy import credential_token

log = logging.getLogger(__name__)


class ForeignClusterError(Exception):
    """The ForeignCluster or its credential cannot be used; `reason` goes on its status."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def provider_kubeconfig(foreign: dict | None, secret: dict | None, origins: tuple[str, str]) -> KubeConfig:
    """The provider's kubeconfig from the ForeignCluster and its Secret (as read; None when missing). Pure."""
    foreign_origin, secret_origin = origins
    if foreign is None:
        raise ForeignClusterError("ForeignClusterMissing", f"{foreign_origin} not found")
    if secret is None:
        raise ForeignClusterError("CredentialMissing", f"{secret_origin} not found")
    key = foreign["spec"]["credentialsSecretRef"].get("key", "kubeconfig")
    encoded = (secret.get("data") or {}).get(key)
    if not encoded:
        raise ForeignClusterError("CredentialInvalid", f"{secret_origin} has no key {key!r}")
    try:
        return kubeconfig_from_text(base64.b64decode(encoded).decode(), secret_origin)
    except (CredentialError, ValueError) as error:
        raise ForeignClusterError("CredentialInvalid", str(error)) from None


class PeeringWatch:
    def __init__(self, local: AsyncClient, namespace: str, name: str):
        self.local = local
        self.namespace = namespace
        self.name = name
        self.changed = asyncio.Event()
        self.foreigns = Informer(
            local,
            ForeignCluster,
            name="foreign-cluster",
            namespace=namespace,
            fields={"metadata.name": name},
            transform=as_dict,
        )
        self.foreigns.on_change(self._foreign_changed)
        self.secrets: Informer | None = None
        self._secret_task: asyncio.Task | None = None

    def _foreign_changed(self, event, key, new, old) -> None:
        # Status updates (our own reports among them) leave the generation alone and change nothing here.
        if event == "MODIFIED" and (new["metadata"].get("generation") == old["metadata"].get("generation")):
            return
        self.changed.set()

    def foreign(self) -> dict | None:
        return self.foreigns.get(self.namespace, self.name)

    def follow_secret(self, name: str) -> Informer:
        if self.secrets is not None and self.secrets.fields == {"metadata.name": name}:
            return self.secrets
        self.stop_secret()
        self.secrets = Informer(
            self.local,
            Secret,
            name="credential",
            namespace=self.namespace,
            fields={"metadata.name": name},
            transform=as_dict,
        )
        self.secrets.on_change(call(self.changed.set))
        self._secret_task = asyncio.get_running_loop().create_task(self.secrets.run())
        return self.secrets

    def stop_secret(self) -> None:
        if self._secret_task is not None:
            self._secret_task.cancel()
        self.secrets, self._secret_task = None, None

    async def read(self, within: float) -> tuple[dict, KubeConfig]:
        """The ForeignCluster and the provider's kubeconfig; ForeignClusterError says what is wrong."""
        foreign_origin = f"ForeignCluster {self.namespace}/{self.name}"
        while True:
            if not await synced(self.foreigns, within):
                raise ForeignClusterError("ForeignClusterUnreadable", f"{foreign_origin}: {self.foreigns.last_error}")
            foreign = self.foreign()
            secret_name = foreign["spec"]["credentialsSecretRef"]["name"] if foreign else None
            secret_origin = f"Secret {self.namespace}/{secret_name}"
            if secret_name is not None:
                secrets = self.follow_secret(secret_name)
                if not await synced(secrets, within):
                    raise ForeignClusterError("CredentialUnreadable", f"{secret_origin}: {secrets.last_error}")
            # Read from the caches without awaiting from here on: a change after this point ends the next wait.
            self.changed.clear()
            foreign = self.foreign()
            if foreign is not None and foreign["spec"]["credentialsSecretRef"]["name"] != secret_name:
                continue  # pointed at another Secret meanwhile
            secret = self.secrets.get(self.namespace, secret_name) if foreign is not None else None
            return foreign, provider_kubeconfig(foreign, secret, (foreign_origin, secret_origin))

    async def until_changed(self, within: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), within)


async def synced(informer: Informer, within: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(informer.synced.wait(), within)
    return informer.synced.is_set()


def kubeconfig_token(text: str) -> str | None:
    """The bearer token of the current context's user in a kubeconfig (None: it has none). Pure."""
    try:
        config = yaml.safe_load(text)
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        user_name = contexts[config["current-context"]]["user"]
        user = next(u["user"] for u in config.get("users") or [] if u["name"] == user_name)
    except (yaml.YAMLError, AttributeError, KeyError, TypeError, StopIteration):
        return None
    token = user.get("token") if isinstance(user, dict) else None
    return token if isinstance(token, str) and token else None


def kubeconfig_with_token(text: str, token: str) -> str:
    """The kubeconfig with its current user's token replaced, dumped as the peering module dumps it. Pure."""
    config = yaml.safe_load(text)
    contexts = {c["name"]: c["context"] for c in config["contexts"]}
    user_name = contexts[config["current-context"]]["user"]
    for user in config["users"]:
        if user["name"] == user_name:
            user["user"]["token"] = token
    return yaml.safe_dump(config)


def token_claims(token: str) -> dict:
    """A JWT's claims, read and not verified (the API server judges the token; this only tells tokens apart). Pure."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def issued_at(token: str) -> int | None:
    """The `iat` claim of a JWT, None when it has none. Pure."""
    try:
        return int(token_claims(token)["iat"])
    except (KeyError, TypeError, ValueError):
        return None


def bound_to(token: str) -> str | None:
    """The uid of the Secret a bound service-account token is bound to, None when unknown. Pure."""
    try:
        return token_claims(token)["kubernetes.io"]["secret"]["uid"] or None
    except (KeyError, TypeError):
        return None


def reissued(candidate: str, current: str) -> bool:
    """Whether `candidate` is bound to another binding Secret than `current`: minted after a revocation. Pure."""
    candidate_binding, current_binding = bound_to(candidate), bound_to(current)
    return candidate_binding is not None and current_binding is not None and candidate_binding != current_binding


def newer_token(candidate: str, current: str) -> bool:
    """Whether `candidate` should replace `current`: not issued earlier, or simply different when either has no
    date.

    Ordering by issue time keeps a stale copy (a peering run that read the previous token) from replacing a
    renewed one; a token minted after a revocation is never the older one. Dates have a one-second grain, so
    a token of the same second is taken (a renewal and a revocation can fall in one second).
    """
    if candidate == current:
        return False
    candidate_at, current_at = issued_at(candidate), issued_at(current)
    if candidate_at is None or current_at is None:
        return True
    return candidate_at >= current_at


class CredentialFollower:
    """Keeps the provider clients' token (one shared BearerToken) the newest one either side holds.

    The provider's credential Secret (renewed by its manager) is watched with the token itself; the
    consumer-side Secret through the peering's informer. A token newer than the consumer-side copy is
    written back there, so a restarted virtual kubelet starts with a valid one.

    Only renewals (the same binding) are taken from the provider's Secret. A token bound to a new binding
    Secret was minted after a revocation: it comes through the peering (the consumer-side Secret) or not
    at all, so a revoked virtual kubelet does not reinstate itself through a watch it opened before.
    """

    def __init__(
        self, local: AsyncClient, provider: AsyncClient, auth: BearerToken, peering: PeeringWatch, consumer_id: str
    ):
        self.local = local
        self.auth = auth
        self.peering = peering
        self.listeners: list = []  # called with no argument after each swap
        self.remote = Informer(
            provider,
            Secret,
            name="tenant-credential",
            namespace=tenant_namespace(consumer_id),
            fields={"metadata.name": TENANT_CREDENTIAL_SECRET},
            transform=lambda secret: credential_token(as_dict(secret)),
        )
        self.remote.on_change(self._remote_changed)
        self._local_secrets = peering.secrets
        if self._local_secrets is not None:
            self._local_secrets.on_change(self._local_changed)
        self._stale = asyncio.Event()  # the consumer-side copy may be older than the token in use

    def tasks(self):
        return [self.remote.run(), self._write_back_loop()]

    def _remote_changed(self, event, key, new, old) -> None:
        if not new:
            return
        if reissued(new, self.auth.token):
            log.info("provider credential re-issued after a revocation; waiting for the peering to bring it")
            return
        self._offer(new, f"Secret {key[0]}/{key[1]} on the provider")

    def _local_changed(self, event, key, new, old) -> None:
        token = self._local_token(new)
        if token:
            self._offer(token, f"Secret {key[0]}/{key[1]}")
        self._stale.set()

    def _offer(self, token: str, source: str) -> None:
        if not newer_token(token, self.auth.token):
            self._stale.set()
            return
        self.auth.token = token
        log.info("provider credential replaced in place", extra=fields(source=source))
        for listener in self.listeners:
            listener()
        self._stale.set()

    def _local_secret(self) -> dict | None:
        foreign = self.peering.foreign()
        if foreign is None or self._local_secrets is None:
            return None
        return self._local_secrets.get(self.peering.namespace, foreign["spec"]["credentialsSecretRef"]["name"])

    def _local_token(self, secret: dict | None) -> str | None:
        text = self._local_text(secret)
        return kubeconfig_token(text) if text else None

    def _local_text(self, secret: dict | None) -> str | None:
        foreign = self.peering.foreign()
        if secret is None or foreign is None:
            return None
        encoded = (secret.get("data") or {}).get(foreign["spec"]["credentialsSecretRef"].get("key", "kubeconfig"))
        try:
            return base64.b64decode(encoded).decode() if encoded else None
        except ValueError:
            return None

    async def _write_back_loop(self) -> None:
        while True:
            await self._stale.wait()
            self._stale.clear()
            try:
                await self._write_back()
            except Exception as error:  # the API server may be unreachable: try again shortly
                log.warning("cannot store the renewed credential", extra=fields(error=type(error).__name__))
                await asyncio.sleep(5)
                self._stale.set()

    async def _write_back(self) -> None:
        secret = self._local_secret()
        text = self._local_text(secret)
        stored = kubeconfig_token(text) if text else None
        if stored is None or not newer_token(self.auth.token, stored):
            return  # the same token, a newer one (its change event swaps it in), or no token to replace
        key = self.peering.foreign()["spec"]["credentialsSecretRef"].get("key", "kubeconfig")
        body = {
            # Only over the version read: a Secret changed meanwhile is judged again when its event comes.
            "metadata": {"resourceVersion": secret["metadata"]["resourceVersion"]},
            "data": {key: base64.b64encode(kubeconfig_with_token(text, self.auth.token).encode()).decode()},
        }
        try:
            await self.local.patch(
                Secret, secret["metadata"]["name"], body, namespace=self.peering.namespace, patch_type=PatchType.MERGE
            )
        except ApiError as error:
            if error.status.code != 409:
                raise
            return
        log.info("renewed provider credential stored", extra=fields(secret=secret["metadata"]["name"]))
