"""SPDY/3.1 framing, enough to serve kube-apiserver's exec, attach and port-forward streams.

kube-apiserver reaches kubelets over SPDY/3.1 as implemented by github.com/moby/spdystream (wrapped by
k8s.io/streaming/pkg/httpstream/spdy). No maintained Python SPDY library exists, so this module speaks
that dialect: every SPDY/3.1 frame except CREDENTIAL; name/value header blocks (32-bit lengths)
zlib-compressed with the SPDY/3 dictionary, one compression context per direction per session,
sync-flushed after each block; client stream ids odd, server ids even.

What spdystream v0.5.1 does with flow control (connection.go, stream.go, spdy/read.go), and what
follows for this module:

* It never sends SETTINGS or WINDOW_UPDATE, and it ignores both: they reach the "unhandled frame type"
  branch of its frame handler. It keeps no send window either; Stream.Write sends one DATA frame per
  call, of any size up to 16 MiB. So the first 64 KiB SPDY grants by default is all it would ever grant.
  -> Our sender keeps SPDY's send windows (64 KiB per stream and per session to start) but waits on
  them only once the peer has shown that it does flow control, by sending a WINDOW_UPDATE or a SETTINGS
  INITIAL_WINDOW_SIZE (``peer_flow_control=None``; True or False decide up front). Against spdystream
  a write therefore never waits for a WINDOW_UPDATE.
* Its receiver applies backpressure by not reading the connection: the read loop hands frames to 5
  workers through queues of 50, and a worker hands each DATA frame to the stream's reader over an
  unbuffered channel, so a reader that stops reading stalls its worker, then the read loop, then TCP.
  -> Our receiver does the same, which a peer ignoring windows cannot overrun: a stream buffers at most
  ``stream_buffer_limit`` plus one read piece (64 KiB, however large the DATA frame); beyond that the
  read loop waits for that stream's reader (or its reset) before reading anything more from the socket.
  For a peer that honours windows we also send WINDOW_UPDATEs: per stream as the application consumes
  data, so such a peer never has more than 64 KiB outstanding on a stream and never reaches the bound;
  for the session as soon as data arrives, so that one slow stream does not use up SPDY/3.1's 64 KiB
  session window and hold back the others. We never reset a peer for overrunning a window: spdystream
  always would.
* The price, as in spdystream: while one stream's buffer is full, no frame for any other stream (nor a
  PING) is read. An application must read or reset every stream it accepts, or the whole session
  stalls. Writes wait for the read loop only for the windows of a peer that does flow control, and
  such a peer never fills a buffer (unless stream_buffer_limit is set below 64 KiB), so a reader cannot
  deadlock against its own writes.

Other spdystream behaviour this relies on or avoids: it tears the connection down on any frame it
cannot parse (unknown control frame types, RST_STREAM with status 0, upper-case or duplicate header
names, flags on PING or GOAWAY), so we never send those; it drops DATA on a stream it has not yet
seen a SYN_REPLY for (or, as a server, replied to), so we reply to a SYN_STREAM as soon as it arrives,
before the application can write to the stream, and open_stream() returns only after the reply; it
reads nothing after a GOAWAY.

Writing: each frame is built and handed to the transport in one synchronous step, with no await
between compressing a header block and writing its frame, so frames never interleave and the peer's
decompressor sees blocks in the order they were compressed; writers then await drain() for TCP
backpressure. Frames the read loop sends (SYN_REPLY, PING answers, RST_STREAM, WINDOW_UPDATE) never
wait for drain, so a congested transport cannot stop us reading; PING answers and RST_STREAMs are
dropped while the transport's buffer is very large, so a peer cannot grow it by flooding us with
PINGs it does not read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar

log = logging.getLogger(__name__)

VERSION = 3

# Control frame types.
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

# Flags: FIN on SYN_STREAM, SYN_REPLY, HEADERS and DATA; UNIDIRECTIONAL on SYN_STREAM only.
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

# RST_STREAM status codes.
PROTOCOL_ERROR = 1
INVALID_STREAM = 2
REFUSED_STREAM = 3
UNSUPPORTED_VERSION = 4
CANCEL = 5
INTERNAL_ERROR = 6
FLOW_CONTROL_ERROR = 7
STREAM_IN_USE = 8
STREAM_ALREADY_CLOSED = 9
FRAME_TOO_LARGE = 11

# GOAWAY status codes.
GOAWAY_OK = 0
GOAWAY_PROTOCOL_ERROR = 1
GOAWAY_INTERNAL_ERROR = 2

SETTINGS_INITIAL_WINDOW_SIZE = 7

DEFAULT_INITIAL_WINDOW = 64 * 1024  # SPDY/3.1's initial stream and session windows
MAX_WINDOW = 0x7FFFFFFF
MAX_STREAM_ID = 0x7FFFFFFF
MAX_FRAME_LENGTH = 0xFFFFFF  # the 24-bit length field

MAX_DATA_FRAME = 64 * 1024  # what one write() puts in a DATA frame at most
READ_PIECE = 64 * 1024  # DATA payloads are read and buffered in pieces of at most this
MAX_CONTROL_FRAME = 1024 * 1024  # k8s header blocks are tiny; larger control frames end the session
MAX_HEADER_BLOCK = 1024 * 1024  # decompressed size, against zlib bombs
DEFAULT_STREAM_BUFFER_LIMIT = 256 * 1024
WINDOW_UPDATE_THRESHOLD = DEFAULT_INITIAL_WINDOW // 2
REPLY_BACKLOG_LIMIT = 4 * 1024 * 1024  # beyond this much unsent output, PING answers and RSTs are dropped
DEFAULT_REPLY_TIMEOUT = 30.0  # what k8s waits for a SYN_REPLY

# The spec's dictionary: each of these words, "|"-separated ("200 OK" holds a space), preceded by its
# 32-bit length; then _TAIL as is.
_WORDS = (
    "options|head|post|put|delete|trace|accept|accept-charset|accept-encoding|accept-language|"
    "accept-ranges|age|allow|authorization|cache-control|connection|content-base|content-encoding|"
    "content-language|content-length|content-location|content-md5|content-range|content-type|date|etag|"
    "expect|expires|from|host|if-match|if-modified-since|if-none-match|if-range|if-unmodified-since|"
    "last-modified|location|max-forwards|pragma|proxy-authenticate|proxy-authorization|range|referer|"
    "retry-after|server|te|trailer|transfer-encoding|upgrade|user-agent|vary|via|warning|"
    "www-authenticate|method|get|status|200 OK|version|HTTP/1.1|url|public|set-cookie|keep-alive|origin"
)
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


SPDY3_DICTIONARY = b"".join(struct.pack(">I", len(word)) + word.encode() for word in _WORDS.split("|")) + _TAIL.encode()

_CONTROL_HEADER = struct.Struct(">HHI")  # control bit and version, type, flags << 24 | length
_DATA_HEADER = struct.Struct(">II")  # stream id, flags << 24 | length
_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")


class SpdyError(Exception):
    """A SPDY protocol violation, or use of a stream or session that can no longer carry it."""


class _ProtocolError(SpdyError):
    """A session error: the session answers it with GOAWAY and ends."""

    def __init__(self, message: str, goaway_status: int = GOAWAY_PROTOCOL_ERROR):
        super().__init__(message)
        self.goaway_status = goaway_status


class _PeerClosed(Exception):
    """The peer closed the connection between two frames."""


# --- Encoding ----------------------------------------------------------------------------------------


def control_frame(frame_type: int, payload: bytes, flags: int = 0) -> bytes:
    if len(payload) > MAX_FRAME_LENGTH:
        raise SpdyError(f"control frame payload of {len(payload)} bytes does not fit a frame")
    return _CONTROL_HEADER.pack(0x8000 | VERSION, frame_type, flags << 24 | len(payload)) + payload


def data_frame_header(stream_id: int, length: int, flags: int = 0) -> bytes:
    if length > MAX_FRAME_LENGTH:
        raise SpdyError(f"DATA payload of {length} bytes does not fit a frame")
    return _DATA_HEADER.pack(stream_id & MAX_STREAM_ID, flags << 24 | length)


def encode_name_value_block(headers: Mapping[str, str]) -> bytes:
    """The uncompressed block. Names are lower-cased (spdystream rejects others); several values of one
    name travel NUL-separated in one value, as the caller wrote them."""
    names = [name.lower() for name in headers]
    if len(set(names)) != len(names):
        raise SpdyError(f"header names collide once lower-cased: {sorted(headers)}")
    parts = [_U32.pack(len(names))]
    for name, value in zip(names, headers.values(), strict=True):
        if not name:
            raise SpdyError("empty header name")
        encoded_name = name.encode("utf-8", "surrogateescape")
        encoded_value = value.encode("utf-8", "surrogateescape")
        parts += [_U32.pack(len(encoded_name)), encoded_name, _U32.pack(len(encoded_value)), encoded_value]
    return b"".join(parts)


def decode_name_value_block(block: bytes) -> dict[str, str]:
    """Headers from an uncompressed block; SpdyError if it is malformed, has an empty, upper-case or
    repeated name."""
    view = memoryview(block)
    offset = 0

    def take(length: int) -> bytes:
        nonlocal offset
        if offset + length > len(view):
            raise SpdyError("truncated name/value block")
        piece = bytes(view[offset : offset + length])
        offset += length
        return piece

    (count,) = _U32.unpack(take(4))
    if count * 8 > len(view) - 4:  # each pair needs at least its two lengths
        raise SpdyError(f"name/value block claims {count} pairs in {len(view)} bytes")
    headers: dict[str, str] = {}
    for _ in range(count):
        name = take(_U32.unpack(take(4))[0]).decode("utf-8", "surrogateescape")
        value = take(_U32.unpack(take(4))[0]).decode("utf-8", "surrogateescape")
        if not name:
            raise SpdyError("empty header name")
        if name != name.lower():
            raise SpdyError(f"upper-case header name {name!r}")
        if name in headers:
            raise SpdyError(f"repeated header name {name!r}")
        headers[name] = value
    if offset != len(view):
        raise SpdyError(f"{len(view) - offset} stray bytes after the name/value block")
    return headers


class HeaderCompressor:
    """One direction's compression context: every header block a session sends goes through it, in order."""

    def __init__(self) -> None:
        # Level 9 as spdystream uses; any level decompresses the same.
        self._zlib = zlib.compressobj(9, zlib.DEFLATED, 15, zdict=SPDY3_DICTIONARY)

    def compress(self, headers: Mapping[str, str]) -> bytes:
        block = encode_name_value_block(headers)  # raises before the context advances
        return self._zlib.compress(block) + self._zlib.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The other direction's context. Any failure desynchronises it, so it is a session error."""

    def __init__(self, limit: int = MAX_HEADER_BLOCK) -> None:
        self._zlib = zlib.decompressobj(15, zdict=SPDY3_DICTIONARY)
        self._limit = limit

    def decompress(self, compressed: bytes) -> bytes:
        try:
            block = self._zlib.decompress(compressed, self._limit + 1)
        except zlib.error as error:
            raise SpdyError(f"header block does not decompress: {error}") from None
        if len(block) > self._limit or self._zlib.unconsumed_tail:
            raise SpdyError(f"header block decompresses to more than {self._limit} bytes")
        return block


# --- Streams -----------------------------------------------------------------------------------------


class _Signal:
    """Wakes everyone waiting at the time it fires, then re-arms."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


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


# --- Session -----------------------------------------------------------------------------------------


class SpdySession:
    """A SPDY/3.1 session over one connection. Call run() (as a task) for it to receive anything."""

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
        """Whether our writes wait for the peer's windows (see the module docstring)."""
        return self._enforce_peer_windows

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
