"""Ingresses: the spec; the ingress class is the provider's default unless the peering names one."""

from __future__ import annotations

from lightkube.resources.networking_v1 import Ingress

from .kind import Context, ReflectedKind, present


class Ingresses(ReflectedKind):
    setting = "ingresses"
    resource = Ingress
    api_version = "networking.k8s.io/v1"
    kind = "Ingress"
    keeps_allocations = True  # the class the provider's admission filled in

    def with_allocations(self, body: dict, current: dict) -> dict:
        """Without a class of the peering's, the copy keeps the one the provider's default-class admission set when
        it was created (admission fills it in on creation only): an update dropping it would leave the copy
        class-less, which no controller of the provider may serve and its terms refuse."""
        allocated = (current.get("spec") or {}).get("ingressClassName")
        if allocated and not body["spec"].get("ingressClassName"):
            return {**body, "spec": {**body["spec"], "ingressClassName": allocated}}
        return body

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        spec = dict(obj.get("spec") or {})
        # A provider's default-class admission fills the class in; only a configured class is compared.
        remote_class = spec.pop("ingressClassName", None)
        if context.settings.ingress_class:
            spec["ingressClassName"] = context.settings.ingress_class if local else remote_class
        return present(metadata=self.metadata(obj, context), spec=spec)
