"""The peering a virtual kubelet serves: its ForeignCluster and the credential Secret that it names.

Both are followed with the controller's one watch implementation (kube/informer.py), each selected by
name on the server, so a fix (the Secret created, the ForeignCluster pointing elsewhere) wakes the
virtual kubelet at once; a recheck bounds the wait when a watch breaks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib

from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Secret

from ..kube.clients import CredentialError, kubeconfig_from_text
from ..kube.informer import Informer
from ..kube.resources import ForeignCluster
from ..objects import as_dict


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
        self.secrets.on_change(lambda event, key, new, old: self.changed.set())
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
