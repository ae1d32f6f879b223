"""A small HTTPS server in a thread, standing in for a server a test plays (a kubelet, an aggregated API)."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

# (path, the client certificate's CN or "") -> (body, content type), or None for 404.
Answer = Callable[[str, str], "tuple[bytes, str] | None"]


class FakeHTTPS:
    def __init__(
        self, answer: Answer, cert: Path, key: Path, address: str = "127.0.0.1", client_ca: Path | None = None
    ):
        """Serves GETs with `answer`; with `client_ca`, a client certificate is asked for (not required) and checked."""

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                peer = self.connection.getpeercert() or {}
                cn = next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), "")
                answered = answer(self.path, cn)
                if answered is None:
                    self.send_error(404)
                    return
                body, content_type = answered
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL
        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
