"""Streaming calls to the provider's API server with the tenant credential.

Plain streams (logs) go through the lightkube client's own HTTP client. Exec, attach and
port-forward use WebSockets (the API server translates them to SPDY for its kubelets); aiohttp's
client speaks them, given the same TLS context and Authorization header lightkube derives from the
kubeconfig (the same auth object, so a rotated token applies to both at once).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
import httpx2
from lightkube import AsyncClient
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig

from ... import metrics
from ...kube.clients import http_client

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 15.0


class ProviderError(Exception):
    """The provider refused or failed a call; `status` and `body` are its answer, passed on to the caller."""

    def __init__(self, status: int, body: bytes, content_type: str = "application/json"):
        super().__init__(f"provider answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


class ProviderChannel:
    def __init__(self, provider: AsyncClient, config: SingleConfig):
        self.http: httpx2.AsyncClient = http_client(provider)
        self.server = config.cluster.server.rstrip("/")
        self.ssl = verify_cluster(config.cluster, config.user, config.abs_file, trust_env=False)
        # The lightkube client's own auth object: a token swapped in there (a rotated credential) reaches
        # WebSockets opened from then on.
        self.auth = self.http.auth
        self._session: aiohttp.ClientSession | None = None

    @contextlib.asynccontextmanager
    async def get_stream(self, path: str, params: list[tuple[str, str]]) -> AsyncIterator[httpx2.Response]:
        """GET with the body left unread; raises ProviderError on a non-2xx answer."""
        timeout = httpx2.Timeout(HANDSHAKE_TIMEOUT_S, read=None)
        async with self.http.stream("GET", path, params=params, timeout=timeout) as response:
            if response.status_code >= 300:
                body = await response.aread()
                raise ProviderError(
                    response.status_code, body, response.headers.get("content-type", "application/json")
                )
            yield response

    async def get_json(self, path: str, params: list[tuple[str, str]] | None = None) -> dict:
        response = await self.http.get(path, params=params or [], timeout=HANDSHAKE_TIMEOUT_S)
        if response.status_code >= 300:
            raise ProviderError(response.status_code, response.content)
        return response.json()

    async def _authorization(self) -> dict[str, str]:
        if self.auth is None:
            return {}
        request = httpx2.Request("GET", self.server)
        flow = self.auth.async_auth_flow(request)
        request = await flow.__anext__()
        await flow.aclose()
        value = request.headers.get("Authorization")
        return {"Authorization": value} if value else {}

    @contextlib.asynccontextmanager
    async def websocket(
        self, path: str, params: list[tuple[str, str]], protocols: list[str], kind: str
    ) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
        """A WebSocket to the provider, counted in PROVIDER_STREAMS while open; closed on exit, whatever happens."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=self.ssl))
        try:
            socket = await self._session.ws_connect(
                self.server + path,
                params=params,
                protocols=protocols,
                headers=await self._authorization(),
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
                autoping=True,
                max_msg_size=0,
                compress=0,
            )
        except aiohttp.WSServerHandshakeError as error:
            raise ProviderError(error.status, str(error.message).encode(), "text/plain") from None
        except (aiohttp.ClientError, OSError) as error:
            raise ProviderError(502, f"cannot reach the provider: {error}".encode(), "text/plain") from None
        metrics.PROVIDER_STREAMS.labels(kind).inc()
        try:
            yield socket
        finally:
            metrics.PROVIDER_STREAMS.labels(kind).dec()
            await socket.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
