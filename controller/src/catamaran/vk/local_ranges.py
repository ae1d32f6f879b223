"""The consumer's own ranges and addresses, which no provider's pod IP may take (ip_translation.IPTranslator).

Read from what this virtual kubelet may read. Always: the `kubernetes` Service's cluster IPs and the API
server's addresses (its EndpointSlice), from the reflection's cluster-wide watches, and the virtual node's own
address. Where the credential allows it (local mode; in deployment mode only with `list` and `watch` on nodes and
on servicecidrs.networking.k8s.io): every node's pod ranges and addresses, and the service ranges. Each of these
two is tried once with a one-item list; refused (403) or not served by this API server (404), it is left out
and `unread` says so. Nothing is polled: every source is a watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.networking_v1 import ServiceCIDR

from ..kube import backoff
from ..kube.informer import Informer, call, changed, error_text
from ..logs import fields
from ..objects import as_dict
from .ip_translation import (
    OwnRange,
    api_server_entries,
    kubernetes_service_entries,
    node_entries,
    own_ranges,
    service_cidr_entries,
)

log = logging.getLogger(__name__)

KUBERNETES_SERVICE = ("default", "kubernetes")  # the Service and its EndpointSlice share the name
UNREADABLE = {403: "forbidden to this credential", 404: "not served by this API server"}
# Asking whether a source is readable, while the API server does not answer: jittered, as every retry.
RETRY_INITIAL_SECONDS = 0.5
RETRY_CAP_SECONDS = 30.0
# Read where the credential allows it: the resource, the informer's name, and its objects' entries.
OPTIONAL_SOURCES = (
    (Node, "consumer-nodes", node_entries),
    (ServiceCIDR, "consumer-service-cidrs", service_cidr_entries),
)


class LocalRanges:
    """The consumer's own ranges (`ranges()`), their sources kept current by watches."""

    def __init__(self, local: AsyncClient, node_address: str):
        self.local = local
        self.node_address = node_address
        self.services: Informer | None = None  # the reflection's, once attached
        self.endpoint_slices: Informer | None = None
        self.optional: list[Informer] = []
        self.unread: list[str] = []  # the optional sources this credential cannot read, and why
        self.synced = asyncio.Event()
        self.listeners: list[Callable[[], None]] = []  # told once synced, then whenever the ranges change

    def follow_kubernetes_service(self, services: Informer, endpoint_slices: Informer) -> None:
        """Read the `kubernetes` Service and EndpointSlice from these cluster-wide watches (the reflection's)."""
        self.services, self.endpoint_slices = services, endpoint_slices
        for informer in (services, endpoint_slices):
            informer.on_change(
                call(self._changed, when=lambda event, key, new, old: key == KUBERNETES_SERVICE and new != old)
            )

    def tasks(self):
        return [self._run()]

    def ranges(self) -> tuple[OwnRange, ...]:
        entries = [(self.node_address, "virtual node's address")]
        if self.services is not None:
            entries += kubernetes_service_entries(self.services.get(*KUBERNETES_SERVICE))
            entries += api_server_entries(self.endpoint_slices.get(*KUBERNETES_SERVICE))
        for informer in self.optional:
            entries += [entry for object_entries in list(informer.cache.values()) for entry in object_entries]
        return own_ranges(entries)

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for resource, name, entries in OPTIONAL_SOURCES:
                why_not = await self._unreadable(resource)
                if why_not is not None:
                    self.unread.append(f"{resource.__name__}s ({why_not})")
                    log.info("consumer ranges left unread", extra=fields(kind=resource.__name__, why=why_not))
                    continue
                informer = Informer(self.local, resource, name=name, transform=lambda obj, e=entries: e(as_dict(obj)))
                informer.on_change(call(self._changed, when=changed))
                self.optional.append(informer)
                group.create_task(informer.run())
            for informer in [*self.optional, *filter(None, (self.services, self.endpoint_slices))]:
                await informer.synced.wait()
            self.synced.set()
            self._changed()

    async def _unreadable(self, resource) -> str | None:
        """None when this process may list `resource`, else why not; asked until the API server answers."""
        attempt = 0
        while True:
            attempt += 1
            try:
                async for _ in self.local.list(resource, chunk_size=1):
                    break
                return None
            except ApiError as error:
                if error.status.code in UNREADABLE:
                    return UNREADABLE[error.status.code]
                problem = error_text(error)
            except Exception as error:  # unreachable server: as for any informer, try again
                problem = error_text(error)
            log.warning("cannot tell whether consumer ranges are readable", extra=fields(error=problem))
            await asyncio.sleep(backoff.exponential(attempt, initial=RETRY_INITIAL_SECONDS, cap=RETRY_CAP_SECONDS))

    def _changed(self) -> None:
        if not self.synced.is_set():
            return  # the first full view is announced once, when every source has listed
        for listener in self.listeners:
            listener()
