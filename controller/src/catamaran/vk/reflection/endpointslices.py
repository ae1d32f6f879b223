"""EndpointSlices of the consumer's Services. Endpoints of pods already running in this provider are left
out (the provider's own slices, made from the reflected Service's selector, hold them); the others are
reflected with their addresses as the provider reaches them, ready flags as they are (not ready while the
network fabric's tunnel is down), and only addresses in the ranges the provider's terms allow (the consumer's
announced pod ranges): the provider refuses any other."""

from __future__ import annotations

import ipaddress

from lightkube.resources.discovery_v1 import EndpointSlice

from ...constants import ENDPOINT_SLICE_MANAGED_BY_LABEL, ENDPOINT_SLICE_SERVICE_LABEL
from .kind import Context, ReflectedKind, present

# The provider's EndpointSlice controller leaves slices with another manager alone.
REFLECTED_SLICE_MANAGER = "reflection.catamaran.io"


def within(address: str, ranges: tuple | None) -> bool:
    """Whether the provider's terms let a tenant's slice point at `address` (None: the provider says nothing)."""
    if ranges is None:
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(r, strict=False) for r in ranges)


class EndpointSlices(ReflectedKind):
    setting = "endpointSlices"
    resource = EndpointSlice
    api_version = "discovery.k8s.io/v1"
    kind = "EndpointSlice"

    def skipped(self, local: dict, context: Context) -> bool:
        meta = local["metadata"]
        service = (meta.get("labels") or {}).get(ENDPOINT_SLICE_SERVICE_LABEL)
        return not service or (meta.get("namespace"), service) == ("default", "kubernetes")

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        metadata = self.metadata(obj, context)
        metadata["labels"] = {**metadata.get("labels", {}), ENDPOINT_SLICE_MANAGED_BY_LABEL: REFLECTED_SLICE_MANAGER}
        endpoints = []
        for endpoint in obj.get("endpoints") or []:
            if local and endpoint.get("nodeName") in context.own_nodes:
                continue
            addresses = endpoint.get("addresses") or []
            if local:
                addresses = [a for a in map(context.translate, addresses) if within(a, context.endpoint_ranges)]
                if not addresses:
                    continue
            conditions = dict(endpoint.get("conditions") or {})
            if local and context.network_down:
                conditions.update(ready=False, serving=False)
            endpoints.append(
                present(addresses=addresses, conditions=present(**conditions), hostname=endpoint.get("hostname"))
            )
        return present(
            metadata=metadata,
            addressType=obj.get("addressType"),
            ports=obj.get("ports"),
            endpoints=endpoints,
        )
