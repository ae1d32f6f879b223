"""SPDY/3.1 framing (catamaran.vk.kubelet.spdy).

Sessions talk over real local sockets. Where the wire itself is under test, one end is a RawPeer that
builds and parses frames by hand, as spdystream (which never sends WINDOW_UPDATE) or a misbehaving
peer would.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import struct
import zlib
from dataclasses import dataclass

import pytest

from catamaran.vk.kubelet.spdy import SpdyError, SpdySession, SpdyStream, frames
from catamaran.vk.kubelet.spdy.frames import (
    HeaderCompressor,
    HeaderDecompressor,
    decode_name_value_block,
    encode_name_value_block,
)

TEST_TIMEOUT = 30
QUIET = 0.3  # how long "nothing more arrives" is watched for
MIB = 1024 * 1024


def run(coroutine):
    async def bounded():
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coroutine

    return asyncio.run(bounded())


async def socket_pair():
    left, right = socket.socketpair()
    return await asyncio.open_connection(sock=left), await asyncio.open_connection(sock=right)


@contextlib.asynccontextmanager
async def sessions(client_options=None, server_options=None):
    (client_reader, client_writer), (server_reader, server_writer) = await socket_pair()
    client = SpdySession(client_reader, client_writer, server=False, **(client_options or {}))
    server = SpdySession(server_reader, server_writer, server=True, **(server_options or {}))
    runs = [asyncio.create_task(client.run()), asyncio.create_task(server.run())]
    try:
        yield client, server
    finally:
        await client.close()
        await server.close()
        await asyncio.gather(*runs)


@dataclass
class Frame:
    control: bool
    kind: int  # control frame type, or the DATA frame's stream id
    flags: int
    payload: bytes

    def words(self) -> tuple[int, ...]:
        return struct.unpack(f">{len(self.payload) // 4}I", self.payload[: len(self.payload) // 4 * 4])


def control(frame_type: int, payload: bytes, flags: int = 0, version: int = 3) -> bytes:
    return struct.pack(">HHI", 0x8000 | version, frame_type, flags << 24 | len(payload)) + payload


def data(stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">II", stream_id, flags << 24 | len(payload)) + payload


class RawPeer:
    """The far end of a session, frame by hand-built frame; its header blocks use the module's codec."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, server: bool):
        self.reader, self.writer = reader, writer
        self.ping_id = 1000 if server else 1001  # PING ids have the parity of stream ids
        # Its own compression context, built from zlib directly, so the module's compressor is not its judge.
        self._zlib = zlib.compressobj(9, zlib.DEFLATED, 15, zdict=frames.SPDY3_DICTIONARY)
        self.decompressor = HeaderDecompressor()

    async def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))
        await self.writer.drain()

    def compress(self, block: bytes) -> bytes:
        return self._zlib.compress(block) + self._zlib.flush(zlib.Z_SYNC_FLUSH)

    def syn_stream(
        self, stream_id: int, headers: dict[str, str], flags: int = 0, *, block: bytes | None = None
    ) -> bytes:
        block = encode_name_value_block(headers) if block is None else block
        return control(frames.SYN_STREAM, struct.pack(">IIBB", stream_id, 0, 0, 0) + self.compress(block), flags)

    def syn_reply(self, stream_id: int) -> bytes:
        return control(frames.SYN_REPLY, struct.pack(">I", stream_id) + self.compress(encode_name_value_block({})))

    async def frame(self) -> Frame:
        first, second = struct.unpack(">II", await self.reader.readexactly(8))
        payload = await self.reader.readexactly(second & 0xFFFFFF)
        if first & 0x80000000:
            assert first >> 16 & 0x7FFF == 3
            return Frame(True, first & 0xFFFF, second >> 24, payload)
        return Frame(False, first, second >> 24, payload)

    async def next_frame(self, *, skip_window_updates: bool = True) -> Frame:
        while True:
            frame = await self.frame()
            if not (skip_window_updates and frame.control and frame.kind == frames.WINDOW_UPDATE):
                return frame

    async def expect_control(self, frame_type: int) -> Frame:
        frame = await self.next_frame()
        assert (frame.control, frame.kind) == (True, frame_type), frame
        return frame

    async def expect_reply_headers(self, stream_id: int) -> dict[str, str]:
        frame = await self.expect_control(frames.SYN_REPLY)
        assert frame.words()[0] == stream_id
        return decode_name_value_block(self.decompressor.decompress(frame.payload[4:]))

    async def expect_rst(self, stream_id: int, status: int) -> None:
        frame = await self.expect_control(frames.RST_STREAM)
        assert frame.words() == (stream_id, status)

    async def expect_goaway_and_eof(self, status: int) -> None:
        frame = await self.next_frame()
        while frame.control and frame.kind == frames.SYN_REPLY:  # for streams opened before the error
            frame = await self.next_frame()
        assert (frame.control, frame.kind) == (True, frames.GOAWAY), frame
        assert frame.words()[1] == status
        assert await self.reader.read() == b""

    async def expect_alive(self) -> None:
        self.ping_id += 2
        await self.send(control(frames.PING, struct.pack(">I", self.ping_id)))
        assert (await self.expect_control(frames.PING)).words() == (self.ping_id,)

    async def expect_silence(self, *, skip_window_updates: bool = True) -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(QUIET):
                await self.next_frame(skip_window_updates=skip_window_updates)

    async def data_until(self, stream_id: int, size: int) -> bytes:
        received = b""
        while len(received) < size:
            frame = await self.next_frame()
            assert (frame.control, frame.kind) == (False, stream_id), frame
            received += frame.payload
        return received


@contextlib.asynccontextmanager
async def session_and_raw_peer(*, server: bool = True, **options):
    (session_reader, session_writer), (peer_reader, peer_writer) = await socket_pair()
    session = SpdySession(session_reader, session_writer, server=server, **options)
    running = asyncio.create_task(session.run())
    try:
        yield session, RawPeer(peer_reader, peer_writer, server=not server)
    finally:
        await session.close()
        await running
        peer_writer.close()


async def echo(stream: SpdyStream) -> None:
    while chunk := await stream.read():
        await stream.write(chunk)
    await stream.close()


async def echo_everything(session: SpdySession) -> None:
    echoes = []
    while (stream := await session.accept()) is not None:
        echoes.append(asyncio.create_task(echo(stream)))
    await asyncio.gather(*echoes, return_exceptions=True)


async def read_all(stream: SpdyStream) -> bytes:
    chunks = []
    while chunk := await stream.read():
        chunks.append(chunk)
    return b"".join(chunks)


def pattern(size: int, seed: int = 0) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * 2048
    return (block * (size // len(block) + 1))[:size]


# --- Header blocks -----------------------------------------------------------------------------------


def test_dictionary_is_the_spdy3_one():
    assert len(frames.SPDY3_DICTIONARY) == 1423
    assert zlib.adler32(frames.SPDY3_DICTIONARY) == 0xE3C6A7C2
    assert frames.SPDY3_DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert b"\x00\x00\x00\x06200 OK\x00\x00\x00\x07version" in frames.SPDY3_DICTIONARY
    assert frames.SPDY3_DICTIONARY.endswith(b",*,enq=0.")


def test_name_value_block_layout():
    assert encode_name_value_block({"Port": "80"}) == b"\x00\x00\x00\x01\x00\x00\x00\x04port\x00\x00\x00\x0280"
    assert decode_name_value_block(b"\x00\x00\x00\x01\x00\x00\x00\x04port\x00\x00\x00\x0280") == {"port": "80"}
    assert decode_name_value_block(encode_name_value_block({})) == {}
    with pytest.raises(SpdyError, match="collide"):
        encode_name_value_block({"Port": "1", "port": "2"})


@pytest.mark.parametrize(
    ("block", "complaint"),
    [
        (b"\x00\x00\x00\x01\x00\x00\x00\x04Port\x00\x00\x00\x0280", "upper-case"),
        (b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01a\x00\x00\x00\x00" * 2, "repeated"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00", "empty"),
        (b"\x00\x00\x00\x01\x00\x00\x00\x04port\x00\x00\x00\x05ab", "truncated"),
        (b"\x00\x00\x00\x00extra", "stray"),
        (b"\xff\xff\xff\xff", "claims"),
    ],
)
def test_malformed_name_value_blocks_are_refused(block, complaint):
    with pytest.raises(SpdyError, match=complaint):
        decode_name_value_block(block)


def test_header_blocks_share_one_compression_context_per_direction():
    compressor, decompressor = HeaderCompressor(), HeaderDecompressor()
    port_forward = {"streamtype": "data", "port": "8080", "requestid": "0"}
    blocks = [compressor.compress(port_forward), compressor.compress(port_forward), compressor.compress({})]
    # zlib at level 9 with a preset dictionary, then the SPDY/3 dictionary's id: what SPDY/3 streams open with.
    assert blocks[0][:6] == bytes.fromhex("78f9e3c6a7c2")
    assert all(block.endswith(b"\x00\x00\xff\xff") for block in blocks)  # sync-flushed: each block is complete
    assert len(blocks[1]) < len(blocks[0]) / 2  # the second refers back into the first
    decoded = [decode_name_value_block(decompressor.decompress(block)) for block in blocks]
    assert decoded == [port_forward, port_forward, {}]
    with pytest.raises(SpdyError, match="does not decompress"):
        HeaderDecompressor().decompress(blocks[1])  # meaningless without the context before it
    with pytest.raises(zlib.error):
        zlib.decompressobj().decompress(blocks[0])  # needs the dictionary


def test_header_block_size_is_bounded():
    compressor = HeaderCompressor()
    bomb = compressor.compress({"x": "a" * (2 * MIB)})
    assert len(bomb) < 10_000
    with pytest.raises(SpdyError, match="more than"):
        HeaderDecompressor().decompress(bomb)


# A SYN_STREAM laid out by hand from the SPDY/3 spec. The header block is zlib with the dictionary's id
# in its header and a deflate *stored* block, so every byte is computable without running a compressor;
# the second frame continues the same zlib stream with another stored block, as a shared context must.
GOLDEN_SYN_STREAM_1 = (
    bytes.fromhex("8003 0001")  # control bit, version 3, type 1 (SYN_STREAM)
    + bytes.fromhex("00 000052")  # flags 0, length 82
    + bytes.fromhex("00000001")  # stream id 1
    + bytes.fromhex("00000000")  # associated-to stream id 0
    + bytes.fromhex("00 00")  # priority 0, slot 0
    + bytes.fromhex("78f9")  # zlib: deflate with a 32K window, level 9, FDICT set (0x78f9 % 31 == 0)
    + bytes.fromhex("e3c6a7c2")  # dictionary id: adler32 of the SPDY/3 dictionary
    + bytes.fromhex("00 3d00 c2ff")  # deflate stored block, not final: LEN 61, NLEN, little-endian
    + b"\x00\x00\x00\x03"  # 3 name/value pairs
    + b"\x00\x00\x00\x0astreamtype\x00\x00\x00\x05error"
    + b"\x00\x00\x00\x04port\x00\x00\x00\x048080"
    + b"\x00\x00\x00\x09requestid\x00\x00\x00\x010"
)
GOLDEN_SYN_STREAM_3 = (
    bytes.fromhex("8003 0001")
    + bytes.fromhex("01 000029")  # FLAG_FIN, length 41
    + bytes.fromhex("00000003 00000000 00 00")  # stream id 3
    + bytes.fromhex("00 1a00 e5ff")  # the same zlib stream goes on, no new header: stored block, LEN 26
    + b"\x00\x00\x00\x01"
    + b"\x00\x00\x00\x0astreamtype\x00\x00\x00\x04data"
)


def test_golden_frames_are_consistent_with_their_length_fields():
    for frame in (GOLDEN_SYN_STREAM_1, GOLDEN_SYN_STREAM_3):
        assert struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF == len(frame) - 8
    assert (0x78 * 256 + 0xF9) % 31 == 0


def test_golden_syn_stream_frames_are_parsed():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(GOLDEN_SYN_STREAM_1, GOLDEN_SYN_STREAM_3)
            first = await session.accept()
            assert (first.id, first.headers) == (1, {"streamtype": "error", "port": "8080", "requestid": "0"})
            assert await peer.expect_reply_headers(1) == {}
            second = await session.accept()
            assert (second.id, second.headers) == (3, {"streamtype": "data"})
            assert await second.read() == b""  # FIN on the SYN_STREAM: the peer sends nothing
            assert second.remote_finished
            assert not second.closed  # we still may
            await second.write(b"ok")
            await peer.expect_reply_headers(3)
            assert await peer.data_until(3, 2) == b"ok"

    run(scenario())


def test_headers_round_trip_between_sessions_over_many_frames():
    async def scenario():
        async with sessions() as (client, server):
            sent = [
                {"streamtype": kind, "port": str(port), "requestid": str(request)}
                for request, (kind, port) in enumerate([("error", 80), ("data", 80), ("error", 443), ("data", 443)])
            ]
            sent.append({"streamtype": "stdout", "x-empty": "", "x-many": "a\x00b"})
            opened = [await client.open_stream(headers) for headers in sent]
            accepted = [await server.accept() for _ in sent]
            assert [stream.headers for stream in accepted] == sent
            assert [stream.id for stream in opened] == [1, 3, 5, 7, 9]
            assert [stream.id for stream in accepted] == [1, 3, 5, 7, 9]
            assert all(stream.reply_headers == {} for stream in opened)
            await accepted[0].send_headers({"status": "done"})
            await opened[0].send_headers({"x-trailer": "yes"}, fin=True)
            assert await accepted[0].read() == b""
            assert accepted[0].late_headers == {"x-trailer": "yes"}
            await accepted[0].close()
            await opened[0].wait_closed()
            assert opened[0].late_headers == {"status": "done"}
            with pytest.raises(SpdyError, match="collide"):
                await client.open_stream({"A": "1", "a": "2"})
            assert (await client.open_stream({"after": "refusal"})).id == 11  # no id was spent on it
            assert (await server.accept()).headers == {"after": "refusal"}

    run(scenario())


# --- Streams -----------------------------------------------------------------------------------------


def test_data_flows_both_ways():
    async def scenario():
        async with sessions() as (client, server):
            outgoing = await client.open_stream({"streamtype": "data"})
            incoming = await server.accept()
            await outgoing.write(b"hello ")
            await outgoing.write(bytearray(b"server"))
            assert await incoming.read() + await incoming.read() == b"hello server"
            await incoming.write(b"hello client")
            assert await outgoing.read() == b"hello client"
            await outgoing.write(b"")  # nothing, and no frame

    run(scenario())


def test_half_close_leaves_the_other_direction_open():
    async def scenario():
        async with sessions() as (client, server):
            outgoing = await client.open_stream({})
            incoming = await server.accept()
            await outgoing.write(b"request")
            await outgoing.close()
            await outgoing.close()  # again: nothing happens
            with pytest.raises(SpdyError, match="closed for writing"):
                await outgoing.write(b"more")
            assert await read_all(incoming) == b"request"
            assert incoming.remote_finished
            assert not incoming.closed
            assert not outgoing.closed
            await incoming.write(b"response")
            await incoming.close()
            assert await read_all(outgoing) == b"response"
            await asyncio.gather(outgoing.wait_closed(), incoming.wait_closed())
            assert outgoing.reset_status is None
            assert incoming.reset_status is None
            assert not client._streams
            assert not server._streams

    run(scenario())


def test_open_stream_with_fin_is_half_closed_at_once():
    async def scenario():
        async with sessions() as (client, server):
            outgoing = await client.open_stream({"streamtype": "error"}, fin=True)
            incoming = await server.accept()
            assert await incoming.read() == b""
            await incoming.write(b"an error")
            await incoming.close()
            assert await read_all(outgoing) == b"an error"
            await outgoing.wait_closed()

    run(scenario())


def test_reset_ends_both_directions_and_drops_unread_data():
    async def scenario():
        async with sessions() as (client, server):
            outgoing = await client.open_stream({})
            incoming = await server.accept()
            reading = asyncio.create_task(incoming.read())
            await asyncio.sleep(0.05)
            outgoing.reset()
            assert await reading == b""  # the reader wakes
            assert incoming.reset_status == frames.CANCEL
            assert incoming.closed
            assert not incoming.remote_finished
            with pytest.raises(SpdyError, match="reset"):
                await incoming.write(b"too late")
            with pytest.raises(SpdyError, match="reset"):
                await outgoing.write(b"too late")
            await incoming.close()  # harmless on a reset stream
            outgoing.reset()  # and so is another reset

            outgoing = await client.open_stream({})
            incoming = await server.accept()
            await incoming.write(b"unread")
            await client.ping()  # answered after the data, so the data is here
            assert outgoing.buffered == len(b"unread")
            outgoing.reset(frames.INTERNAL_ERROR)
            assert await outgoing.read() == b""
            await incoming.wait_closed()
            assert incoming.reset_status == frames.INTERNAL_ERROR
            assert (await client.open_stream({})).id == 5  # the session goes on

    run(scenario())


def test_open_stream_fails_when_the_peer_refuses_it():
    async def scenario():
        async with session_and_raw_peer(server=False) as (session, peer):
            opening = asyncio.create_task(session.open_stream({"port": "1"}))
            frame = await peer.expect_control(frames.SYN_STREAM)
            assert frame.words()[0] == 1
            await peer.send(control(frames.RST_STREAM, struct.pack(">II", 1, frames.REFUSED_STREAM)))
            with pytest.raises(SpdyError, match=r"reset \(status 3\) before its reply"):
                await opening
            await peer.expect_silence()  # never a RST_STREAM in answer to one

    run(scenario())


def test_open_stream_gives_up_without_a_reply():
    async def scenario():
        async with session_and_raw_peer(server=False, reply_timeout=0.2) as (session, peer):
            with pytest.raises(SpdyError, match="no SYN_REPLY"):
                await session.open_stream({})
            await peer.expect_control(frames.SYN_STREAM)
            await peer.expect_rst(1, frames.CANCEL)
            await peer.send(peer.syn_reply(1))  # too late: ignored
            await peer.expect_alive()

    run(scenario())


def test_many_concurrent_streams():
    async def scenario():
        async with sessions() as (client, server):
            echoing = asyncio.create_task(echo_everything(server))

            async def exchange(number: int) -> None:
                stream = await client.open_stream({"requestid": str(number)})
                payload = pattern(10_000 + number, seed=number)
                await stream.write(payload)
                await stream.close()
                assert await read_all(stream) == payload
                await stream.wait_closed()

            await asyncio.gather(*(exchange(number) for number in range(300)))
            await client.close()
            await echoing

    run(scenario())


def test_ping_is_answered_with_its_own_id():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(control(frames.PING, struct.pack(">I", 7)))
            assert (await peer.expect_control(frames.PING)).words() == (7,)
            pinging = asyncio.create_task(session.ping())  # the server's own pings have even ids
            ping = await peer.expect_control(frames.PING)
            assert ping.words() == (2,)
            await peer.send(control(frames.PING, ping.payload))
            assert await pinging >= 0
        async with sessions() as (client, server):
            assert await client.ping() >= 0
            assert await server.ping() >= 0

    run(scenario())


# --- Session end -------------------------------------------------------------------------------------


def test_goaway_ends_the_session_for_both_sides():
    async def scenario():
        async with sessions() as (client, server):
            outgoing = await client.open_stream({})
            incoming = await server.accept()
            reading = asyncio.create_task(incoming.read())
            await client.close()
            assert client.closed
            assert outgoing.closed
            assert await reading == b""
            assert await server.accept() is None
            assert await server.accept() is None  # and stays so
            await server.wait_closed()
            assert incoming.closed
            assert server.error is None
            with pytest.raises(SpdyError, match="ended"):
                await server.open_stream({})
            with pytest.raises(SpdyError):
                await outgoing.write(b"x")
            with pytest.raises(SpdyError):
                await server.ping()

    run(scenario())


def test_goaway_from_the_peer_lets_open_streams_finish():
    async def scenario():
        async with session_and_raw_peer(server=False) as (session, peer):
            openings = [asyncio.create_task(session.open_stream({"n": str(n)})) for n in range(2)]
            for stream_id in (1, 3):
                assert (await peer.expect_control(frames.SYN_STREAM)).words()[0] == stream_id
            await peer.send(peer.syn_reply(1), control(frames.GOAWAY, struct.pack(">II", 1, frames.GOAWAY_OK)))
            kept = await openings[0]
            with pytest.raises(SpdyError, match="before its reply"):
                await openings[1]  # beyond the last good stream: never processed
            assert await session.accept() is None
            with pytest.raises(SpdyError, match="GOAWAY"):
                await session.open_stream({})
            assert not session.closed  # stream 1 still runs
            await peer.send(data(1, b"last words", frames.FLAG_FIN))
            assert await read_all(kept) == b"last words"
            await kept.write(b"bye")
            await kept.close()
            assert await peer.data_until(1, 3) == b"bye"
            assert (await peer.next_frame()).flags == frames.FLAG_FIN
            assert await peer.reader.read() == b""  # no stream left: the session closed the connection
            assert session.closed
            assert session.error is None

    run(scenario())


def test_eof_between_frames_wakes_every_reader_and_writer():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(peer.syn_stream(1, {}), data(1, b"hello"))
            stream = await session.accept()
            accepting = asyncio.create_task(session.accept())
            assert await stream.read() == b"hello"
            reading = asyncio.create_task(stream.read())
            waiting = asyncio.create_task(stream.wait_closed())
            await asyncio.sleep(0.05)
            peer.writer.close()
            assert await reading == b""
            await waiting
            assert await accepting is None
            assert stream.closed
            assert not stream.remote_finished
            assert stream.reset_status is None
            with pytest.raises(SpdyError):
                await stream.write(b"anyone?")
            await session.wait_closed()

    run(scenario())


def test_eof_inside_a_frame_ends_the_session_with_an_error():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(peer.syn_stream(1, {}), data(1, b"0123456789")[:-4])  # 6 of 10 bytes
            stream = await session.accept()
            peer.writer.close()
            assert await stream.read() == b""  # the piece of the frame never arrived whole
            await stream.wait_closed()
            await session.wait_closed()
            assert isinstance(session.error, SpdyError)

    run(scenario())


# --- Flow control ------------------------------------------------------------------------------------


def test_writes_never_wait_for_window_updates_from_a_peer_that_sends_none():
    """spdystream neither sends WINDOW_UPDATE nor announces a window: many MiB must still go through."""

    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(peer.syn_stream(1, {"streamtype": "data"}))
            stream = await session.accept()
            payload = pattern(8 * MIB)
            writing = asyncio.create_task(stream.write(payload))
            await peer.expect_reply_headers(1)
            received = bytearray()
            while len(received) < len(payload):
                frame = await peer.frame()
                assert not frame.control
                assert frame.kind == 1
                assert len(frame.payload) <= frames.MAX_DATA_FRAME
                received += frame.payload
            await writing
            assert received == payload
            assert not session.peer_flow_control

    run(scenario())


def test_writes_honour_the_peer_windows_once_it_shows_it_counts_them():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            settings = struct.pack(">III", 1, frames.SETTINGS_INITIAL_WINDOW_SIZE, 1000)
            await peer.send(control(frames.SETTINGS, settings), peer.syn_stream(1, {}))
            stream = await session.accept()
            assert session.peer_flow_control
            writing = asyncio.create_task(stream.write(pattern(5000)))
            await peer.expect_reply_headers(1)
            assert await peer.data_until(1, 1000) == pattern(5000)[:1000]
            await peer.expect_silence()
            await peer.send(control(frames.WINDOW_UPDATE, struct.pack(">II", 1, 1500)))
            assert await peer.data_until(1, 1500) == pattern(5000)[1000:2500]
            await peer.expect_silence()
            assert not writing.done()
            await peer.send(control(frames.WINDOW_UPDATE, struct.pack(">II", 1, 10_000)))
            assert await peer.data_until(1, 2500) == pattern(5000)[2500:]
            await writing

            # SPDY/3.1's session window (64 KiB to start) binds every stream together.
            await peer.send(
                control(frames.SETTINGS, struct.pack(">III", 1, frames.SETTINGS_INITIAL_WINDOW_SIZE, 1 * MIB)),
                peer.syn_stream(3, {}),
            )
            stream = await session.accept()
            writing = asyncio.create_task(stream.write(pattern(100_000)))
            await peer.expect_reply_headers(3)
            assert len(await peer.data_until(3, frames.DEFAULT_INITIAL_WINDOW - 5000)) == 65536 - 5000
            await peer.expect_silence()
            await peer.send(control(frames.WINDOW_UPDATE, struct.pack(">II", 0, 100_000)))
            await peer.data_until(3, 100_000 - (65536 - 5000))
            await writing

    run(scenario())


def test_window_updates_are_forced_on_or_off_when_asked():
    async def scenario():
        async with session_and_raw_peer(peer_flow_control=False) as (session, peer):
            await peer.send(control(frames.WINDOW_UPDATE, struct.pack(">II", 0, 1)), peer.syn_stream(1, {}))
            stream = await session.accept()
            await stream.write(pattern(200_000))  # beyond every window: not waited for
            assert not session.peer_flow_control
        async with session_and_raw_peer(peer_flow_control=True) as (session, peer):
            await peer.send(peer.syn_stream(1, {}))
            stream = await session.accept()
            writing = asyncio.create_task(stream.write(pattern(100_000)))
            await peer.expect_reply_headers(1)
            await peer.data_until(1, frames.DEFAULT_INITIAL_WINDOW)
            await peer.expect_silence()
            writing.cancel()

    run(scenario())


def test_window_updates_return_data_to_the_session_on_arrival_and_to_streams_once_read():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(peer.syn_stream(1, {}))
            stream = await session.accept()
            await peer.expect_reply_headers(1)
            await peer.send(*(data(1, pattern(16 * 1024)) for _ in range(6)))

            async def window_updates_worth(total: int) -> dict[int, int]:
                deltas: dict[int, int] = {}
                while sum(deltas.values()) < total:
                    frame = await peer.frame()
                    assert frame.kind == frames.WINDOW_UPDATE
                    stream_id, delta = frame.words()
                    deltas[stream_id] = deltas.get(stream_id, 0) + delta
                return deltas

            # The session window comes back as data arrives, so a stream nobody reads cannot use it up.
            assert await window_updates_worth(96 * 1024) == {0: 96 * 1024}
            await peer.expect_silence(skip_window_updates=False)
            assert len(await stream.read()) == 16 * 1024
            await peer.expect_silence(skip_window_updates=False)  # less than half a window read: no update yet
            for _ in range(5):
                await stream.read()
            assert await window_updates_worth(96 * 1024) == {1: 96 * 1024}
            await peer.expect_silence(skip_window_updates=False)

    run(scenario())


def test_python_sessions_pace_each_other_through_windows_over_many_mib():
    async def scenario():
        async with sessions() as (client, server):
            outgoing = await client.open_stream({"streamtype": "data"})
            incoming = await server.accept()
            upload, download = pattern(12 * MIB, seed=1), pattern(12 * MIB, seed=2)

            async def send(stream, payload):
                await stream.write(payload)
                await stream.close()

            results = await asyncio.gather(
                send(outgoing, upload), send(incoming, download), read_all(incoming), read_all(outgoing)
            )
            assert hashlib.sha256(results[2]).digest() == hashlib.sha256(upload).digest()
            assert hashlib.sha256(results[3]).digest() == hashlib.sha256(download).digest()
            # Each saw the other's WINDOW_UPDATEs, so each honoured the other's windows.
            assert client.peer_flow_control
            assert server.peer_flow_control

    run(scenario())


def test_a_slow_reader_bounds_its_buffer_by_not_reading_the_connection():
    """Against a peer that ignores windows: the buffer stays bounded, at the cost of the other streams."""
    limit = 64 * 1024

    async def scenario():
        async with session_and_raw_peer(stream_buffer_limit=limit) as (session, peer):
            payload = pattern(6 * MIB)
            await peer.send(peer.syn_stream(1, {}), peer.syn_stream(3, {}))
            slow, other = await session.accept(), await session.accept()
            # Big frames, as spdystream sends one per Write call; the peer's writes block once TCP is full.
            flooding = asyncio.create_task(
                peer.send(*(data(1, payload[at : at + MIB]) for at in range(0, len(payload), MIB)), data(3, b"me too"))
            )
            await asyncio.sleep(QUIET)
            assert limit < slow.buffered <= limit + frames.READ_PIECE
            assert other.buffered == 0  # nothing for stream 3 is read while stream 1's buffer is full
            assert not flooding.done()
            received = bytearray()
            while len(received) < len(payload):
                received += await slow.read()
                assert slow.buffered <= limit + frames.READ_PIECE
            assert received == payload
            assert await other.read() == b"me too"
            await flooding

    run(scenario())


def test_resetting_a_slow_stream_releases_the_session():
    async def scenario():
        async with session_and_raw_peer(stream_buffer_limit=16 * 1024) as (session, peer):
            await peer.send(peer.syn_stream(1, {}), peer.syn_stream(3, {}))
            abandoned, other = await session.accept(), await session.accept()
            flooding = asyncio.create_task(peer.send(data(1, pattern(4 * MIB)), data(3, b"through")))
            await asyncio.sleep(QUIET)
            assert other.buffered == 0
            abandoned.reset()
            assert await other.read() == b"through"
            await flooding

    run(scenario())


# --- Malformed and unexpected frames -------------------------------------------------------------------


def _syn_stream_with_raw_block(stream_id: int, block: bytes) -> bytes:
    return control(frames.SYN_STREAM, struct.pack(">IIBB", stream_id, 0, 0, 0) + block)


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda peer: control(frames.PING, struct.pack(">I", 1), version=2), id="spdy-2-frame"),
        pytest.param(lambda peer: control(frames.PING, b"\x00\x00\x00\x01\x00"), id="ping-5-bytes"),
        pytest.param(lambda peer: control(frames.GOAWAY, b"\x00\x00\x00\x00"), id="goaway-4-bytes"),
        pytest.param(lambda peer: control(frames.RST_STREAM, b"\x00\x00\x00\x01"), id="rst-4-bytes"),
        pytest.param(lambda peer: control(frames.WINDOW_UPDATE, b"\x00" * 4), id="window-update-4-bytes"),
        pytest.param(lambda peer: control(frames.SETTINGS, struct.pack(">I", 2) + b"\x00" * 8), id="settings-count"),
        pytest.param(lambda peer: control(frames.SYN_STREAM, b"\x00\x00\x00\x01"), id="syn-stream-4-bytes"),
        pytest.param(lambda peer: peer.syn_stream(2, {}), id="syn-stream-server-id"),
        pytest.param(lambda peer: peer.syn_stream(0, {}), id="syn-stream-id-0"),
        pytest.param(lambda peer: peer.syn_stream(5, {}) + peer.syn_stream(3, {}), id="syn-stream-ids-decrease"),
        pytest.param(lambda peer: _syn_stream_with_raw_block(1, b"not zlib at all"), id="header-block-not-zlib"),
        pytest.param(lambda peer: data(0, b"x"), id="data-on-stream-0"),
        pytest.param(
            lambda peer: struct.pack(">HHI", 0x8003, frames.SYN_STREAM, 2 * MIB) + b"\x00" * 64, id="control-too-large"
        ),
        pytest.param(
            lambda peer: control(frames.SETTINGS, struct.pack(">III", 1, frames.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 31)),
            id="initial-window-too-large",
        ),
        pytest.param(
            lambda peer: control(frames.WINDOW_UPDATE, struct.pack(">II", 0, 0x7FFFFFFF)), id="session-window-overflow"
        ),
    ],
)
def test_session_errors_are_answered_with_goaway(build):
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(build(peer))
            await peer.expect_goaway_and_eof(frames.GOAWAY_PROTOCOL_ERROR)
            assert session.closed
            assert isinstance(session.error, SpdyError)
            assert await session.accept() is None  # not even a stream opened before the error

    run(scenario())


def test_stream_errors_are_answered_with_rst_stream_and_the_session_goes_on():
    async def scenario():
        async with session_and_raw_peer(max_concurrent_streams=3) as (session, peer):
            await peer.send(data(5, b"never opened"))
            await peer.expect_rst(5, frames.INVALID_STREAM)

            upper_case = b"\x00\x00\x00\x01\x00\x00\x00\x04Port\x00\x00\x00\x0280"
            await peer.send(peer.syn_stream(7, {}, block=upper_case))
            await peer.expect_rst(7, frames.PROTOCOL_ERROR)

            await peer.send(peer.syn_stream(9, {}, frames.FLAG_FIN), data(9, b"after FIN"))
            await peer.expect_reply_headers(9)
            await peer.expect_rst(9, frames.STREAM_ALREADY_CLOSED)

            await peer.send(peer.syn_stream(11, {}), peer.syn_stream(11, {}))
            await peer.expect_reply_headers(11)
            await peer.expect_rst(11, frames.PROTOCOL_ERROR)  # a second SYN_STREAM for a live stream

            await peer.send(peer.syn_reply(2))
            await peer.expect_rst(2, frames.INVALID_STREAM)  # a reply for a stream nobody opened

            await peer.send(peer.syn_stream(13, {}))
            live = await session.accept()
            assert live.id == 13  # 7, 9 and 11 ended before the application could accept them
            await peer.expect_reply_headers(13)
            await peer.send(control(frames.WINDOW_UPDATE, struct.pack(">II", 13, 0x7FFFFFFF)))
            await peer.expect_rst(13, frames.FLOW_CONTROL_ERROR)
            assert live.reset_status == frames.FLOW_CONTROL_ERROR

            await peer.send(*(peer.syn_stream(stream_id, {}) for stream_id in (15, 17, 19, 21)))
            for stream_id in (15, 17, 19):
                await peer.expect_reply_headers(stream_id)
            await peer.expect_rst(21, frames.REFUSED_STREAM)  # a fourth stream at once, beyond the limit
            await peer.expect_alive()
            assert not session.closed

    run(scenario())


def test_unknown_and_late_frames_are_ignored():
    async def scenario():
        async with session_and_raw_peer() as (session, peer):
            await peer.send(
                control(0x00FF, b"whatever the future holds" * 1000),
                control(10, b"\x00" * 12),  # CREDENTIAL, which spdystream does not know either
                control(frames.SETTINGS, struct.pack(">III", 1, 4, 100)),  # MAX_CONCURRENT_STREAMS: no use to us
            )
            await peer.expect_alive()
            await peer.send(peer.syn_stream(1, {}))
            stream = await session.accept()
            await peer.expect_reply_headers(1)
            stream.reset()
            await peer.expect_rst(1, frames.CANCEL)
            await peer.send(  # what a peer may have sent before it saw the reset
                data(1, b"in flight"),
                control(frames.HEADERS, struct.pack(">I", 1) + peer.compress(encode_name_value_block({"a": "b"}))),
                control(frames.RST_STREAM, struct.pack(">II", 1, frames.CANCEL)),
                control(frames.WINDOW_UPDATE, struct.pack(">II", 1, 10)),
            )
            await peer.expect_alive()
            assert not session.closed

    run(scenario())
