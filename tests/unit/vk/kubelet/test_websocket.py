"""WebSocket framing (vk/kubelet/websocket.py)."""

from __future__ import annotations


def test_websocket_frames_round_trip_masked_and_fragmented():
    import asyncio
    import os
    import struct

    from catamaran.vk.kubelet import websocket

    def masked(opcode: int, payload: bytes, fin: bool = True) -> bytes:
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        length = len(payload)
        head = struct.pack("!B", (0x80 if fin else 0) | opcode)
        if length < 126:
            head += struct.pack("!B", 0x80 | length)
        else:
            head += struct.pack("!BH", 0x80 | 126, length)
        return head + mask + body

    pings = []

    async def ping(payload: bytes) -> None:
        pings.append(payload)

    async def read(data: bytes) -> list:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [await websocket.read_message(reader, ping) for _ in range(3)]

    big = bytes(range(256)) * 2
    # A ping between a message's fragments is answered and the message still comes whole.
    data = masked(websocket.BINARY, b"\x00ls", fin=False) + masked(websocket.PING, b"hi") + masked(0, b" -l")
    data += masked(websocket.TEXT, big) + masked(websocket.CLOSE, b"\x03\xe8")
    expected = [(websocket.BINARY, b"\x00ls -l"), (websocket.TEXT, big), (websocket.CLOSE, b"\x03\xe8")]
    assert asyncio.run(read(data)) == expected
    assert pings == [b"hi"]
    assert websocket.frame(websocket.BINARY, b"\x01out") == b"\x82\x04\x01out"
    assert websocket.frame(websocket.BINARY, big)[:4] == b"\x82\x7e\x02\x00"
    # RFC 6455's own example of the accept key.
    assert websocket.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
