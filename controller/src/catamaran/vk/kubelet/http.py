"""A small HTTP/1.1 server for the kubelet API's few, well-known callers (API servers, metrics-server).

Written on asyncio streams rather than aiohttp because exec, attach and port-forward switch the
connection to SPDY/3.1 after a 101 response, and aiohttp offers no supported way to hand the raw
connection over. Requests carry no bodies worth reading (a kubelet's endpoints take query
parameters), connections are kept alive, and responses are either whole or chunked streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
# An idle keep-alive connection is closed after this long; API servers reconnect at once.
IDLE_SECONDS = 120


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, list[str]]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer_certificate: dict | None = None
    user: object | None = None  # set by authentication
    responded: bool = field(default=False)
    upgraded: bool = field(default=False)

    def header(self, name: str, default: str = "") -> str:
        values = self.headers.get(name.lower())
        return values[0] if values else default

    def header_values(self, name: str) -> list[str]:
        """Every value of a header, comma lists split, as Go's http.Header does for repeated fields."""
        return [
            part.strip() for value in self.headers.get(name.lower(), []) for part in value.split(",") if part.strip()
        ]

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def flag(self, name: str) -> bool:
        return (self.param(name) or "").lower() in ("1", "true")

    def wants_upgrade(self, protocol: str) -> bool:
        connection = [v.lower() for v in self.header_values("connection")]
        return "upgrade" in connection and self.header("upgrade").lower() == protocol.lower()

    async def respond(self, status: int, body: bytes = b"", content_type: str = "text/plain; charset=utf-8") -> None:
        head = _head(status, {"Content-Type": content_type, "Content-Length": str(len(body))})
        self.writer.write(head + body)
        self.responded = True
        await self.writer.drain()

    async def respond_json(self, status: int, payload) -> None:
        await self.respond(status, json.dumps(payload).encode(), "application/json")

    async def start_stream(self, status: int, content_type: str) -> ChunkedBody:
        self.writer.write(_head(status, {"Content-Type": content_type, "Transfer-Encoding": "chunked"}))
        self.responded = True
        await self.writer.drain()
        return ChunkedBody(self.writer)

    async def switch_protocols(self, headers: dict[str, str]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Answer 101 and hand the raw connection over; the server forgets it afterwards."""
        self.writer.write(_head(101, {"Connection": "Upgrade", **headers}))
        await self.writer.drain()
        self.responded = self.upgraded = True
        return self.reader, self.writer


class ChunkedBody:
    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer

    async def write(self, data: bytes) -> None:
        if data:
            self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await self.writer.drain()

    async def end(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Status"
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    """The next request on a kept-alive connection; None when the peer closed it between requests."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_SECONDS)
    except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
        return None
    except asyncio.LimitOverrunError as error:
        raise HttpError(431, "request head too large") from error
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError as error:
        raise HttpError(400, "malformed request line") from error
    if not version.startswith("HTTP/1."):
        raise HttpError(505, f"unsupported protocol {version}")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(400, "malformed header line")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    if headers.get("transfer-encoding"):
        raise HttpError(411, "chunked request bodies are not accepted")
    length = int((headers.get("content-length") or ["0"])[0] or 0)
    if length > MAX_BODY_BYTES:
        raise HttpError(413, "request body too large")
    if length:
        await reader.readexactly(length)  # no endpoint reads a body
    url = urlsplit(target)
    return Request(
        method=method.upper(),
        path=unquote(url.path),
        query=parse_qs(url.query, keep_blank_values=True),
        headers=headers,
        reader=reader,
        writer=writer,
    )


Handler = Callable[[Request], Awaitable[None]]


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler) -> None:
    """Requests one after another until the peer leaves, a response cannot be framed, or a protocol switch."""
    ssl_object: ssl.SSLObject | None = writer.get_extra_info("ssl_object")
    peer = ssl_object.getpeercert() if ssl_object else None
    try:
        while True:
            try:
                request = await read_request(reader, writer)
            except HttpError as error:
                await _send_error(writer, error.status, error.message)
                return
            if request is None:
                return
            request.peer_certificate = peer or None
            try:
                await handler(request)
            except HttpError as error:
                if request.responded:
                    return
                await request.respond(error.status, error.message.encode())
            if request.upgraded:
                return  # the new protocol owns and closes the connection
            if not request.responded:
                await request.respond(500, b"no response")
            if request.header("connection").lower() == "close":
                return
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        return
    except Exception:
        log.exception("kubelet API connection failed")
    finally:
        if not writer.is_closing():
            writer.close()


async def _send_error(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = message.encode()
    writer.write(_head(status, {"Content-Type": "text/plain", "Content-Length": str(len(body)), "Connection": "close"}))
    writer.write(body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
