"""SessionCore: the part of a SpdySession its streams call into. It holds the session's state and writes
frames, keeps the flow-control windows and ends streams and the session; SpdySession adds the public
operations and the read loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from .frames import (
    _U32_PAIR,
    DEFAULT_INITIAL_WINDOW,
    DEFAULT_REPLY_TIMEOUT,
    DEFAULT_STREAM_BUFFER_LIMIT,
    REPLY_BACKLOG_LIMIT,
    WINDOW_UPDATE,
    WINDOW_UPDATE_THRESHOLD,
    HeaderCompressor,
    HeaderDecompressor,
    SpdyError,
    control_frame,
)

if TYPE_CHECKING:
    from .stream import SpdyStream

log = logging.getLogger(__name__)


class _Signal:
    """Wakes everyone waiting at the time it fires, then re-arms."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class SessionCore:
    """A SPDY/3.1 session's state, and what writes to its connection (frames, flow-control windows) and
    ends it. Only SpdySession derives from it."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        server: bool,
        stream_buffer_limit: int = DEFAULT_STREAM_BUFFER_LIMIT,
        peer_flow_control: bool | None = None,
        reply_timeout: float = DEFAULT_REPLY_TIMEOUT,
        max_concurrent_streams: int = 1000,
    ):
        self.stream_buffer_limit = stream_buffer_limit
        self.reply_timeout = reply_timeout
        self.max_concurrent_streams = max_concurrent_streams  # opened by the peer; more are refused
        self.error: BaseException | None = None  # why the session ended, if not cleanly
        self._reader = reader
        self._writer = writer
        self._local_parity = 0 if server else 1
        self._next_stream_id = 2 if server else 1
        self._next_ping_id = 2 if server else 1
        self._last_peer_stream_id = 0
        self._streams: dict[int, SpdyStream] = {}
        self._incoming: asyncio.Queue[SpdyStream | None] = asyncio.Queue()
        self._pings: dict[int, asyncio.Future[None]] = {}
        self._compressor = HeaderCompressor()
        self._decompressor = HeaderDecompressor()
        self._peer_initial_window = DEFAULT_INITIAL_WINDOW
        self._session_send_window = DEFAULT_INITIAL_WINDOW
        self._session_unacknowledged = 0
        self._enforce_peer_windows = bool(peer_flow_control)
        self._detect_peer_flow_control = peer_flow_control is None
        self._window_signal = _Signal()
        self._goaway_sent = False
        self._goaway_received = False
        self._ended = False
        self._ended_event = asyncio.Event()
        self._running = False

    @property
    def closed(self) -> bool:
        return self._ended

    async def wait_closed(self) -> None:
        await self._ended_event.wait()

    @property
    def peer_flow_control(self) -> bool:
        """Whether our writes wait for the peer's windows (see the package docstring)."""
        return self._enforce_peer_windows

    # --- Writing ---

    def _emit(self, *parts: bytes) -> None:
        """Hand one frame to the transport, whole, now: frames cannot interleave."""
        if self._ended or self._writer.is_closing():
            raise SpdyError("the session has ended")
        self._writer.writelines(parts)

    def _emit_quietly(self, frame: bytes) -> None:
        with contextlib.suppress(SpdyError):
            self._emit(frame)

    def _emit_reply(self, frame: bytes) -> None:
        """A frame the read loop answers with; dropped when the peer is not reading what we send."""
        transport = self._writer.transport
        if transport is not None and transport.get_write_buffer_size() > REPLY_BACKLOG_LIMIT:
            log.debug("SPDY: peer not reading, dropping a reply frame")
            return
        self._emit_quietly(frame)

    async def _flush(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as error:
            self._terminate(SpdyError(f"connection lost: {error!r}"))
            raise SpdyError(f"connection lost: {error!r}") from None

    async def _reserve_send_window(self, stream: SpdyStream, wanted: int) -> int:
        while True:
            stream._check_writable()
            if not self._enforce_peer_windows:
                break
            available = min(stream._send_window, self._session_send_window)
            if available > 0:
                wanted = min(wanted, available)
                break
            await self._window_signal.wait()
        # Windows are tracked even when not enforced, so they are right if the peer turns out to use them.
        stream._send_window -= wanted
        self._session_send_window -= wanted
        return wanted

    def _consumed(self, stream: SpdyStream, size: int) -> None:
        """The application read size bytes: give them back to a peer that counts stream windows."""
        stream._unacknowledged += size
        if stream._unacknowledged >= WINDOW_UPDATE_THRESHOLD and not stream._remote_done:
            self._emit_quietly(control_frame(WINDOW_UPDATE, _U32_PAIR.pack(stream.id, stream._unacknowledged)))
            stream._unacknowledged = 0

    def _acknowledge_session(self, size: int) -> None:
        """size bytes of DATA arrived: give them back to the session window at once (stream windows and
        the buffer bound already limit what is held)."""
        self._session_unacknowledged += size
        if self._session_unacknowledged >= WINDOW_UPDATE_THRESHOLD:
            self._emit_quietly(control_frame(WINDOW_UPDATE, _U32_PAIR.pack(0, self._session_unacknowledged)))
            self._session_unacknowledged = 0

    def _peer_does_flow_control(self) -> None:
        if self._detect_peer_flow_control and not self._enforce_peer_windows:
            log.debug("SPDY: the peer does flow control; writes now honour its windows")
            self._enforce_peer_windows = True

    # --- Life cycle ---

    def _forget(self, stream: SpdyStream) -> None:
        self._streams.pop(stream.id, None)
        self._window_signal.fire()  # a writer waiting for a window may be this stream's
        if self._goaway_received and not self._streams:
            self._terminate(None)

    def _terminate(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self.error = error
        for stream in list(self._streams.values()):
            stream._connection_lost()
        self._streams.clear()
        for answered in self._pings.values():
            if not answered.done():
                answered.set_exception(SpdyError("the session ended before the PING was answered"))
        self._incoming.put_nowait(None)
        self._window_signal.fire()
        self._writer.close()
        self._ended_event.set()

    async def _wait_transport_closed(self) -> None:
        try:
            async with asyncio.timeout(5):
                await self._writer.wait_closed()
        except TimeoutError:
            self._writer.transport.abort()  # the peer is not reading: drop what it did not take
        except (ConnectionError, OSError):
            pass
