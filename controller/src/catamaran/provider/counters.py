"""The kubelets' own CPU and memory counters of a tenant's pods, served to its virtual kubelet (an aggregated API).

A provider's kubelets count each container's CPU seconds since it started; `metrics.k8s.io` gives only rates,
which a virtual kubelet would have to integrate (a fake zero for an idle container, and from zero again after
it restarts, which metrics-server refuses). So this manager reads the counters from the kubelets of the nodes
that run a twin's pods (`/metrics/resource` through the API server's node proxy; one read per node at most every
CACHE_SECONDS, whoever asks) and serves those of one twin at
`/apis/metrics.catamaran.io/v1alpha1/namespaces/<twin>/podcounters`, registered as an APIService.

The kube-apiserver authenticates the caller and authorizes it (the tenant may list podcounters in its twins
only). This server believes what the API server says of the caller only over mutual TLS with the API server's
front-proxy certificate (the requestheader CA and allowed names), and serves a twin's counters to its own
tenant only, whatever RBAC says.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiregistration_v1 import APIService
from lightkube.resources.core_v1 import ConfigMap, Namespace, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from prometheus_client.parser import text_string_to_metric_families

from ..certs import CertificateStore
from ..constants import (
    COUNTERS_API_SERVICE,
    COUNTERS_GROUP,
    COUNTERS_RESOURCE,
    COUNTERS_SLICE_MANAGER,
    ENDPOINT_SLICE_MANAGED_BY_LABEL,
    ENDPOINT_SLICE_SERVICE_LABEL,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_TENANT,
    MANAGED_BY_CATAMARAN,
    MANAGER_COMPONENT,
    TENANT_NAMESPACE_PREFIX,
    VERSION,
)
from ..kube.backoff import Backoff
from ..kube.clients import get_raw
from ..kube.ops import tolerating
from ..kube.reads import SharedReads
from ..logs import fields

log = logging.getLogger(__name__)

CACHE_SECONDS = 5.0
REQUEST_TIMEOUT_S = 10.0
FAN_OUT = 8
ROTATION_CHECK_S = 3600
FIELD_MANAGER = MANAGER_COMPONENT
GROUP_VERSION = f"{COUNTERS_GROUP}/{VERSION}"


@dataclass(frozen=True)
class CounterOptions:
    """Where the counters API listens, and the Service the APIService names (local mode: an ExternalName the
    manager makes, pointing at this host; deployment mode: the manager's own Service)."""

    port: int
    cert_dir: Path
    hosts: list[str]
    service_namespace: str
    service_name: str
    service_port: int
    external_name: str | None = None


# -- the kubelets' counters ------------------------------------------------------------------------


def container_counters(text: str) -> dict[tuple[str, str], list[dict]]:
    """(namespace, pod) -> its containers' counters, from a kubelet's /metrics/resource."""
    found: dict[tuple[str, str, str], dict] = {}
    wanted = {
        "container_cpu_usage_seconds": ("cpuSeconds", "sampledAt"),
        "container_memory_working_set_bytes": ("memoryWorkingSetBytes", None),
        "container_start_time_seconds": ("startTime", None),
    }
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        key, stamp = wanted[family.name]
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = sample.labels
            entry = found.setdefault((labels["namespace"], labels["pod"], labels["container"]), {})
            entry[key] = sample.value
            if stamp and sample.timestamp is not None:  # unix seconds (the parser reads the text's milliseconds)
                entry[stamp] = float(sample.timestamp)
    pods: dict[tuple[str, str], list[dict]] = {}
    for (namespace, pod, container), entry in sorted(found.items()):
        if "cpuSeconds" in entry:
            pods.setdefault((namespace, pod), []).append({"name": container, **entry})
    return pods


def tenant_of(user: str) -> str | None:
    """The consumer cluster id of a tenant credential's user name (None: not a tenant)."""
    prefix = f"system:serviceaccount:{TENANT_NAMESPACE_PREFIX}"
    if not user.startswith(prefix):
        return None
    namespace, _, account = user[len(prefix) :].partition(":")
    return namespace if namespace and account else None


def counters_list(namespace: str, pods: dict[str, list[dict]]) -> dict:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "PodCountersList",
        "metadata": {},
        "items": [
            {"metadata": {"name": name, "namespace": namespace}, "containers": containers}
            for name, containers in sorted(pods.items())
        ],
    }


class KubeletCounters:
    """Each node's counters, read at most once every `cache_seconds` whoever asks, `fan_out` nodes at once."""

    def __init__(self, client: AsyncClient, cache_seconds: float = CACHE_SECONDS, fan_out: int = FAN_OUT):
        self.client = client
        self.limit = asyncio.Semaphore(fan_out)
        self.reads: SharedReads[str, dict[tuple[str, str], list[dict]]] = SharedReads(self._read, cache_seconds)

    async def node(self, name: str) -> dict[tuple[str, str], list[dict]]:
        return await self.reads.get(name)

    async def _read(self, name: str) -> dict[tuple[str, str], list[dict]]:
        async with self.limit:
            code, text = await get_raw(self.client, f"/api/v1/nodes/{name}/proxy/metrics/resource", REQUEST_TIMEOUT_S)
        if code != 200:
            raise RuntimeError(f"node {name}: /metrics/resource answered {code}: {text[:200]}")
        return container_counters(text)


# -- the API --------------------------------------------------------------------------------------


def api_resource_list() -> dict:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": COUNTERS_RESOURCE,
                "singularName": "",
                "namespaced": True,
                "kind": "PodCounters",
                "verbs": ["list"],
            }
        ],
    }


def api_group() -> dict:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": COUNTERS_GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }
    return web.json_response(body, status=code)


def api_service(options: CounterOptions, ca_bundle: bytes) -> dict:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": COUNTERS_API_SERVICE, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
        "spec": {
            "group": COUNTERS_GROUP,
            "version": VERSION,
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "service": {
                "namespace": options.service_namespace,
                "name": options.service_name,
                "port": options.service_port,
            },
        },
    }


EXTERNAL_KINDS = {"Service": Service, "EndpointSlice": EndpointSlice}


def external_service(options: CounterOptions) -> list[dict]:
    """Local mode: the manager runs outside the cluster, and the API server reaches it at `external_name`.

    An address that an endpoint may hold becomes the endpoint of a Service without selector: an API server with
    `--enable-aggregator-routing` dials it directly, one without dials the ClusterIP (kube-proxy on its host). A host
    name, or a loopback, unspecified, link-local or multicast address (which no endpoint may hold), becomes an
    ExternalName Service, which only an API server without aggregator routing resolves.
    """
    assert options.external_name
    metadata = {
        "name": options.service_name,
        "namespace": options.service_namespace,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
    }
    try:
        address = ipaddress.ip_address(options.external_name)
    except ValueError:
        address = None
    if (
        address is None
        or address.is_loopback
        or address.is_unspecified
        or address.is_link_local
        or address.is_multicast
    ):
        spec = {
            "type": "ExternalName",
            "externalName": options.external_name,
            "ports": [{"port": options.service_port}],
        }
        return [{"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}]
    port = {"name": "https", "port": options.service_port, "targetPort": options.port, "protocol": "TCP"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"type": "ClusterIP", "ports": [port]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": options.service_name,
            "namespace": options.service_namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN,
                ENDPOINT_SLICE_SERVICE_LABEL: options.service_name,
                ENDPOINT_SLICE_MANAGED_BY_LABEL: COUNTERS_SLICE_MANAGER,
            },
        },
        "addressType": f"IPv{address.version}",
        "endpoints": [{"addresses": [str(address)], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": options.port, "protocol": "TCP"}],
    }
    return [service, endpoints]


class CountersServer:
    def __init__(
        self,
        client: AsyncClient,
        options: CounterOptions,
        pods_in: Callable[[str], dict[str, str]],
        namespace_labels: Callable[[str], dict | None],
    ):
        """`pods_in(namespace)` gives pod name -> node of a twin's running pods; `namespace_labels` a twin's labels."""
        self.client = client
        self.options = options
        self.pods_in = pods_in
        self.namespace_labels = namespace_labels
        self.kubelets = KubeletCounters(client)
        self.store = CertificateStore(options.cert_dir, options.hosts)
        self.front_proxy_names: set[str] = set()
        self._site: web.TCPSite | None = None

    async def list_counters(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        user = request.headers.get("X-Remote-User", "")
        tenant = tenant_of(user)
        labels = self.namespace_labels(namespace)
        if (
            tenant is None
            or labels is None
            or labels.get(LABEL_TENANT)
            or labels.get(LABEL_ORIGIN_CLUSTER_ID) != tenant
        ):
            return status(403, "Forbidden", f"{user or 'anonymous'} may not list the pod counters of {namespace}")
        placed = self.pods_in(namespace)
        nodes = sorted(set(placed.values()))
        read = await asyncio.gather(*(self.kubelets.node(node) for node in nodes), return_exceptions=True)
        pods: dict[str, list[dict]] = {}
        for node, result in zip(nodes, read, strict=True):
            if isinstance(result, BaseException):
                log.warning("kubelet counters unavailable", extra=fields(node=node, error=str(result)))
                continue
            for (pod_namespace, pod), containers in result.items():
                if pod_namespace == namespace and placed.get(pod) == node:
                    pods[pod] = containers
        return web.json_response(counters_list(namespace, pods))

    @web.middleware
    async def front_proxy_only(self, request: web.Request, handler):
        """Only the API server's aggregator, with its front-proxy client certificate, may call."""
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        names = {value for entry in (peer or {}).get("subject", ()) for key, value in entry if key == "commonName"}
        if not peer or (self.front_proxy_names and not names & self.front_proxy_names):
            return status(401, "Unauthorized", "only the API server's front proxy may call this API")
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.front_proxy_only])
        base = f"/apis/{COUNTERS_GROUP}"
        app.router.add_get(base, lambda request: web.json_response(api_group()))
        app.router.add_get(f"{base}/{VERSION}", lambda request: web.json_response(api_resource_list()))
        app.router.add_get(f"{base}/{VERSION}/namespaces/{{namespace}}/{COUNTERS_RESOURCE}", self.list_counters)
        return app

    async def _ssl_context(self) -> ssl.SSLContext:
        """The serving certificate, and the front proxy's CA and names from the API server's own ConfigMap."""
        found = await self.client.get(ConfigMap, "extension-apiserver-authentication", namespace="kube-system")
        data = found.data or {}
        ca = data.get("requestheader-client-ca-file")
        if not ca:
            raise RuntimeError("the API server has no front-proxy CA (requestheader-client-ca-file): no aggregation")
        self.front_proxy_names = set(json.loads(data.get("requestheader-allowed-names") or "[]"))
        context = self.store.ssl_context()
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=ca)
        return context

    async def run(self) -> None:
        self.store.ensure()
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        try:
            try:
                await self._serve(runner)
            except (ApiError, RuntimeError) as error:  # no aggregation layer, or no right to read its CA
                message = error.status.message if isinstance(error, ApiError) else str(error)
                log.error("pod counters API not served", extra=fields(error=message))
                return
            await self._register_until_done()
            while True:
                await asyncio.sleep(ROTATION_CHECK_S)
                if self.store.ensure():
                    await self._register()
                    await self._site.stop()
                    await self._serve(runner)
        finally:
            await runner.cleanup()
            with contextlib.suppress(Exception):
                await asyncio.shield(self._unregister())

    async def _serve(self, runner: web.AppRunner) -> None:
        self._site = web.TCPSite(runner, "0.0.0.0", self.options.port, ssl_context=await self._ssl_context())
        await self._site.start()
        log.info("pod counters API serving", extra=fields(port=self.options.port))

    async def _register_until_done(self) -> None:
        """Register, retrying with backoff: a refusal must not stop the manager's other work."""
        backoff = Backoff(initial=1.0, cap=60.0, reset_after=0.0)
        while True:
            try:
                await self._register()
                return
            except ApiError as error:
                delay = backoff.failed(time.monotonic())
                log.warning(
                    "pod counters API not registered; retrying",
                    extra=fields(error=str(error.status.message), retry_in=round(delay, 1)),
                )
                await asyncio.sleep(delay)

    async def _register(self) -> None:
        if self.options.external_name:
            # Local mode: the Service lives in the controller namespace, which nothing else may have made yet.
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.options.service_namespace}}
            await self.client.apply(Namespace.from_dict(namespace), field_manager=FIELD_MANAGER)
            for manifest in external_service(self.options):
                kind = EXTERNAL_KINDS[manifest["kind"]]
                await self.client.apply(kind.from_dict(manifest), field_manager=FIELD_MANAGER, force=True)
        await self.client.apply(
            APIService.from_dict(api_service(self.options, self.store.ca_bundle())),
            field_manager=FIELD_MANAGER,
            force=True,
        )

    async def _unregister(self) -> None:
        """While it stays registered but unserved, the API server cannot discover every API, and namespace
        deletion waits: a manager that stops on purpose takes it away."""
        with tolerating(404):
            await self.client.delete(APIService, COUNTERS_API_SERVICE)
        if self.options.external_name:
            # Its Service and endpoint name this host, which may not run a manager again.
            for manifest in reversed(external_service(self.options)):
                kind = EXTERNAL_KINDS[manifest["kind"]]
                with tolerating(404):
                    await self.client.delete(
                        kind, manifest["metadata"]["name"], namespace=self.options.service_namespace
                    )
        log.info("pod counters API unregistered")
