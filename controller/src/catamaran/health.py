"""Liveness and readiness, served beside the Prometheus metrics from a thread of their own.

The HTTP server runs in a thread, so it answers even when the asyncio event loop is stuck; that is
the point. A heartbeat coroutine stamps the time on every turn of the loop, and:

- `/livez` (alias `/healthz`) fails once the loop has not turned for `stall_seconds`;
- `/readyz` fails, naming every reason, while an informer has not synced or keeps failing, or a
  readiness check registered by the process (the virtual kubelet's provider link) reports a problem;
- `/metrics` serves Prometheus.

Test hook: with the environment variable CATAMARAN_TEST_HOOKS=1 (never set it in production),
`POST /debug/block-event-loop?seconds=N` makes the event loop sleep N seconds in a blocking call,
which is how the tests prove a wedged process is restarted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import metrics
from .kube import informer

log = logging.getLogger(__name__)

TEST_HOOKS_ENV = "CATAMARAN_TEST_HOOKS"
# Ten beats a second cost an idle process most of its CPU; the stall limit is 30 s.
HEARTBEAT_SECONDS = 1.0
STALL_SECONDS = 30.0

# A readiness check returns None when fine, else the reason it is not.
ReadinessCheck = Callable[[], str | None]


class Health:
    def __init__(self, stall_seconds: float = STALL_SECONDS, test_hooks: bool = False):
        self.stall_seconds = stall_seconds
        self.test_hooks = test_hooks
        self.last_beat = time.monotonic()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._checks: dict[str, ReadinessCheck] = {}
        self.standby = False  # a replica waiting to lead (kube/leaderelection.py)
        self._lock = threading.Lock()

    async def heartbeat(self) -> None:
        self.loop = asyncio.get_running_loop()
        while True:
            self.last_beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)
            # Every beat is also a sample of how long callbacks wait behind each other (CPU-bound handlers).
            metrics.EVENT_LOOP_LAG_SECONDS.observe(max(0.0, time.monotonic() - self.last_beat - HEARTBEAT_SECONDS))

    def add_check(self, name: str, check: ReadinessCheck) -> None:
        with self._lock:
            self._checks[name] = check

    def remove_check(self, name: str) -> None:
        with self._lock:
            self._checks.pop(name, None)

    def liveness(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self.last_beat
        if stalled > self.stall_seconds:
            return False, f"event loop has not turned for {stalled:.0f}s (limit {self.stall_seconds:.0f}s)"
        return True, "event loop turning"

    def readiness(self) -> tuple[bool, list[str]]:
        # Read from another thread without locks: each value is a plain attribute replaced atomically, and a
        # stale read only delays the answer by one probe.
        if self.standby:
            return True, []  # a hot spare waiting for its Lease: nothing of it runs yet that could be unready
        reasons = []
        for watched in informer.running_informers():
            if watched.failing:
                reasons.append(informer.describe_failure(watched))
            elif not watched.synced.is_set():
                reasons.append(f"informer {watched.name}: not synced yet")
        with self._lock:
            checks = list(self._checks.items())
        for name, check in checks:
            try:
                problem = check()
            except Exception as error:  # a broken check must not take the endpoint down
                problem = f"check failed: {error}"
            if problem:
                reasons.append(f"{name}: {problem}")
        return not reasons, reasons

    def block_event_loop(self, seconds: float) -> bool:
        """Test hook: the event loop runs a blocking sleep."""
        if self.loop is None:
            return False
        self.loop.call_soon_threadsafe(time.sleep, seconds)
        return True


HEALTH = Health()


def listening(host: str, port: int) -> ReadinessCheck:
    """A readiness check that something accepts TCP connections on host:port (a server of this process)."""

    def check() -> str | None:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError as error:
            return f"not listening on {host}:{port} yet ({error.strerror or error})"
        return None

    return check


def _handler(health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = urlsplit(self.path).path
            if path in ("/livez", "/healthz"):
                ok, message = health.liveness()
                self._reply(200 if ok else 503, message + "\n")
            elif path == "/readyz":
                ok, reasons = health.readiness()
                self._reply(200 if ok else 503, "ok\n" if ok else "".join(f"not ready: {r}\n" for r in reasons))
            elif path == "/metrics":
                self._reply(200, generate_latest().decode(), CONTENT_TYPE_LATEST)
            else:
                self._reply(404, "not found\n")

        def do_POST(self):
            url = urlsplit(self.path)
            if not health.test_hooks or url.path != "/debug/block-event-loop":
                self._reply(404, "not found\n")
                return
            try:
                seconds = float(parse_qs(url.query).get("seconds", ["60"])[0])
            except ValueError:
                self._reply(400, "seconds: not a number\n")
                return
            log.warning("test hook: blocking the event loop", extra={"seconds": seconds})
            ok = health.block_event_loop(seconds)
            self._reply(200 if ok else 409, "blocking\n" if ok else "no event loop yet\n")

        def _reply(self, code: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args):  # probes every few seconds would flood the log
            pass

    return Handler


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(
    port: int, address: str = "127.0.0.1", url_file: Path | None = None, health: Health = HEALTH
) -> ThreadingHTTPServer | None:
    """Serve /metrics, /livez, /healthz and /readyz from a daemon thread.

    Port 0 turns the server off, unless `url_file` is given: then any free port is taken, and the base
    URL (http://host:port) is written to that file once the server listens, for a supervisor to probe.
    """
    if not port and url_file is None:
        return None
    health.test_hooks = os.environ.get(TEST_HOOKS_ENV) == "1"
    server_class = _IPv6Server if ":" in address else ThreadingHTTPServer
    server = server_class((address, port), _handler(health))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    if url_file is not None:
        host = "127.0.0.1" if address in ("", "0.0.0.0") else address
        host = f"[{host}]" if ":" in host else host
        tmp = url_file.with_name(url_file.name + ".tmp")
        tmp.write_text(f"http://{host}:{server.server_address[1]}\n")
        tmp.replace(url_file)
    return server
