"""Build lightkube AsyncClients from kubeconfig files, kubeconfig Secrets or the pod's service account.

Also the informers' list and watch through such a client (LightkubeListWatch)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterable

import httpx2
import msgspec
import yaml
from lightkube import ALL_NS, AsyncClient, KubeConfig
from lightkube.core import decoders
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.core.resource import NamespacedResource
from lightkube.core.selector import build_selector

from .. import metrics
from . import request_builder
from .transport import AiohttpTransport


class CredentialError(Exception):
    """A kubeconfig or credential that cannot be used; the message names what is wrong."""


def kubeconfig_from_file(path: str | None, context: str | None = None) -> KubeConfig:
    try:
        if path:
            config = KubeConfig.from_file(path)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            return KubeConfig.from_service_account()
        else:
            config = KubeConfig.from_env()
        if context and context not in config.contexts:
            raise CredentialError(f"kubeconfig {path or '$KUBECONFIG'} has no context {context!r}")
        return config
    except (ConfigError, OSError, yaml.YAMLError) as error:
        raise CredentialError(f"cannot load kubeconfig {path or '$KUBECONFIG'}: {error}") from error


def kubeconfig_from_text(text: str, origin: str) -> KubeConfig:
    """A kubeconfig held in a Secret; `origin` names the Secret in error messages, never its content."""
    try:
        data = yaml.safe_load(text)
        if not isinstance(data, dict) or not data.get("clusters"):
            raise CredentialError(f"{origin} does not hold a kubeconfig (no clusters)")
        return KubeConfig.from_dict(data)
    except (ConfigError, yaml.YAMLError, KeyError, TypeError) as error:
        raise CredentialError(f"{origin} holds an unusable kubeconfig: {type(error).__name__}") from None


# Every watch holds an HTTP/1.1 connection for its lifetime; a pool smaller than the watch count would
# starve ordinary requests (the health check, status writes) once enough twin namespaces are watched.
# HTTP/2 would share one connection, but httpcore's HTTP/2 stalls every request once three streams stay open
# (and aiohttp, the transport, speaks HTTP/1.1 only).
MAX_CONNECTIONS = 4096


class BearerToken(httpx2.Auth):
    """A bearer token that can be replaced while the clients holding it keep running (a rotated credential)."""

    def __init__(self, token: str):
        self.token = token

    def auth_flow(self, request: httpx2.Request):
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request

    def __repr__(self) -> str:
        return "BearerToken(<hidden>)"


def request_kind(method: str, path: str, watch: bool) -> tuple[str, str]:
    """(verb, resource) of an API request in the API server's terms: a GET of a collection is a LIST or WATCH."""
    segments = [s for s in path.split("/") if s]
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return method, "nonresource"
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]  # a namespaced resource; `namespaces/<name>[/status]` is the namespace itself
    if not rest:
        return method, "discovery"
    resource = "/".join([rest[0], *rest[2:3]])
    collection = len(rest) == 1
    if method == "GET" and collection:
        return ("WATCH" if watch else "LIST"), resource
    if method == "DELETE" and collection:
        return "DELETECOLLECTION", resource
    return method, resource


def asks_watch(query: bytes) -> bool:
    """Whether a request's query string asks for a watch (`watch=true` or `watch=1`), read without parsing it into
    QueryParams, which every answered request paid for."""
    return any(parameter in (b"watch=true", b"watch=1") for parameter in query.split(b"&"))


def _instrument(http: httpx2.AsyncClient, cluster: str) -> None:
    """Every request's latency to its response headers, by verb and resource (`catamaran_api_request_*`)."""

    async def sent(request: httpx2.Request) -> None:
        request.extensions["catamaran_sent"] = time.perf_counter()

    async def answered(response: httpx2.Response) -> None:
        request = response.request
        started = request.extensions.get("catamaran_sent")
        watch = request.method == "GET" and asks_watch(request.url.query)
        verb, resource = request_kind(request.method, request.url.path, watch)
        if started is not None:
            metrics.labelled(metrics.API_REQUEST_SECONDS, cluster, verb, resource).observe(
                time.perf_counter() - started
            )
        metrics.labelled(metrics.API_REQUESTS, cluster, verb, str(response.status_code)).inc()

    http.event_hooks["request"].append(sent)
    http.event_hooks["response"].append(answered)


def async_client(
    config: KubeConfig, context: str | None, field_manager: str, timeout: float = 15, cluster: str = "local"
) -> AsyncClient:
    """A client for `config`; a static bearer token is installed as a BearerToken (see bearer_token()).

    `cluster` labels its requests' metrics: `local` or `provider`."""
    single = config.get(context)
    client = AsyncClient(
        config=single,
        field_manager=field_manager,
        timeout=httpx2.Timeout(timeout),
        trust_env=False,
    )
    http = http_client(client)
    user = single.user if single is not None else None
    if user is not None and user.token is not None and user.token_file is None:
        http.auth = BearerToken(user.token)
    # lightkube has no setting for the transport; its TLS context (CA, client certificate) carries over.
    http._transport = AiohttpTransport(http._transport._pool._ssl_context, MAX_CONNECTIONS)  # type: ignore[attr-defined]
    request_builder.install(client, http)
    _instrument(http, cluster)
    return client


def generic_client(client: AsyncClient):
    """lightkube's request builder beneath its public calls (prepare_request, send, raise_for_status): the one
    place Catamaran reaches past lightkube's public API, for what it has no call for."""
    return client._client


def http_client(client: AsyncClient) -> httpx2.AsyncClient:
    """lightkube's httpx client: auth, TLS and the connection pool live there."""
    return generic_client(client)._client


def bearer_token(client: AsyncClient) -> BearerToken | None:
    """The client's replaceable token: setting its `token` switches every later request, streams included."""
    auth = http_client(client).auth
    return auth if isinstance(auth, BearerToken) else None


async def get_raw(client: AsyncClient, path: str, request_timeout: float) -> tuple[int, str]:
    """GET a non-resource path such as /readyz with the client's own credentials and TLS settings."""
    # lightkube has no public call for non-resource paths; its httpx client carries auth and TLS.
    http = http_client(client)
    response = await http.get(path, timeout=request_timeout)
    return response.status_code, response.text


async def json_lines(chunks: AsyncIterable[bytes]) -> AsyncGenerator[bytes]:
    """The non-empty lines of a watch stream (one JSON event each), as bytes: msgspec decodes them as they are, where
    httpx2's aiter_lines decoded every chunk to text and split it again in Python."""
    parts: list[bytes] = []
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            parts.append(chunk[start:end])
            line = b"".join(parts)
            parts.clear()
            if line.strip():
                yield line
            start = end + 1
        if start < len(chunk):
            parts.append(chunk[start:])
    if (line := b"".join(parts)).strip():
        yield line


def plain_object(data: dict) -> dict:
    """An object as the API's JSON, without its managed fields (no reader of a plain informer's objects looks at
    them, and they are often the larger part)."""
    (data.get("metadata") or {}).pop("managedFields", None)
    return data


class _Bookmark(msgspec.Struct):
    metadata: dict


class LightkubeListWatch:
    """An informer's list and watch (informer.ListWatch) of one resource type and selectors, through lightkube.

    lightkube's watch asks for no bookmarks and reads without a timeout, so the watch request is built here,
    on the client's own connection pool, credentials and TLS settings.
    """

    def __init__(
        self,
        client: AsyncClient,
        resource,
        *,
        namespace: str | None,
        labels: dict | None,
        fields: dict | None,
        server_timeout: int,
        read_timeout: float,
        plain: bool = False,
    ):
        self.client = client
        self.resource = resource
        # `plain`: objects as dicts (plain_object), not lightkube models: one decode, no model built and turned back.
        self.plain = plain
        if namespace is None and issubclass(resource, NamespacedResource):
            namespace = ALL_NS  # lightkube's None would mean the kubeconfig's namespace
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.server_timeout = server_timeout
        self.read_timeout = read_timeout

    def _selectors(self) -> dict:
        """The label and field selectors as query parameters, for the list and the watch alike."""
        return {
            "labelSelector": build_selector(self.labels) if self.labels else None,
            "fieldSelector": build_selector(self.fields, for_fields=True) if self.fields else None,
        }

    def list(self):
        """lightkube's paged list (its AsyncClient.list, with the decoding chosen here)."""
        generic = generic_client(self.client)
        request = generic.prepare_request(
            "list", res=self.resource, namespace=self.namespace, params={"limit": 500, **self._selectors()}
        )
        if self.plain:
            request.response_type = plain_object  # lightkube decodes the items as they are and hands each to it
        return generic.list(request)

    @contextlib.asynccontextmanager
    async def watch(self, version: str):
        generic = generic_client(self.client)
        request = generic.prepare_request(
            "list",
            res=self.resource,
            namespace=self.namespace,
            watch=True,
            params={
                "timeoutSeconds": self.server_timeout,
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
                **self._selectors(),
            },
        )
        http = http_client(self.client)
        timeout = httpx2.Timeout(15.0, read=self.read_timeout)
        response = await http.send(
            http.build_request(request.method, request.url, params=request.params, timeout=timeout), stream=True
        )
        try:
            if response.status_code >= 400:
                await response.aread()
                generic.raise_for_status(response)
            async with contextlib.aclosing(self._events(response)) as events:
                yield events
        finally:
            await response.aclose()

    async def _events(self, response: httpx2.Response) -> AsyncGenerator[tuple[str, object]]:
        try:
            async for line in json_lines(response.aiter_bytes()):
                yield self._event(line)
        except httpx2.ReadTimeout as silent:
            raise TimeoutError(f"watch silent for {self.read_timeout} s") from silent

    def _event(self, line: bytes) -> tuple[str, object]:
        event = decoders.decode_watch_event(line)
        if event.type == "ERROR":
            raise ApiError(status=decoders.decode_status(event.object))
        if event.type == "BOOKMARK":
            return "BOOKMARK", msgspec.json.decode(event.object, type=_Bookmark).metadata.get("resourceVersion")
        if self.plain:
            return event.type, plain_object(msgspec.json.decode(event.object))
        return event.type, decoders.decode_object(event.object, self.resource)
