"""A small HTTPS server in a thread, standing in for a server a test plays (a kubelet, an aggregated API, an API
server a module talks to)."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

# (path, the client certificate's CN or "") -> (body, content type), or None for 404.
Answer = Callable[[str, str], "tuple[bytes, str] | None"]


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers in one call."""

    def reply(self, body: bytes, content_type: str = "application/json", status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def client_cn(self) -> str:
        """The common name of the client's certificate, "" without one."""
        peer = self.connection.getpeercert() or {}
        return next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), "")

    def log_message(self, *args):
        pass


def serve_https(
    handler: type[http.server.BaseHTTPRequestHandler],
    cert: Path,
    key: Path,
    address: str = "127.0.0.1",
    client_ca: Path | None = None,
) -> http.server.ThreadingHTTPServer:
    """`handler` on a TLS socket, in a thread; with `client_ca`, a client certificate is asked for (not required) and
    checked."""
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class FakeHTTPS:
    def __init__(
        self, answer: Answer, cert: Path, key: Path, address: str = "127.0.0.1", client_ca: Path | None = None
    ):
        """Serves GETs with `answer`; with `client_ca`, a client certificate is asked for (not required) and checked."""

        class Handler(QuietHandler):
            def do_GET(self):
                answered = answer(self.path, self.client_cn())
                if answered is None:
                    self.send_error(404)
                    return
                self.reply(*answered)

        self.server = serve_https(Handler, cert, key, address, client_ca)
        self.port = self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
