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

from .frames import SpdyError
from .session import SpdySession
from .stream import SpdyStream

__all__ = ["SpdyError", "SpdySession", "SpdyStream"]
