"""What every reflected kind declares: its resource, its name on the provider, and the fields it owns. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from ...constants import DEFAULT_ALLOWED_SERVICE_TYPES
from .policy import ReflectionSettings


@dataclass(frozen=True)
class Context:
    settings: ReflectionSettings
    own_nodes: frozenset[str]  # the peering's virtual nodes: endpoints of pods already on the provider are left to it
    translate: Callable[[str], str] = lambda ip: ip  # a consumer address as the provider sees it
    # The provider's terms for what its tenant writes (its ResourceOffer): Service types it allows, and the ranges
    # EndpointSlice addresses may lie in (None: not published, so not filtered here; its admission still decides).
    service_types: tuple = DEFAULT_ALLOWED_SERVICE_TYPES
    endpoint_ranges: tuple | None = None
    network_down: bool = False  # the fabric's tunnel is down: reflected endpoints are not ready


class ReflectedKind:
    """One kind; subclasses override what differs. `content` is the object as reflection owns it."""

    setting: str  # its key in ForeignCluster spec.reflection.kinds
    resource: type  # the lightkube resource, namespaced
    api_version: str
    kind: str
    watched_per_namespace = False  # True: local objects watched only in offloaded namespaces (least privilege)
    keeps_allocations = False
    recreates_on_immutable = True  # an immutable field changed: the copy is deleted and created again
    # Copies that hold data: a policy change or the kind turned off stops new copies but deletes none;
    # only the local object's deletion or the end of the offloading does.
    keeps_copies_on_policy_change = False  # copies hold fields the provider allocated: read them before a replace

    def with_allocations(self, body: dict, current: dict) -> dict:
        return body

    def remote_name(self, local_name: str) -> str:
        return local_name

    def local_name(self, remote_name: str) -> str | None:
        """The local object a copy of this name comes from; None when no local object maps to it."""
        return remote_name

    def skipped(self, local: dict, context: Context) -> bool:
        """Objects of this kind that are never reflected, whatever the policy."""
        return False

    def adjustments(self, local: dict, context: Context) -> list[str]:
        """What the provider's terms change in the copy of `local`, for a Warning Event on it (empty: nothing)."""
        return []

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        """The reflected fields of a local object (`local`), or the same fields read back from a copy."""
        raise NotImplementedError

    def metadata(self, obj: dict, context: Context) -> dict:
        meta = obj.get("metadata") or {}
        result = {}
        labels = context.settings.labels(meta.get("labels"))
        annotations = context.settings.annotations(meta.get("annotations"))
        if labels:
            result["labels"] = labels
        if annotations:
            result["annotations"] = annotations
        return result


def digest(content: dict) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def present(**fields) -> dict:
    """The fields that are set: an unset field and an empty one read back alike from the API server."""
    return {key: value for key, value in fields.items() if value not in (None, {}, [], "")}
