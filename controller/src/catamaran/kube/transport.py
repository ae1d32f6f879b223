"""An httpx2 transport over aiohttp's connection pool, for lightkube's clients.

lightkube speaks httpx2, whose HTTP/1.1 layer (httpcore2 + h11) parses every response in pure Python: about 1 ms of
CPU per request against a kube-apiserver, where aiohttp's C parser (llhttp) needs 0.3 ms. The controller's hot path is
a few writes per offloaded pod, so that parser was the largest share of the virtual kubelet's CPU. This transport keeps
httpx2 on top (lightkube, auth, event hooks, streaming and exceptions stay as they are) and hands the wire to aiohttp.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx2
import yarl

# asyncio's TLS transport, which aiohttp reads through, zero-fills a read buffer of this size for every
# connection: 256 KiB by default, 460 MiB for the virtual kubelet's 1800 watches at 200 offloaded namespaces.
# 16 KiB is one TLS record, the most a read decrypts at once; a 7 MB LIST costs no more CPU with it.
asyncio.sslproto.SSLProtocol.max_size = 16 * 1024

# Headers aiohttp derives from the request itself; passing httpx2's copies too would send them twice.
_DERIVED_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})


def _httpx_kind(error: Exception, reading: bool) -> type[httpx2.TransportError]:
    if isinstance(error, aiohttp.ConnectionTimeoutError):  # before TimeoutError, which it also is
        return httpx2.ConnectTimeout
    if isinstance(error, aiohttp.ClientConnectorError):
        return httpx2.ConnectError
    if isinstance(error, TimeoutError):  # aiohttp's socket read timeout, or the event loop's
        return httpx2.ReadTimeout
    if isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx2.RemoteProtocolError
    return httpx2.ReadError if reading else httpx2.WriteError


@contextlib.contextmanager
def _httpx_errors(request: httpx2.Request, reading: bool) -> Iterator[None]:
    """aiohttp's exceptions as the httpx2 ones lightkube and the watch loops handle."""
    try:
        yield
    except (aiohttp.ClientError, TimeoutError) as error:
        raise _httpx_kind(error, reading)(str(error) or type(error).__name__, request=request) from error


class _ResponseBody(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request):
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors(self._request, reading=True):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        # A body left unread (a watch that is stopped) cannot go back to the pool: its connection is dropped.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Sends httpx2 requests through one aiohttp session, created in the event loop that first uses it."""

    def __init__(self, ssl_context: ssl.SSLContext | None, max_connections: int):
        self._ssl_context = ssl_context
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_here(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A client reused from another event loop (a test's) cannot share that loop's sockets.
            connector = aiohttp.TCPConnector(
                ssl=self._ssl_context if self._ssl_context is not None else False,
                limit=self._max_connections,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,  # httpx2 decodes by Content-Encoding, as it would over its own transport
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            )
            self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.get("pool"),
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in request.headers.raw
            if name.lower() not in _DERIVED_HEADERS
        ]
        body = await request.aread()
        with _httpx_errors(request, reading=False):
            response = await self._session_here().request(
                request.method,
                yarl.URL(str(request.url), encoded=True),  # as httpx2 encoded it (label selectors)
                headers=headers,
                data=body or None,
                timeout=timeout,
                allow_redirects=False,
                compress=None,
            )
        return httpx2.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_ResponseBody(response, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode("latin-1")},
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            with contextlib.suppress(RuntimeError):  # its event loop is gone: so are its sockets
                await self._session.close()
        self._session = None
