"""The NetworkPolicy canary's process: `python -m catamaran.policy_canary PORT...` accepts connections on each port,
says which port it is, and closes them (provider/enforcement.py says why). The standard library only: it runs in the
controller's image with no credential and a read-only root file system."""

from __future__ import annotations

import contextlib
import selectors
import signal
import socket
import sys


def _listener(port: int) -> socket.socket:
    """Every address of the pod, IPv6 and IPv4 alike where the kernel has both."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=16)
        except OSError:  # IPv6 turned off in the pod's network
            pass
    return socket.create_server(("", port), backlog=16)


def serve(ports: list[int]) -> None:
    selector = selectors.DefaultSelector()
    for port in ports:
        listener = _listener(port)
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ, port)
    while True:
        for key, _ in selector.select():
            try:
                connection, _ = key.fileobj.accept()  # type: ignore[union-attr]
            except OSError:
                continue
            with connection, contextlib.suppress(OSError):
                connection.sendall(f"catamaran networkpolicy canary, port {key.data}\n".encode())


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve([int(port) for port in argv] or [8080])


if __name__ == "__main__":
    main(sys.argv[1:])
