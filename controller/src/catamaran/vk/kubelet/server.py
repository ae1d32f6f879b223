"""The kubelet API server of one virtual node: TLS, authentication, authorization, routing.

Paths and their meaning are the kubelet's, so the API server, metrics-server and `kubectl` treat
the virtual node like any other. Only pods bound to this node are served; their twin on the
provider carries the same name in the twin namespace.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from ... import metrics
from ...logs import fields
from ..context import PeeringContext
from ..refusals import RefusalEvents
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
        provider_allocatable: Callable[[], Mapping] = dict,
        node_name: str | None = None,
    ):
        self.peering = peering
        self.node_name = node_name or peering.node_name  # the virtual node this server answers for
        self.node_published = node_published  # the certificate names addresses the node must publish first
        self.sock = sock
        self.certificate = certificate
        self.channel = channel
        self.local_pod = local_pod
        self.pods_on_node = pods_on_node
        self.twin_of = twin_of
        self.gatekeeper = Gatekeeper(peering.local, self.node_name)
        self.stats = NodeStats(
            channel,
            pods_on_node,
            twin_of,
            self.node_name,
            allocatable=provider_allocatable,
            refusals=RefusalEvents(peering.events, peering.provider_id),
        )
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
        log.info("kubelet API serving", extra=fields(node=self.node_name, port=self.port))
        try:
            await self.certificate.keep_renewed()
        finally:
            # Not Server.wait_closed(): it waits for every kept-alive connection, which API servers hold open.
            server.close()
            connections = list(self.connections)
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

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
            route = ROUTES.get(endpoint)
            await self.gatekeeper.check(request, route.verb if route is not None else UNROUTED_VERB)
            rest = parts[1:]
            if route is None or not route.matches(rest):
                raise HttpError(404, f"{request.path}: not served by virtual node {self.node_name}")
            if request.method not in route.methods:
                raise HttpError(405, f"{request.method} is not allowed on {request.path} (allowed: {route.allowed})")
            await getattr(self, route.serve)(request, endpoint, rest)
        except HttpError as error:
            code = error.status
            raise
        except ProviderError as error:
            code = error.status
            if not request.responded:
                await request.respond(error.status, error.body, error.content_type)
        finally:
            metrics.KUBELET_REQUESTS.labels(endpoint if endpoint in ROUTES else "other", str(code)).inc()

    async def _healthz(self, request: Request, endpoint: str, rest: list[str]) -> None:
        await request.respond(200, b"ok")

    async def _pods(self, request: Request, endpoint: str, rest: list[str]) -> None:
        await request.respond_json(200, {"kind": "PodList", "apiVersion": "v1", "items": self.pods_on_node()})

    async def _container_logs(self, request: Request, endpoint: str, rest: list[str]) -> None:
        twin = self._twin(rest[0], rest[1])
        await serve_logs(request, self.channel, twin, rest[1], rest[2])

    async def _command(self, request: Request, endpoint: str, rest: list[str]) -> None:
        # /exec/{namespace}/{pod}/{container} or /exec/{namespace}/{pod}/{uid}/{container}
        twin = self._twin(rest[0], rest[1], uid=rest[2] if len(rest) == 4 else None)
        await serve_command(request, self.channel, endpoint, twin, rest[1], rest[-1])

    async def _port_forward(self, request: Request, endpoint: str, rest: list[str]) -> None:
        twin = self._twin(rest[0], rest[1], uid=rest[2] if len(rest) == 3 else None)
        await serve_port_forward(request, self.channel, twin, rest[1])

    async def _summary(self, request: Request, endpoint: str, rest: list[str]) -> None:
        snapshot = await self.stats.snapshot()
        await request.respond_json(200, summary(snapshot, self.node_name, self.stats.started))

    async def _resource_metrics(self, request: Request, endpoint: str, rest: list[str]) -> None:
        text = resource_metrics(await self.stats.snapshot())
        await request.respond(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _twin(self, namespace: str, name: str, uid: str | None = None) -> str:
        pod = self.local_pod(namespace, name)
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            raise HttpError(404, f"pod {namespace}/{name} is not on node {self.node_name}")
        twin = self.twin_of(namespace)
        if not twin:
            raise HttpError(503, f"namespace {namespace} has no twin on the provider yet")
        return twin


@dataclass(frozen=True)
class Route:
    """One endpoint of the kubelet API: the path after it, the methods the kubelet takes there, its handler, and the
    verb a caller needs on its node subresource, whatever the method."""

    serve: str  # the KubeletServer method answering it
    methods: frozenset[str]
    verb: str  # `create` where a command runs or a port opens, `get` where something is read
    lengths: frozenset[int] = frozenset({0})  # how many path segments follow the endpoint
    rest: tuple[str, ...] | None = None  # or exactly these

    def matches(self, rest: list[str]) -> bool:
        return tuple(rest) == self.rest if self.rest is not None else len(rest) in self.lengths

    @property
    def allowed(self) -> str:
        return ", ".join(sorted(self.methods))


READ = frozenset({"GET"})
# The API server upgrades streams with POST (SPDY) or GET (WebSocket), as it does against a kubelet.
STREAM = frozenset({"GET", "POST"})
# Streams run commands or open ports: `create`, even when a WebSocket upgrade comes as a GET (the kubelet takes the
# verb from the method, so `get` on nodes/proxy would run commands). Reads need `get`, even a stats/summary POST.
GET, CREATE = "get", "create"
# Endpoint (the path's first segment) -> its route: what is served, with which verb, answered 405 or counted in
# metrics.
ROUTES = {
    "healthz": Route("_healthz", READ, GET),
    "pods": Route("_pods", READ, GET),
    "containerLogs": Route("_container_logs", READ, GET, frozenset({3})),
    "exec": Route("_command", STREAM, CREATE, frozenset({3, 4})),
    "attach": Route("_command", STREAM, CREATE, frozenset({3, 4})),
    "portForward": Route("_port_forward", STREAM, CREATE, frozenset({2, 3})),
    "stats": Route("_summary", frozenset({"GET", "POST"}), GET, rest=("summary",)),
    "metrics": Route("_resource_metrics", READ, GET, rest=("resource",)),
}
# Paths of no route are answered 404, after authorization for this verb: the kubelet's other endpoints mostly act
# (`run` runs a command, `checkpoint` and `cri` too), and a caller that may only read learns nothing of them.
UNROUTED_VERB = CREATE
