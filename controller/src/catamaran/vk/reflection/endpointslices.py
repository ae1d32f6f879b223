"""EndpointSlices of the consumer's Services. Endpoints of pods already running in this provider are left
out (the provider's own slices, made from the reflected Service's selector, hold them); the others are
reflected with their addresses as the provider reaches them, ready flags as they are."""

from __future__ import annotations

from lightkube.resources.discovery_v1 import EndpointSlice

from .kind import Context, ReflectedKind, present

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# The provider's EndpointSlice controller leaves slices with another manager alone.
REFLECTED_SLICE_MANAGER = "reflection.catamaran.io"


class EndpointSlices(ReflectedKind):
    setting = "endpointSlices"
    resource = EndpointSlice
    api_version = "discovery.k8s.io/v1"
    kind = "EndpointSlice"

    def skipped(self, local: dict, context: Context) -> bool:
        meta = local["metadata"]
        service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        return not service or (meta.get("namespace"), service) == ("default", "kubernetes")

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        metadata = self.metadata(obj, context)
        metadata["labels"] = {**metadata.get("labels", {}), MANAGED_BY_LABEL: REFLECTED_SLICE_MANAGER}
        endpoints = []
        for endpoint in obj.get("endpoints") or []:
            if local and endpoint.get("nodeName") == context.node_name:
                continue
            addresses = endpoint.get("addresses") or []
            endpoints.append(
                present(
                    addresses=[context.translate(a) for a in addresses] if local else addresses,
                    conditions=present(**(endpoint.get("conditions") or {})),
                    hostname=endpoint.get("hostname"),
                )
            )
        return present(
            metadata=metadata,
            addressType=obj.get("addressType"),
            ports=obj.get("ports"),
            endpoints=endpoints,
        )
