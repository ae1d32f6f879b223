"""SpdySession: a SPDY/3.1 session's public operations (run, accept, open_stream, ping, close) and the
read loop run() drives, with a handler per control frame type."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

from .core import SessionCore
from .frames import (
    _U32,
    _U32_PAIR,
    CANCEL,
    FLAG_FIN,
    FLAG_UNIDIRECTIONAL,
    FLOW_CONTROL_ERROR,
    GOAWAY,
    GOAWAY_INTERNAL_ERROR,
    GOAWAY_OK,
    HEADERS,
    INVALID_STREAM,
    MAX_CONTROL_FRAME,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PING,
    PROTOCOL_ERROR,
    READ_PIECE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    STREAM_ALREADY_CLOSED,
    STREAM_IN_USE,
    SYN_REPLY,
    SYN_STREAM,
    VERSION,
    WINDOW_UPDATE,
    SpdyError,
    _PeerClosed,
    _ProtocolError,
    control_frame,
    decode_name_value_block,
)
from .stream import SpdyStream

log = logging.getLogger(__name__)


class SpdySession(SessionCore):
    """A SPDY/3.1 session over one connection. Call run() (as a task) for it to receive anything."""

    # --- Public operations ---

    async def run(self) -> None:
        """Read frames until the connection ends: EOF, an error (recorded in .error; a protocol error is
        answered with GOAWAY first), or a GOAWAY from the peer once no stream is left. Every stream is
        closed when it returns, so no reader or writer waits on."""
        if self._running:
            raise SpdyError("run() was already called")
        self._running = True
        error: BaseException | None = None
        try:
            while not self._ended:
                await self._read_frame()
        except _PeerClosed:
            pass
        except _ProtocolError as protocol_error:
            error = protocol_error
            log.debug("SPDY session error: %s", protocol_error)
            self._goaway_sent = True
            goaway = _U32_PAIR.pack(self._last_peer_stream_id, protocol_error.goaway_status)
            self._emit_quietly(control_frame(GOAWAY, goaway))
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as lost:
            error = SpdyError(f"connection lost: {lost!r}")
        except Exception as bug:  # ours: the peer is told, and every stream still ends
            log.exception("SPDY session failed")
            error = bug
            self._goaway_sent = True
            self._emit_quietly(control_frame(GOAWAY, _U32_PAIR.pack(self._last_peer_stream_id, GOAWAY_INTERNAL_ERROR)))
        finally:
            self._terminate(error)
        await self._wait_transport_closed()

    async def accept(self) -> SpdyStream | None:
        """The next stream the peer opened (and we replied to when it arrived, so the application can
        write at once); streams reset before they were accepted are skipped. None once no more can come."""
        while True:
            stream = await self._incoming.get()
            if stream is None:
                self._incoming.put_nowait(None)  # for every other accept() caller too
                return None
            if stream.reset_status is None and not self._ended:
                return stream

    async def open_stream(self, headers: Mapping[str, str], *, fin: bool = False) -> SpdyStream:
        """SYN_STREAM, then wait (reply_timeout) for the peer's SYN_REPLY."""
        if self._ended:
            raise SpdyError("the session has ended")
        if self._goaway_received:
            raise SpdyError("the peer sent GOAWAY: no new streams")
        stream_id = self._next_stream_id
        if stream_id > MAX_STREAM_ID:
            raise SpdyError("stream ids exhausted")
        block = self._compressor.compress(headers)  # raises, for bad headers, before anything is sent
        self._next_stream_id += 2
        sent = {name.lower(): value for name, value in headers.items()}  # as they went on the wire
        stream = SpdyStream(self, stream_id, sent, self._peer_initial_window)
        stream._local_done = fin
        self._streams[stream_id] = stream
        payload = _U32_PAIR.pack(stream_id, 0) + b"\x00\x00" + block  # no associated stream, priority 0, slot 0
        self._emit(control_frame(SYN_STREAM, payload, FLAG_FIN if fin else 0))
        try:
            await self._flush()
            async with asyncio.timeout(self.reply_timeout):
                await stream._reply_event.wait()
        except TimeoutError:
            stream.reset(CANCEL)
            raise SpdyError(f"no SYN_REPLY for stream {stream_id} within {self.reply_timeout}s") from None
        except BaseException:
            stream.reset(CANCEL)
            raise
        if not stream._replied:
            if stream.reset_status is not None:
                raise SpdyError(f"stream {stream_id} was reset (status {stream.reset_status}) before its reply")
            raise SpdyError(f"the session ended before stream {stream_id} was replied to")
        return stream

    async def ping(self) -> float:
        """Round-trip time of a PING, in seconds; SpdyError if the session ends first. Bound it with
        asyncio.timeout(): an unanswered PING waits as long as the session lives."""
        loop = asyncio.get_running_loop()
        ping_id = self._next_ping_id
        self._next_ping_id = ping_id + 2 if ping_id + 2 <= 0xFFFFFFFF else 2 - self._local_parity
        answered: asyncio.Future[None] = loop.create_future()
        self._pings[ping_id] = answered
        started = loop.time()
        try:
            self._emit(control_frame(PING, _U32.pack(ping_id)))
            await answered
        finally:
            self._pings.pop(ping_id, None)
        return loop.time() - started

    async def close(self) -> None:
        """GOAWAY, then close the transport (after what was written is flushed, or a few seconds)."""
        if not self._ended:
            self._goaway_sent = True
            self._emit_quietly(control_frame(GOAWAY, _U32_PAIR.pack(self._last_peer_stream_id, GOAWAY_OK)))
            self._terminate(None)
        await self._wait_transport_closed()

    # --- Reading ---

    async def _read_exactly(self, size: int) -> bytes:
        return await self._reader.readexactly(size)

    async def _skip(self, size: int) -> None:
        while size:
            size -= len(await self._read_exactly(min(size, READ_PIECE)))

    async def _read_frame(self) -> None:
        try:
            head = await self._reader.readexactly(8)
        except asyncio.IncompleteReadError as eof:
            if eof.partial:
                raise
            raise _PeerClosed from None
        first, second = _U32_PAIR.unpack(head)
        flags, length = second >> 24, second & 0xFFFFFF
        if not first & 0x80000000:
            await self._on_data(first & MAX_STREAM_ID, flags, length)
            return
        version, frame_type = (first >> 16) & 0x7FFF, first & 0xFFFF
        if version != VERSION:
            raise _ProtocolError(f"control frame of SPDY version {version}")
        handler = self._control_handlers.get(frame_type)
        if handler is None:
            await self._skip(length)  # the spec: ignore control frames of unknown types
            return
        if length > MAX_CONTROL_FRAME:
            raise _ProtocolError(f"control frame of type {frame_type} is {length} bytes long")
        await handler(self, flags, await self._read_exactly(length))

    def _stream_error(self, stream_id: int, status: int) -> None:
        self._emit_reply(control_frame(RST_STREAM, _U32_PAIR.pack(stream_id, status)))
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream._abort(status)

    def _was_opened(self, stream_id: int) -> bool:
        """Whether the stream existed at some point (frames for it may still be in flight)."""
        if stream_id % 2 == self._local_parity:
            return stream_id < self._next_stream_id
        return stream_id <= self._last_peer_stream_id

    def _decode_headers(self, compressed: bytes) -> tuple[dict[str, str], SpdyError | None]:
        try:
            block = self._decompressor.decompress(compressed)
        except SpdyError as error:
            raise _ProtocolError(str(error)) from None
        try:
            return decode_name_value_block(block), None
        except SpdyError as error:
            return {}, error  # the context is intact, so this is an error of the stream only

    async def _on_data(self, stream_id: int, flags: int, length: int) -> None:
        if stream_id == 0:
            raise _ProtocolError("DATA frame on stream 0")
        stream = self._streams.get(stream_id)
        if stream is None or stream._remote_done:
            await self._skip(length)
            self._acknowledge_session(length)
            if stream is not None:
                self._stream_error(stream_id, STREAM_ALREADY_CLOSED)
            elif not self._was_opened(stream_id) and not self._goaway_sent:
                self._stream_error(stream_id, INVALID_STREAM)
            return
        remaining = length
        while remaining:
            piece = await self._read_exactly(min(remaining, READ_PIECE))
            remaining -= len(piece)
            self._acknowledge_session(len(piece))
            if stream.closed:  # reset meanwhile: discard the rest
                continue
            stream._deliver(piece)
            # Backpressure: read nothing more from the connection until this stream's reader catches up.
            while stream._buffered > self.stream_buffer_limit and not stream.closed:
                await stream._drained.wait()
        if flags & FLAG_FIN and not stream.closed:
            stream._remote_fin()

    async def _on_syn_stream(self, flags: int, payload: bytes) -> None:
        if len(payload) < 10:
            raise _ProtocolError(f"SYN_STREAM of {len(payload)} bytes")
        stream_id = _U32.unpack_from(payload)[0] & MAX_STREAM_ID
        headers, header_error = self._decode_headers(payload[10:])  # always, to keep the context in step
        if stream_id == 0 or stream_id % 2 == self._local_parity:
            raise _ProtocolError(f"SYN_STREAM with stream id {stream_id}, not one the peer may open")
        if stream_id <= self._last_peer_stream_id:
            if stream_id in self._streams:
                self._stream_error(stream_id, PROTOCOL_ERROR)  # a second SYN_STREAM for a live stream
                return
            raise _ProtocolError(f"SYN_STREAM {stream_id} after {self._last_peer_stream_id}: ids must increase")
        self._last_peer_stream_id = stream_id
        if self._goaway_sent:
            return
        if header_error is not None:
            log.debug("SPDY: refusing stream %d: %s", stream_id, header_error)
            self._stream_error(stream_id, PROTOCOL_ERROR)
            return
        opened_by_peer = sum(1 for known in self._streams if known % 2 != self._local_parity)
        if opened_by_peer >= self.max_concurrent_streams:
            self._stream_error(stream_id, REFUSED_STREAM)
            return
        stream = SpdyStream(self, stream_id, headers, self._peer_initial_window)
        self._streams[stream_id] = stream
        if flags & FLAG_UNIDIRECTIONAL:
            stream._local_done = True  # we may not send, not even a SYN_REPLY
        else:
            # At once, as k8s's server handler replies right after its header check: a peer waiting for the
            # reply before its next SYN_STREAM never waits for the application to call accept().
            self._emit_quietly(control_frame(SYN_REPLY, _U32.pack(stream_id) + self._compressor.compress({})))
        stream._replied = True
        if flags & FLAG_FIN:
            stream._remote_fin()
        self._incoming.put_nowait(stream)

    def _header_frame(
        self, kind: str, payload: bytes
    ) -> tuple[int, SpdyStream | None, dict[str, str], SpdyError | None]:
        """Stream id, open stream (None: answered already), headers and header error of a SYN_REPLY or HEADERS."""
        if len(payload) < 4:
            raise _ProtocolError(f"{kind} of {len(payload)} bytes")
        stream_id = _U32.unpack_from(payload)[0] & MAX_STREAM_ID
        headers, header_error = self._decode_headers(payload[4:])  # always, to keep the context in step
        stream = self._streams.get(stream_id)
        if stream is None and not self._was_opened(stream_id):
            self._stream_error(stream_id, INVALID_STREAM)
        return stream_id, stream, headers, header_error

    async def _on_syn_reply(self, flags: int, payload: bytes) -> None:
        stream_id, stream, headers, header_error = self._header_frame("SYN_REPLY", payload)
        if stream is None:
            return
        if stream_id % 2 != self._local_parity:
            self._stream_error(stream_id, PROTOCOL_ERROR)  # a reply to the peer's own stream
            return
        if stream._replied:
            self._stream_error(stream_id, STREAM_IN_USE)
            return
        if header_error is not None:
            self._stream_error(stream_id, PROTOCOL_ERROR)
            return
        stream.reply_headers = headers
        stream._replied = True
        stream._reply_event.set()
        if flags & FLAG_FIN:
            stream._remote_fin()

    async def _on_headers(self, flags: int, payload: bytes) -> None:
        stream_id, stream, headers, header_error = self._header_frame("HEADERS", payload)
        if stream is None:
            return
        if stream._remote_done:
            self._stream_error(stream_id, STREAM_ALREADY_CLOSED)
            return
        if header_error is not None:
            self._stream_error(stream_id, PROTOCOL_ERROR)
            return
        stream.late_headers.update(headers)
        if flags & FLAG_FIN:
            stream._remote_fin()

    async def _on_rst_stream(self, flags: int, payload: bytes) -> None:
        if len(payload) != 8:
            raise _ProtocolError(f"RST_STREAM of {len(payload)} bytes")
        stream_id, status = _U32_PAIR.unpack(payload)
        stream = self._streams.get(stream_id & MAX_STREAM_ID)
        if stream is not None:  # never answer a RST_STREAM with one
            stream._abort(status)

    async def _on_settings(self, flags: int, payload: bytes) -> None:
        if len(payload) < 4:
            raise _ProtocolError(f"SETTINGS of {len(payload)} bytes")
        (count,) = _U32.unpack_from(payload)
        if len(payload) != 4 + 8 * count:
            raise _ProtocolError(f"SETTINGS of {len(payload)} bytes for {count} entries")
        for index in range(count):
            id_and_flags, value = _U32_PAIR.unpack_from(payload, 4 + 8 * index)
            if id_and_flags & 0xFFFFFF != SETTINGS_INITIAL_WINDOW_SIZE:
                continue  # bandwidth, round-trip and the like mean nothing to us
            if value > MAX_WINDOW:
                raise _ProtocolError(f"SETTINGS INITIAL_WINDOW_SIZE {value}")
            delta = value - self._peer_initial_window
            self._peer_initial_window = value
            for stream in self._streams.values():  # the spec: open streams' windows move by the change
                stream._send_window += delta
            self._peer_does_flow_control()
            self._window_signal.fire()

    async def _on_ping(self, flags: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ProtocolError(f"PING of {len(payload)} bytes")
        (ping_id,) = _U32.unpack(payload)
        if ping_id % 2 != self._local_parity:
            self._emit_reply(control_frame(PING, payload))  # the peer's: answer with the same id
            return
        answered = self._pings.get(ping_id)
        if answered is not None and not answered.done():
            answered.set_result(None)

    async def _on_goaway(self, flags: int, payload: bytes) -> None:
        if len(payload) != 8:
            raise _ProtocolError(f"GOAWAY of {len(payload)} bytes")
        last_good = _U32.unpack_from(payload)[0] & MAX_STREAM_ID
        self._goaway_received = True
        for stream in list(self._streams.values()):
            if stream.id % 2 == self._local_parity and stream.id > last_good:
                stream._abort(REFUSED_STREAM)  # the peer never processed it
        self._incoming.put_nowait(None)  # the peer opens no more streams
        if not self._streams:
            self._terminate(None)

    async def _on_window_update(self, flags: int, payload: bytes) -> None:
        if len(payload) != 8:
            raise _ProtocolError(f"WINDOW_UPDATE of {len(payload)} bytes")
        stream_id, delta = (value & 0x7FFFFFFF for value in _U32_PAIR.unpack(payload))
        self._peer_does_flow_control()
        if stream_id == 0:  # SPDY/3.1's session window
            self._session_send_window += delta
            if self._session_send_window > MAX_WINDOW:
                raise _ProtocolError("session window beyond 2^31-1")
        else:
            stream = self._streams.get(stream_id)
            if stream is None:
                return
            stream._send_window += delta
            if stream._send_window > MAX_WINDOW:
                self._stream_error(stream_id, FLOW_CONTROL_ERROR)
        self._window_signal.fire()

    _control_handlers: ClassVar[dict[int, Callable[[SpdySession, int, bytes], Awaitable[None]]]] = {
        SYN_STREAM: _on_syn_stream,
        SYN_REPLY: _on_syn_reply,
        RST_STREAM: _on_rst_stream,
        SETTINGS: _on_settings,
        PING: _on_ping,
        GOAWAY: _on_goaway,
        HEADERS: _on_headers,
        WINDOW_UPDATE: _on_window_update,
    }
