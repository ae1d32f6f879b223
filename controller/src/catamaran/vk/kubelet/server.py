"""The kubelet API server of one virtual node: TLS, authentication, authorization, routing.

Paths and their meaning are the kubelet's, so the API server, metrics-server and `kubectl` treat
the virtual node like any other. Only pods bound to this node are served; their twin on the
provider carries the same name in the twin namespace.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from ... import metrics
from ...logs import fields
from ..context import PeeringContext
from .auth import Gatekeeper
from .certificate import ServingCertificate
from .channel import ProviderChannel, ProviderError
from .container_logs import serve_logs
from .http import HttpError, Request, serve_connection
from .stats import NodeStats, resource_metrics, summary
from .streams import serve_command, serve_port_forward

log = logging.getLogger(__name__)


def listen(address: str, port: int) -> socket.socket:
    """Bind early, so the node can publish the port (0 picks a free one) before the certificate exists."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off only for sockets that say so, and with Nagle a log's
    # first chunk waits for the peer's delayed ACK of the response head (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class KubeletServer:
    def __init__(
        self,
        peering: PeeringContext,
        sock: socket.socket,
        certificate: ServingCertificate,
        channel: ProviderChannel,
        *,
        local_pod: Callable[[str, str], dict | None],
        pods_on_node: Callable[[], list[dict]],
        twin_of: Callable[[str], str | None],
        node_published: Callable[[], Awaitable[None]],
    ):
        self.peering = peering
        self.node_published = node_published  # the certificate names addresses the node must publish first
        self.sock = sock
        self.certificate = certificate
        self.channel = channel
        self.local_pod = local_pod
        self.pods_on_node = pods_on_node
        self.twin_of = twin_of
        self.gatekeeper = Gatekeeper(peering.local, peering.node_name)
        self.stats = NodeStats(channel, pods_on_node, twin_of, peering.node_name)
        self.connections: set[asyncio.Task] = set()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def tasks(self):
        return [self._serve()]

    async def _serve(self) -> None:
        await self.node_published()
        await self.certificate.obtain()
        server = await asyncio.start_server(self._connection, sock=self.sock, ssl=self.certificate.context)
        log.info("kubelet API serving", extra=fields(node=self.peering.node_name, port=self.port))
        try:
            await self.certificate.keep_renewed()
        finally:
            # Not Server.wait_closed(): it waits for every kept-alive connection, which API servers hold open.
            server.close()
            connections = list(self.connections)
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)
            await self.channel.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.connections.add(task)
        try:
            await serve_connection(reader, writer, self.handle)
        except asyncio.CancelledError:
            writer.close()  # the server is stopping; a cancelled task here would only be logged by asyncio
        finally:
            self.connections.discard(task)

    async def handle(self, request: Request) -> None:
        parts = [p for p in request.path.split("/") if p]
        endpoint = parts[0] if parts else ""
        code = 200
        try:
            await self.gatekeeper.check(request)
            await self._route(request, endpoint, parts[1:])
        except HttpError as error:
            code = error.status
            raise
        except ProviderError as error:
            code = error.status
            if not request.responded:
                await request.respond(error.status, error.body, error.content_type)
        finally:
            metrics.KUBELET_REQUESTS.labels(endpoint if endpoint in ENDPOINTS else "other", str(code)).inc()

    async def _route(self, request: Request, endpoint: str, rest: list[str]) -> None:
        if endpoint == "healthz" and not rest:
            await request.respond(200, b"ok")
        elif endpoint == "pods" and not rest:
            await request.respond_json(200, {"kind": "PodList", "apiVersion": "v1", "items": self.pods_on_node()})
        elif endpoint == "containerLogs" and len(rest) == 3:
            twin = self._twin(rest[0], rest[1])
            await serve_logs(request, self.channel, twin, rest[1], rest[2])
        elif endpoint in ("exec", "attach") and len(rest) in (3, 4):
            # /exec/{namespace}/{pod}/{container} or /exec/{namespace}/{pod}/{uid}/{container}
            twin = self._twin(rest[0], rest[1], uid=rest[2] if len(rest) == 4 else None)
            await serve_command(request, self.channel, endpoint, twin, rest[1], rest[-1])
        elif endpoint == "portForward" and len(rest) in (2, 3):
            twin = self._twin(rest[0], rest[1], uid=rest[2] if len(rest) == 3 else None)
            await serve_port_forward(request, self.channel, twin, rest[1])
        elif endpoint == "stats" and rest == ["summary"]:
            await request.respond_json(
                200, summary(await self.stats.snapshot(), self.peering.node_name, self.stats.started)
            )
        elif endpoint == "metrics" and rest == ["resource"]:
            text = resource_metrics(await self.stats.snapshot())
            await request.respond(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            raise HttpError(404, f"{request.path}: not served by virtual node {self.peering.node_name}")

    def _twin(self, namespace: str, name: str, uid: str | None = None) -> str:
        pod = self.local_pod(namespace, name)
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            raise HttpError(404, f"pod {namespace}/{name} is not on node {self.peering.node_name}")
        twin = self.twin_of(namespace)
        if not twin:
            raise HttpError(503, f"namespace {namespace} has no twin on the provider yet")
        return twin


ENDPOINTS = {"healthz", "pods", "containerLogs", "exec", "attach", "portForward", "stats", "metrics"}
