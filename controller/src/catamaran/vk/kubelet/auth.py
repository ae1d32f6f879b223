"""Who is calling the kubelet API, and may they: as a kubelet's webhook authentication and authorization.

Callers present a client certificate (verified against the cluster's client CA during the TLS
handshake) or a bearer token (a TokenReview). Each request is then authorized by a
SubjectAccessReview on the node subresource its path maps to, as the kubelet maps it, for the verb
its route needs (server.py `Route.verb`): not the verb of its HTTP method, as the kubelet takes it,
since a WebSocket upgrade is a GET and would run a command with only `get` on `nodes/proxy`.
Decisions are cached briefly, in bounded caches, so metrics-server's scrapes and the API server's
streams do not cost a review each.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

from ...objects import as_dict
from .http import HttpError, Request

log = logging.getLogger(__name__)

ALLOWED_TTL = 30.0
DENIED_TTL = 10.0
TOKEN_TTL = 30.0
CACHE_ENTRIES = 4096


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def subresources_for(path: str) -> list[str]:
    """The node subresources that grant a path, most specific first (the kubelet's mapping, then nodes/proxy)."""
    if path.startswith("/stats"):
        return ["stats"]
    if path.startswith("/metrics"):
        return ["metrics"]
    if path.startswith("/logs"):
        return ["log"]
    if path.startswith("/healthz"):
        return ["healthz", "proxy"]
    if path.startswith("/pods"):
        return ["pods", "proxy"]
    return ["proxy"]


def user_from_certificate(certificate: dict) -> User | None:
    """CN is the user name and each O a group, as the API server reads client certificates."""
    names: list[str] = []
    groups: list[str] = []
    for rdn in certificate.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                names.append(value)
            elif key == "organizationName":
                groups.append(value)
    if not names:
        return None
    return User(name=names[0], groups=tuple(groups))


class _Expiring:
    def __init__(self, size: int = CACHE_ENTRIES):
        self.size = size
        self.entries: OrderedDict = OrderedDict()

    def get(self, key):
        entry = self.entries.get(key)
        if entry is None or entry[0] < time.monotonic():
            self.entries.pop(key, None)
            return None
        return entry[1]

    def put(self, key, value, ttl: float) -> None:
        self.entries[key] = (time.monotonic() + ttl, value)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


class Gatekeeper:
    """Authenticate, then authorize, one request; raises HttpError 401 or 403 with the reason."""

    def __init__(self, local: AsyncClient, node_name: str):
        self.local = local
        self.node_name = node_name
        self.tokens = _Expiring()
        self.decisions = _Expiring()

    async def check(self, request: Request, verb: str) -> User:
        """Authenticate the caller, then authorize `verb` on the path's node subresources."""
        user = await self.authenticate(request)
        await self.authorize(user, request, verb)
        request.user = user
        return user

    async def authenticate(self, request: Request) -> User:
        if request.peer_certificate:
            user = user_from_certificate(request.peer_certificate)
            if user:
                return user
        authorization = request.header("authorization")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return await self._review_token(token.strip())
        raise HttpError(401, "Unauthorized: no client certificate or bearer token")

    async def _review_token(self, token: str) -> User:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self.tokens.get(key)
        if cached is not None:
            if isinstance(cached, User):
                return cached
            raise HttpError(401, "Unauthorized: token rejected")
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            result = as_dict(await self.local.create(TokenReview.from_dict(review)))
        except ApiError as error:
            log.warning("token review failed", extra={"status": error.status.code})
            raise HttpError(503, "Unauthorized: token review unavailable") from None
        status = result.get("status") or {}
        if not status.get("authenticated"):
            self.tokens.put(key, False, DENIED_TTL)
            raise HttpError(401, "Unauthorized: token rejected")
        info = status.get("user") or {}
        user = User(
            name=info.get("username", ""),
            groups=tuple(info.get("groups") or ()),
            uid=info.get("uid") or "",
            extra=tuple(sorted((k, tuple(v)) for k, v in (info.get("extra") or {}).items())),
        )
        self.tokens.put(key, user, TOKEN_TTL)
        return user

    async def authorize(self, user: User, request: Request, verb: str) -> None:
        for subresource in subresources_for(request.path):
            if await self._allowed(user, verb, subresource):
                return
        raise HttpError(
            403,
            f"Forbidden (user={user.name}, verb={verb}, resource=nodes, "
            f"subresource(s)={subresources_for(request.path)}, name={self.node_name})",
        )

    async def _allowed(self, user: User, verb: str, subresource: str) -> bool:
        key = (user, verb, subresource)
        cached = self.decisions.get(key)
        if cached is not None:
            return cached
        spec = {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": {
                "verb": verb,
                "resource": "nodes",
                "subresource": subresource,
                "name": self.node_name,
            },
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        try:
            result = as_dict(await self.local.create(SubjectAccessReview.from_dict(review)))
        except ApiError as error:
            log.warning("subject access review failed", extra={"status": error.status.code})
            raise HttpError(503, "authorization unavailable") from None
        allowed = bool((result.get("status") or {}).get("allowed"))
        self.decisions.put(key, allowed, ALLOWED_TTL if allowed else DENIED_TTL)
        return allowed
