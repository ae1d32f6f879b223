"""SPDY/3.1 on the wire: protocol constants, control and DATA frame headers, name/value header blocks and
their zlib (de)compression with the SPDY/3 dictionary. What of the protocol this serves, and how, is told
in the package docstring."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

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
