"""Secrets: data, type and immutability. Service-account token Secrets become Opaque on the provider,
whose token controller would otherwise fill or delete them; the token reflector's bindings stay home."""

from __future__ import annotations

from lightkube.resources.core_v1 import Secret

from ...constants import ANNOTATION_TOKEN_FOR_POD, ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT
from .kind import Context, ReflectedKind, present

SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
TOKEN_SECRET_PREFIX = "catamaran-token."  # the token reflector's Secrets in the twin
# The token reflector's Secrets on the consumer, which tokens are bound to (tokens.py): nothing to reflect.
TOKEN_BINDING_TYPE = "catamaran.io/token-binding"


class Secrets(ReflectedKind):
    setting = "secrets"
    resource = Secret
    api_version = "v1"
    kind = "Secret"
    watched_per_namespace = True  # a cluster-wide Secret watch would read every credential of the consumer

    def local_name(self, remote_name: str) -> str | None:
        return None if remote_name.startswith(TOKEN_SECRET_PREFIX) else remote_name

    def skipped(self, local: dict, context: Context) -> bool:
        return local.get("type") == TOKEN_BINDING_TYPE

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        kind = obj.get("type") or "Opaque"
        if kind == SERVICE_ACCOUNT_TOKEN_TYPE:
            kind = "Opaque"
        return present(
            metadata=self.metadata(obj, context),
            type=kind,
            data=obj.get("data"),
            immutable=obj.get("immutable") or None,
        )


def is_token_secret(remote: dict) -> bool:
    """Secrets the token reflector writes live among the reflected ones but are not theirs."""
    annotations = (remote.get("metadata") or {}).get("annotations") or {}
    return ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT in annotations or ANNOTATION_TOKEN_FOR_POD in annotations
