"""SpdyStream: one stream of a SpdySession, read in chunks, written in DATA frames within the peer's
windows, half-closed or reset."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .frames import (
    _U32,
    _U32_PAIR,
    CANCEL,
    FLAG_FIN,
    HEADERS,
    MAX_DATA_FRAME,
    RST_STREAM,
    SpdyError,
    control_frame,
    data_frame_header,
)

if TYPE_CHECKING:
    from .session import SpdySession


class SpdyStream:
    """One SPDY stream. Data arrives in chunks of at most one frame (or READ_PIECE) each."""

    def __init__(self, session: SpdySession, stream_id: int, headers: dict[str, str], send_window: int):
        self.id = stream_id
        self.headers = headers  # of the SYN_STREAM, whichever side sent it: lower-case names, NUL between values
        self.reply_headers: dict[str, str] = {}  # of the SYN_REPLY, on streams we opened
        self.late_headers: dict[str, str] = {}  # from HEADERS frames, merged
        self.reset_status: int | None = None  # RST_STREAM status, sent or received
        self.remote_finished = False  # the peer half-closed cleanly (FIN), rather than reset or vanished
        self._session = session
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._remote_done = False  # nothing more will arrive: FIN, reset or connection lost
        self._local_done = False  # we may send nothing more: FIN sent, reset or connection lost
        self._replied = False  # SYN_REPLY received (our streams) or sent (the peer's)
        self._send_window = send_window
        self._unacknowledged = 0  # consumed bytes not yet returned to the peer in a WINDOW_UPDATE
        self._readable = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._reply_event = asyncio.Event()
        self._closed_event = asyncio.Event()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<SpdyStream {self.id} {state} buffered={self._buffered}>"

    @property
    def closed(self) -> bool:
        return self._closed_event.is_set()

    @property
    def buffered(self) -> int:
        """Bytes received and not read yet (at most the session's stream_buffer_limit + READ_PIECE)."""
        return self._buffered

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    async def read(self) -> bytes:
        """The next chunk; b"" once the peer half-closed and everything before was read, or at once
        after a reset (buffered data is dropped) or after the connection ended with nothing buffered."""
        while not self._chunks:
            if self._remote_done:
                return b""
            self._readable.clear()
            await self._readable.wait()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._buffered <= self._session.stream_buffer_limit:
            self._drained.set()
        self._session._consumed(self, len(chunk))
        return chunk

    async def write(self, data: bytes) -> None:
        """Send data, in frames of at most MAX_DATA_FRAME. SpdyError if the stream is reset or closed for
        writing, or the session ended."""
        view = memoryview(data).cast("B")
        if not view:
            self._check_writable()
        while view:
            size = await self._session._reserve_send_window(self, min(len(view), MAX_DATA_FRAME))
            self._session._emit(data_frame_header(self.id, size), bytes(view[:size]))
            view = view[size:]
            await self._session._flush()

    async def send_headers(self, headers: Mapping[str, str], *, fin: bool = False) -> None:
        """A HEADERS frame: headers beyond those of SYN_STREAM/SYN_REPLY."""
        self._check_writable()
        session = self._session
        block = session._compressor.compress(headers)
        session._emit(control_frame(HEADERS, _U32.pack(self.id) + block, FLAG_FIN if fin else 0))
        if fin:
            self._local_done = True
            self._finish_if_done()
        await session._flush()

    async def close(self) -> None:
        """Half-close our side (an empty DATA frame with FIN). Nothing happens on a stream already closed for
        writing, reset, or whose session ended, so it is safe in cleanup code."""
        if self._local_done:
            return
        self._local_done = True
        with contextlib.suppress(SpdyError):
            self._session._emit(data_frame_header(self.id, 0, FLAG_FIN))
        self._finish_if_done()
        with contextlib.suppress(SpdyError):
            await self._session._flush()

    def reset(self, status: int = CANCEL) -> None:
        """RST_STREAM: both directions end now; data buffered for reading is dropped."""
        if self.closed:
            return
        self._session._emit_quietly(control_frame(RST_STREAM, _U32_PAIR.pack(self.id, status)))
        self._abort(status)

    # --- Used by the session ---

    def _check_writable(self) -> None:
        if self.reset_status is not None:
            raise SpdyError(f"stream {self.id} was reset (status {self.reset_status})")
        if self._session.closed:
            raise SpdyError(f"stream {self.id}: the session has ended")
        if self._local_done:
            raise SpdyError(f"stream {self.id} is closed for writing")

    def _deliver(self, piece: bytes) -> None:
        self._chunks.append(piece)
        self._buffered += len(piece)
        self._readable.set()
        if self._buffered > self._session.stream_buffer_limit:
            self._drained.clear()

    def _remote_fin(self) -> None:
        self.remote_finished = True
        self._remote_done = True
        self._readable.set()
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        if self._local_done and self._remote_done and not self.closed:
            self._end()

    def _abort(self, status: int) -> None:
        """Reset, by us or the peer: nothing more is read or written."""
        if self.closed:
            return
        self.reset_status = status
        self._chunks.clear()
        self._buffered = 0
        self._local_done = self._remote_done = True
        self._end()

    def _connection_lost(self) -> None:
        """The session ended: what was received stays readable, then read() returns b""."""
        self._local_done = self._remote_done = True
        self._end()

    def _end(self) -> None:
        self._readable.set()
        self._drained.set()  # a read loop waiting for this reader must not wait any longer
        self._reply_event.set()
        self._closed_event.set()
        self._session._forget(self)
