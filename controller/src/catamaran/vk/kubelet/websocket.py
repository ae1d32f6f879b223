"""WebSocket streams from the API server, relayed to the provider: exec, attach and port-forward as a kubelet
serves them to callers the API server does not translate to SPDY (`channel.k8s.io`, `v4.channel.k8s.io` and their
base64 forms, `portforward.k8s.io`).

The provider's API server speaks the same protocols for its own kubelets, so the relay offers the caller's protocols
to the provider, answers 101 with the one the provider chose, and copies messages both ways unchanged: the channel
bytes and the status messages are the provider kubelet's own. The server side of RFC 6455 is small enough to write
here (the connection is already this module's after the 101, as with SPDY).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import struct
from collections.abc import Awaitable, Callable

import aiohttp

from ...logs import fields
from .channel import ProviderChannel
from .http import HttpError, Request

log = logging.getLogger(__name__)

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DRAIN_TIMEOUT_S = 60.0


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """One unfragmented, unmasked frame: what a server sends."""
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, length)
    return head + payload


def unmask(payload: bytes, mask: bytes) -> bytes:
    """XOR with the client's 4-byte mask, as one big integer (a byte at a time would hold the event loop)."""
    if not payload:
        return payload
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    value = int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
    return value.to_bytes(len(payload), "big")


async def read_message(reader: asyncio.StreamReader, on_ping: Callable[[bytes], Awaitable[None]]) -> tuple[int, bytes]:
    """The next data message (continuations joined, masks removed) or CLOSE: (opcode, payload). Pings are answered
    through `on_ping` as they come, between a message's fragments too; pongs are dropped."""
    opcode, parts, size = None, [], 0
    while True:
        first, second = await reader.readexactly(2)
        fin, frame_opcode = first & 0x80, first & 0x0F
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await reader.readexactly(8))
        if frame_opcode < CLOSE:
            size += length
        if size > MAX_MESSAGE_BYTES or length > MAX_MESSAGE_BYTES:
            raise ConnectionError(f"WebSocket message larger than {MAX_MESSAGE_BYTES} bytes")
        mask = await reader.readexactly(4) if second & 0x80 else b""
        payload = unmask(await reader.readexactly(length), mask) if mask else await reader.readexactly(length)
        if frame_opcode == CLOSE:
            return CLOSE, payload
        if frame_opcode == PING:
            await on_ping(payload)
            continue
        if frame_opcode == PONG:
            continue
        if frame_opcode != CONTINUATION:
            opcode = frame_opcode
        parts.append(payload)
        if fin:
            return opcode if opcode is not None else BINARY, b"".join(parts)


async def relay(
    request: Request, channel: ProviderChannel, path: str, params: list[tuple[str, str]], kind: str
) -> None:
    """Answer the API server's WebSocket upgrade with one to the provider, then copy messages both ways."""
    key = request.header("sec-websocket-key")
    offered = request.header_values("sec-websocket-protocol")
    if not key or not offered:
        raise HttpError(400, f"{kind} over WebSocket needs Sec-WebSocket-Key and Sec-WebSocket-Protocol")
    async with channel.websocket(path, params, offered, kind) as socket:
        headers = {"Upgrade": "websocket", "Sec-WebSocket-Accept": accept_key(key)}
        if socket.protocol:  # the provider's choice, which the caller then speaks to it
            headers["Sec-WebSocket-Protocol"] = socket.protocol
        reader, writer = await request.switch_protocols(headers)
        directions = [
            asyncio.ensure_future(_to_provider(reader, writer, socket)),
            asyncio.ensure_future(_to_caller(socket, writer)),
        ]
        try:
            await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in directions:
                task.cancel()
            await asyncio.gather(*directions, return_exceptions=True)
            with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
                writer.write(frame(CLOSE, struct.pack("!H", 1000)))
                await asyncio.wait_for(writer.drain(), DRAIN_TIMEOUT_S)
            writer.close()
            log.info("WebSocket stream ended", extra=fields(kind=kind, path=path))


async def _to_provider(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, socket) -> None:
    async def pong(payload: bytes) -> None:
        writer.write(frame(PONG, payload))
        await asyncio.wait_for(writer.drain(), DRAIN_TIMEOUT_S)

    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        while True:
            opcode, payload = await read_message(reader, pong)
            if opcode == CLOSE:
                return
            if opcode == TEXT:
                await socket.send_str(payload.decode("utf-8", errors="replace"))
            elif opcode == BINARY:
                await socket.send_bytes(payload)


async def _to_caller(socket, writer: asyncio.StreamWriter) -> None:
    async for message in socket:
        if message.type == aiohttp.WSMsgType.BINARY:
            writer.write(frame(BINARY, message.data))
        elif message.type == aiohttp.WSMsgType.TEXT:
            writer.write(frame(TEXT, message.data.encode()))
        else:
            return  # closed or failed: the caller's side ends too
        # A caller that stops reading ends the relay, instead of holding the provider's stream open for ever.
        await asyncio.wait_for(writer.drain(), DRAIN_TIMEOUT_S)
