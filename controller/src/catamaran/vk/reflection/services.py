"""Services: ports, selector, type, session affinity and traffic policies. The provider allocates the
cluster IP and node ports; a headless Service stays headless. `default/kubernetes` is the consumer's own.
A type the provider's terms do not allow is reflected as ClusterIP (a Warning Event on the local Service says so);
externalIPs are never reflected."""

from __future__ import annotations

from lightkube.resources.core_v1 import Service

from .kind import Context, ReflectedKind, present

# Allocated by the provider, kept from the copy when it is replaced.
PROVIDER_ALLOCATED = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort")


class Services(ReflectedKind):
    setting = "services"
    resource = Service
    api_version = "v1"
    kind = "Service"
    keeps_allocations = True

    def skipped(self, local: dict, context: Context) -> bool:
        meta = local["metadata"]
        return (meta.get("namespace"), meta.get("name")) == ("default", "kubernetes")

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        spec = obj.get("spec") or {}
        ports = [
            present(
                name=port.get("name"),
                port=port.get("port"),
                targetPort=port.get("targetPort"),
                protocol=port.get("protocol") or "TCP",
                appProtocol=port.get("appProtocol"),
            )
            for port in spec.get("ports") or []
        ]
        kind = spec.get("type") or "ClusterIP"
        # Read back, a copy is as written; a type the provider refuses is written as ClusterIP, without the fields
        # only the other types carry.
        lent = not local or kind in context.service_types
        return present(
            metadata=self.metadata(obj, context),
            spec=present(
                type=kind if lent else "ClusterIP",
                clusterIP="None" if spec.get("clusterIP") == "None" else None,
                ports=ports,
                selector=spec.get("selector"),
                externalName=spec.get("externalName") if lent else None,
                sessionAffinity=spec.get("sessionAffinity"),
                sessionAffinityConfig=spec.get("sessionAffinityConfig"),
                externalTrafficPolicy=spec.get("externalTrafficPolicy") if lent else None,
                internalTrafficPolicy=spec.get("internalTrafficPolicy"),
                publishNotReadyAddresses=spec.get("publishNotReadyAddresses") or None,
                loadBalancerClass=spec.get("loadBalancerClass") if lent else None,
                allocateLoadBalancerNodePorts=spec.get("allocateLoadBalancerNodePorts") if lent else None,
                trafficDistribution=spec.get("trafficDistribution"),
            ),
        )

    def adjustments(self, local: dict, context: Context) -> list[str]:
        kind = (local.get("spec") or {}).get("type") or "ClusterIP"
        if kind in context.service_types:
            return []
        allowed = ", ".join(context.service_types)
        return [f"type {kind} is not allowed by the provider's terms (allowed: {allowed}): reflected as ClusterIP"]

    def with_allocations(self, body: dict, current: dict) -> dict:
        """`body` with what the provider allocated on `current` (immutable or costly to change)."""
        return keep_allocations(body, current)


def keep_allocations(body: dict, current: dict) -> dict:
    spec, allocated = body["spec"], current.get("spec") or {}
    if spec.get("type") == "ExternalName" or allocated.get("type") == "ExternalName":
        return body  # no cluster IP on either side
    for field in PROVIDER_ALLOCATED:
        if allocated.get(field) is not None:
            spec.setdefault(field, allocated[field])
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        node_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort") for p in allocated.get("ports", [])}
        for port in spec.get("ports") or []:
            node_port = node_ports.get((port.get("port"), port.get("protocol", "TCP")))
            if node_port:
                port["nodePort"] = node_port
    return body
