"""Tenant credentials: a bound, expiring token per tenant, minted and renewed by the provider's manager.

In each tenant namespace the credential Secret holds the tenant's current token (TokenRequest for the
tenant's ServiceAccount, bound to the namespace's binding Secret, living as long as the tenant's terms
say). A new token is minted when the Secret is missing (deleting it is how a rotation is asked for),
when the binding Secret was replaced (deleting it revoked every token bound to it), when the lifetime
in the terms changed, and once `renew_fraction` of the token's life has passed: a timer per tenant
through the work queue, no polling. The consumer's virtual kubelet follows the Secret and swaps the
token in place. Tokens never reach a log line, an Event or an error message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret, ServiceAccount

from ..constants import TENANT_CREDENTIAL_SECRET, TENANT_SERVICE_ACCOUNT, TENANT_TOKEN_BINDING_SECRET
from ..kube.events import EventRecorder
from ..kube.informer import Informer
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, reference
from ..tenancy import (
    ANNOTATION_CREDENTIAL_EXPIRES_AT,
    CREDENTIAL_RENEW_FRACTION,
    credential_renewal,
    credential_secret,
    credential_token_request,
    token_binding_secret,
)

log = logging.getLogger(__name__)


class CredentialController:
    name = "tenant-credentials"

    def __init__(
        self,
        client: AsyncClient,
        tenants: Informer,
        lifetime: Callable[[str], int],
        events: EventRecorder,
        *,
        renew_fraction: float = CREDENTIAL_RENEW_FRACTION,
        wait_for: tuple[Informer, ...] = (),
    ):
        if not 0 < renew_fraction < 1:
            raise ValueError(f"credential renew fraction must be between 0 and 1, got {renew_fraction}")
        self.client = client
        self.tenants = tenants  # tenant namespace -> consumer cluster id
        self.lifetime = lifetime  # tenant namespace -> seconds its tokens live
        self.events = events
        self.renew_fraction = renew_fraction
        self.wait_for = wait_for
        # Cluster-wide, each selected by name on the server, so the manager's RBAC can name both Secrets.
        self.credentials = Informer(
            client,
            Secret,
            name="tenant-credentials",
            fields={"metadata.name": TENANT_CREDENTIAL_SECRET},
            transform=as_dict,
        )
        self.bindings = Informer(
            client,
            Secret,
            name="tenant-token-bindings",
            fields={"metadata.name": TENANT_TOKEN_BINDING_SECRET},
            transform=lambda secret: secret.metadata.uid,
        )
        self.queue = WorkQueue(self.name, self.reconcile, workers=2)
        tenants.on_change(self._changed)
        self.credentials.on_change(self._changed)
        self.bindings.on_change(self._changed)

    def _changed(self, event, key, new, old) -> None:
        namespace = key[1] if key[0] is None else key[0]  # tenants are Namespaces: the key's name is the namespace
        self.queue.add(namespace)

    def terms_changed(self, namespace: str) -> None:
        self.queue.add(namespace)

    def tasks(self):
        return [self.credentials.run(), self.bindings.run(), self._run()]

    async def _run(self):
        for informer in (self.tenants, self.credentials, self.bindings, *self.wait_for):
            await informer.synced.wait()
        await self.queue.run()

    async def reconcile(self, namespace: str) -> float | None:
        consumer = self.tenants.get(None, namespace)
        if consumer is None:
            return None
        lifetime = self.lifetime(namespace)
        binding_uid = self.bindings.get(namespace, TENANT_TOKEN_BINDING_SECRET)
        credential = self.credentials.get(namespace, TENANT_CREDENTIAL_SECRET)
        reason, delay = credential_renewal(credential, binding_uid or "", lifetime, time.time(), self.renew_fraction)
        if reason is None:
            return delay
        # Minting is the one expensive, visible step: confirm the cached view first (our own last write may
        # not have come back through the watches yet), so that one change never mints two tokens.
        try:
            binding_uid, credential = await self._read(namespace, consumer)
        except ApiError as error:
            if _terminating(error):
                return None  # the tenant is being removed; its Secrets go with its namespace
            raise
        reason, delay = credential_renewal(credential, binding_uid, lifetime, time.time(), self.renew_fraction)
        if reason is None:
            return delay
        secret = await self._mint(namespace, consumer, binding_uid, lifetime)
        expires = secret["metadata"]["annotations"][ANNOTATION_CREDENTIAL_EXPIRES_AT]
        log.info(
            "tenant credential issued",
            extra=fields(namespace=namespace, reason=reason, lifetime=lifetime, expires=expires),
        )
        self.events.later(
            reference(secret),
            "Normal",
            "CredentialIssued",
            f"new token for ServiceAccount {TENANT_SERVICE_ACCOUNT} ({reason}); expires at {expires}",
        )
        return self.renew_fraction * lifetime

    async def _read(self, namespace: str, consumer: str) -> tuple[str, dict | None]:
        """The binding Secret's uid (made when missing: the peering's, but tokens need it) and the credential."""
        try:
            binding = await self.client.get(Secret, TENANT_TOKEN_BINDING_SECRET, namespace=namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
            binding = await self.client.apply(Secret.from_dict(token_binding_secret(consumer)), force=True)
            log.info("tenant token binding created", extra=fields(namespace=namespace))
        try:
            credential = as_dict(await self.client.get(Secret, TENANT_CREDENTIAL_SECRET, namespace=namespace))
        except ApiError as error:
            if error.status.code != 404:
                raise
            credential = None
        return binding.metadata.uid, credential

    async def _mint(self, namespace: str, consumer: str, binding_uid: str, lifetime: int) -> dict:
        body = credential_token_request(binding_uid, lifetime)["spec"]
        request = ServiceAccount.Token(
            metadata=ObjectMeta(),
            spec=TokenRequestSpec(
                audiences=[],
                expirationSeconds=body["expirationSeconds"],
                boundObjectRef=BoundObjectReference(**body["boundObjectRef"]),
            ),
        )
        issued_at = time.time()
        issued = await self.client.create(request, TENANT_SERVICE_ACCOUNT, namespace=namespace)
        expires = issued.status.expirationTimestamp
        expires_at = expires.timestamp() if expires else issued_at + lifetime
        manifest = credential_secret(consumer, issued.status.token, issued_at, expires_at, lifetime, binding_uid)
        return as_dict(await self.client.apply(Secret.from_dict(manifest), force=True))


def _terminating(error: ApiError) -> bool:
    return error.status.code in (403, 404) and "being terminated" in (error.status.message or "")
