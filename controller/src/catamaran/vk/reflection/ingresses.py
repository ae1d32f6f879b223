"""Ingresses: the spec; the ingress class is the provider's default unless the peering names one."""

from __future__ import annotations

from lightkube.resources.networking_v1 import Ingress

from .kind import Context, ReflectedKind, present


class Ingresses(ReflectedKind):
    setting = "ingresses"
    resource = Ingress
    api_version = "networking.k8s.io/v1"
    kind = "Ingress"

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        spec = dict(obj.get("spec") or {})
        # A provider's default-class admission fills the class in; only a configured class is compared.
        remote_class = spec.pop("ingressClassName", None)
        if context.settings.ingress_class:
            spec["ingressClassName"] = context.settings.ingress_class if local else remote_class
        return present(metadata=self.metadata(obj, context), spec=spec)
