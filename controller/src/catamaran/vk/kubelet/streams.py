"""exec, attach and port-forward: SPDY/3.1 from the API server, WebSockets to the provider. (The WebSockets an API
server passes on untranslated are relayed as they are: websocket.py.)

The API server speaks SPDY to kubelets (it translates kubectl's WebSockets), so this side is the
SPDY server of the kubelet's stream protocols: `v4.channel.k8s.io` (and v5, identical over SPDY)
for commands, `portforward.k8s.io` for ports. Toward the provider:
- commands use the `v5.channel.k8s.io` WebSocket protocol (one channel byte per message; v5 can
  close stdin, which v4 cannot);
- port-forward tunnels SPDY inside one WebSocket (`SPDY/3.1+portforward.k8s.io`, what kubectl
  does), so every forwarded connection is a stream pair on each side and ends, half-closes
  included, exactly when its peer's does. Nothing outlives the API server's connection.
The provider's WebSocket is opened before answering 101, so its refusals (no such pod, forbidden)
reach the caller as ordinary HTTP errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp

from ... import metrics
from ...logs import fields
from . import websocket
from .channel import ProviderChannel
from .http import HttpError, Request
from .spdy import SpdySession, SpdyStream

log = logging.getLogger(__name__)

SPDY = "SPDY/3.1"
COMMAND_PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
PORT_FORWARD_PROTOCOL = "portforward.k8s.io"
TUNNELED_PORT_FORWARD = f"{SPDY}+{PORT_FORWARD_PROTOCOL}"
# The kubelet's streamCreationTimeout.
STREAM_CREATION_S = 30.0

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def negotiate(offered: list[str], supported: list[str]) -> str:
    """The caller's first protocol we speak, as httpstream.Handshake picks it."""
    for protocol in offered:
        if protocol in supported:
            return protocol
    raise HttpError(403, f"none of the offered stream protocols {offered} is supported (want one of {supported})")


# -- commands (exec and attach) ---------------------------------------------------------------------


def command_streams(request: Request) -> dict[str, bool]:
    tty = request.flag("tty")
    wanted = {
        "stdin": request.flag("input"),
        "stdout": request.flag("output"),
        "stderr": request.flag("error") and not tty,
        "resize": tty,
    }
    if not (wanted["stdin"] or wanted["stdout"] or wanted["stderr"]):
        raise HttpError(400, "you must specify at least 1 of stdin, stdout, stderr")
    return wanted


def provider_command_params(request: Request, container: str, wanted: dict[str, bool], kind: str):
    params = [
        ("container", container),
        ("stdin", str(wanted["stdin"]).lower()),
        ("stdout", str(wanted["stdout"]).lower()),
        ("stderr", str(wanted["stderr"]).lower()),
        ("tty", str(wanted["resize"]).lower()),
    ]
    if kind == "exec":
        commands = request.query.get("command") or []
        if not commands:
            raise HttpError(400, "exec needs a command")
        params += [("command", c) for c in commands]
    return params


async def accept_streams(session: SpdySession, wanted: dict[str, bool]) -> dict[str, SpdyStream]:
    expected = 1 + sum(wanted.values())
    streams: dict[str, SpdyStream] = {}
    while len(streams) < expected:
        stream = await session.accept()
        if stream is None:
            raise ConnectionError("the API server closed the connection before creating its streams")
        kind = stream.headers.get("streamtype", "")
        if kind in ("error", *[k for k, on in wanted.items() if on]):
            streams[kind] = stream
        else:
            stream.reset()
    return streams


async def serve_command(
    request: Request, channel: ProviderChannel, kind: str, twin: str, pod: str, container: str
) -> None:
    wanted = command_streams(request)
    params = provider_command_params(request, container, wanted, kind)
    path = f"/api/v1/namespaces/{twin}/pods/{pod}/{kind}"
    if request.wants_upgrade("websocket"):
        await websocket.relay(request, channel, path, params, kind)
        return
    protocol = negotiate(request.header_values("x-stream-protocol-version"), COMMAND_PROTOCOLS)
    if not request.wants_upgrade(SPDY):
        raise HttpError(400, f"{kind} needs an upgrade to {SPDY} or websocket")
    async with channel.websocket(path, params, ["v5.channel.k8s.io", "v4.channel.k8s.io"], kind) as socket:
        reader, writer = await request.switch_protocols({"Upgrade": SPDY, "X-Stream-Protocol-Version": protocol})
        session = SpdySession(reader, writer, server=True)
        running = asyncio.ensure_future(session.run())
        try:
            streams = await asyncio.wait_for(accept_streams(session, wanted), STREAM_CREATION_S)
            relay = asyncio.ensure_future(_relay_command(socket, streams))
            # A caller that leaves (kubectl interrupted) ends the session: the provider's side goes with it,
            # or an interactive shell would hold its WebSocket until it exits on its own.
            await asyncio.wait({relay, running}, return_when=asyncio.FIRST_COMPLETED)
            if not relay.done():
                relay.cancel()
                log.info("caller left; ending the provider's command stream", extra=fields(pod=pod, namespace=twin))
            with contextlib.suppress(asyncio.CancelledError):
                await relay
        except (TimeoutError, ConnectionError, aiohttp.ClientError) as error:
            log.info("command stream ended early", extra=fields(pod=pod, namespace=twin, error=str(error) or "timeout"))
        finally:
            await session.close()
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running


async def _relay_command(socket: aiohttp.ClientWebSocketResponse, streams: dict[str, SpdyStream]) -> None:
    v5 = socket.protocol == "v5.channel.k8s.io"
    tasks = []
    if "stdin" in streams:
        tasks.append(asyncio.ensure_future(_stdin_to_provider(streams["stdin"], socket, v5)))
    if "resize" in streams:
        tasks.append(asyncio.ensure_future(_resize_to_provider(streams["resize"], socket)))
    status = b""
    try:
        async for message in socket:
            if message.type != aiohttp.WSMsgType.BINARY or not message.data:
                continue
            channel, payload = message.data[0], message.data[1:]
            if channel == STDOUT and "stdout" in streams:
                await streams["stdout"].write(payload)
            elif channel == STDERR:
                # With a TTY the caller opened no stderr stream; the terminal merges it anyway.
                target = streams.get("stderr") or streams.get("stdout")
                if target is not None:
                    await target.write(payload)
            elif channel == ERROR:
                status += payload
    finally:
        for task in tasks:
            task.cancel()
    if status:
        await streams["error"].write(status)
    for name in ("stdout", "stderr", "error"):
        if name in streams:
            await streams[name].close()


async def _stdin_to_provider(stdin: SpdyStream, socket: aiohttp.ClientWebSocketResponse, v5: bool) -> None:
    while data := await stdin.read():
        await socket.send_bytes(bytes([STDIN]) + data)
    if v5 and not socket.closed:
        await socket.send_bytes(bytes([CLOSE, STDIN]))


async def _resize_to_provider(resize: SpdyStream, socket: aiohttp.ClientWebSocketResponse) -> None:
    """The caller writes a stream of JSON TerminalSize objects; each goes on as one resize message."""
    decoder = json.JSONDecoder()
    pending = ""
    while data := await resize.read():
        pending += data.decode(errors="replace")
        while pending.strip():
            try:
                size, end = decoder.raw_decode(pending.lstrip())
            except json.JSONDecodeError:
                break
            pending = pending.lstrip()[end:]
            message = {"Width": int(size.get("Width", 0)), "Height": int(size.get("Height", 0))}
            await socket.send_bytes(bytes([RESIZE]) + json.dumps(message).encode())


# -- port-forward ----------------------------------------------------------------------------------


class WebSocketTransport:
    """The reader and writer a SpdySession needs, over binary WebSocket messages (the tunnel kubectl uses).

    Reading pulls the next message only when the session asks for bytes, so a slow session slows the
    provider down through TCP instead of buffering without bound.
    """

    def __init__(self, socket: aiohttp.ClientWebSocketResponse):
        self.socket = socket
        self.reader = self  # SpdySession reads with readexactly()
        self._incoming = bytearray()
        self._outgoing = bytearray()
        self._sending: asyncio.Future | None = None
        self._closed = False

    async def readexactly(self, size: int) -> bytes:
        while len(self._incoming) < size:
            message = await self.socket.receive() if not self._closed else None
            if message is None or message.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.ERROR,
            ):
                partial = bytes(self._incoming)
                self._incoming.clear()
                raise asyncio.IncompleteReadError(partial, size)
            if message.type == aiohttp.WSMsgType.BINARY:
                self._incoming += message.data
        chunk = bytes(self._incoming[:size])
        del self._incoming[:size]
        return chunk

    # StreamWriter's interface, as far as SpdySession uses it.
    def write(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionResetError("the provider's tunnel is closed")
        self._outgoing += data
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        while self._outgoing:
            chunk = bytes(self._outgoing)
            self._outgoing.clear()
            await self.socket.send_bytes(chunk)

    async def drain(self) -> None:
        if self._sending is not None:
            await asyncio.shield(self._sending)

    def is_closing(self) -> bool:
        return self._closed or self.socket.closed

    def close(self) -> None:
        self._closed = True

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            await self.drain()
        await self.socket.close()

    def writelines(self, parts) -> None:
        self.write(b"".join(parts))

    def get_extra_info(self, name: str, default=None):
        return default

    # ... and its transport's, for the backlog check and abort.
    @property
    def transport(self) -> WebSocketTransport:
        return self

    def get_write_buffer_size(self) -> int:
        return len(self._outgoing)

    def abort(self) -> None:
        self._closed = True


async def serve_port_forward(request: Request, channel: ProviderChannel, twin: str, pod: str) -> None:
    path = f"/api/v1/namespaces/{twin}/pods/{pod}/portforward"
    if request.wants_upgrade("websocket"):
        # The API server passes the caller's ports as the kubelet's `port` parameters.
        ports = [("ports", port) for port in request.query.get("port") or request.query.get("ports") or []]
        await websocket.relay(request, channel, path, ports, "port-forward")
        return
    protocol = negotiate(request.header_values("x-stream-protocol-version"), [PORT_FORWARD_PROTOCOL])
    if not request.wants_upgrade(SPDY):
        raise HttpError(400, f"port-forward needs an upgrade to {SPDY} or websocket")
    async with channel.websocket(path, [], [TUNNELED_PORT_FORWARD], "port-forward") as socket:
        tunnel = WebSocketTransport(socket)
        upstream = SpdySession(tunnel.reader, tunnel, server=False)
        reader, writer = await request.switch_protocols({"Upgrade": SPDY, "X-Stream-Protocol-Version": protocol})
        downstream = SpdySession(reader, writer, server=True)
        sessions = [asyncio.ensure_future(upstream.run()), asyncio.ensure_future(downstream.run())]
        forwards: set[asyncio.Task] = set()
        try:
            await _pair_and_forward(downstream, upstream, forwards)
        finally:
            for task in forwards:
                task.cancel()
            await asyncio.gather(*forwards, return_exceptions=True)
            await downstream.close()
            await upstream.close()
            for task in sessions:
                task.cancel()
            await asyncio.gather(*sessions, return_exceptions=True)
            await tunnel.wait_closed()


async def _pair_and_forward(downstream: SpdySession, upstream: SpdySession, forwards: set[asyncio.Task]) -> None:
    """Pair each requestID's data and error streams, then forward the pair; until the API server leaves."""
    waiting: dict[str, dict[str, SpdyStream]] = {}
    while (stream := await downstream.accept()) is not None:
        request_id = stream.headers.get("requestid") or ""
        kind = stream.headers.get("streamtype", "")
        if kind not in ("data", "error") or not request_id:
            stream.reset()
            continue
        pair = waiting.setdefault(request_id, {})
        pair[kind] = stream
        if len(pair) == 2:
            del waiting[request_id]
            task = asyncio.ensure_future(_forward(request_id, pair["data"], pair["error"], upstream))
            forwards.add(task)
            task.add_done_callback(forwards.discard)


async def _forward(request_id: str, data: SpdyStream, error: SpdyStream, upstream: SpdySession) -> None:
    port = data.headers.get("port", "")
    if not port.isdigit() or not 0 < int(port) < 65536:
        await error.write(f"invalid port {port!r}".encode())
        await error.close()
        await data.close()
        return
    metrics.PORT_FORWARD_CONNECTIONS.inc()
    remote_error = remote_data = None
    try:
        headers = {"port": port, "requestID": request_id}
        remote_error = await upstream.open_stream({**headers, "streamType": "error"}, fin=True)
        remote_data = await upstream.open_stream({**headers, "streamType": "data"})
        copies = [
            asyncio.ensure_future(_copy(data, remote_data)),
            asyncio.ensure_future(_copy(remote_data, data)),
            asyncio.ensure_future(_copy(remote_error, error, close=False)),
        ]
        # Done when the pod's side has finished sending (or failed): the caller's side then ends too.
        await asyncio.wait(copies[1:2], return_when=asyncio.ALL_COMPLETED)
        await asyncio.wait(copies[2:], timeout=1.0)
        for task in copies:
            task.cancel()
        await asyncio.gather(*copies, return_exceptions=True)
    except Exception as failure:  # reported to the caller on its error stream
        with contextlib.suppress(Exception):
            await error.write(f"error forwarding port {port}: {failure}".encode())
    finally:
        metrics.PORT_FORWARD_CONNECTIONS.dec()
        for stream in (remote_data, remote_error):
            if stream is not None and not stream.closed:
                stream.reset()
        for stream in (data, error):
            with contextlib.suppress(Exception):
                await stream.close()


async def _copy(source: SpdyStream, target: SpdyStream, close: bool = True) -> None:
    while chunk := await source.read():
        await target.write(chunk)
    if close:
        await target.close()
