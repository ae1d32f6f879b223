"""Every reflector of one peering: one per kind, the token reflector and the virtual volumes, sharing the twin scopes,
the settings and the context they are rewritten with. vk/assembly.py builds it and registers it on the twins."""

from __future__ import annotations

from ...kube.informer import Informer
from ...networks import remapper
from ..context import PeeringContext
from ..namespaces import TwinManager
from .claims import PersistentVolumeClaims
from .configmaps import ConfigMaps
from .endpointslices import EndpointSlices
from .ingresses import Ingresses
from .kind import Context, ReflectedKind
from .policy import ReflectionSettings
from .reflector import Reflector
from .secrets import Secrets
from .services import Services
from .tokens import TokenReflector
from .volumes import VirtualVolumes


class PeeringReflection:
    def __init__(self, peering: PeeringContext, twins: TwinManager, local_pods: Informer, settings: ReflectionSettings):
        self.peering = peering
        self.settings = settings
        self.terms: dict = {}  # the provider's terms for what reflection writes (Context fields)
        self.local_remap: tuple = ()  # the consumer's pod ranges the provider sees elsewhere (fabric remapping)
        self.network_down = False
        context = self._context()
        self.config_maps = self._reflector(ConfigMaps(), twins, context)
        self.secrets = self._reflector(Secrets(), twins, context)
        self.services = self._reflector(Services(), twins, context)
        self.endpoint_slices = self._reflector(EndpointSlices(), twins, context)
        self.ingresses = self._reflector(Ingresses(), twins, context)
        self.claims = self._reflector(PersistentVolumeClaims(), twins, context)
        # Every loop over the kinds goes in this order.
        self.reflectors: tuple[Reflector, ...] = (
            self.config_maps,
            self.secrets,
            self.services,
            self.endpoint_slices,
            self.ingresses,
            self.claims,
        )
        self.tokens = TokenReflector(
            peering, twins, self.secrets, local_pods, policy=settings.kind("serviceAccountTokens")
        )
        self.volumes = VirtualVolumes(peering, twins, self.claims)

    def _reflector(self, kind: ReflectedKind, twins: TwinManager, context: Context) -> Reflector:
        """The kind's reflector, its policy read from the settings by the kind's key in spec.reflection.kinds."""
        return Reflector(kind, self.peering, twins, policy=self.settings.kind(kind.setting), context=context)

    def tasks(self):
        reflectors = [task for reflector in self.reflectors for task in reflector.tasks()]
        return reflectors + self.tokens.tasks() + self.volumes.tasks()

    def twin_ready(self, origin: str, twin: str) -> None:
        for reflector in self.reflectors:
            reflector.twin_ready(origin, twin)
        self.tokens.requeue_namespace(origin)

    def twin_removed(self, twin: str) -> None:
        for reflector in self.reflectors:
            reflector.twin_removed(twin)

    def drain(self, origin: str, twin: str) -> int:
        """Start removing every copy in a twin that is leaving; the number still there."""
        left = sum(reflector.drain(origin, twin) for reflector in self.reflectors)
        self.tokens.requeue_namespace(origin)  # deselected, its pods' token Secrets go
        return left + self.tokens.left_in(twin)

    def _context(self) -> Context:
        return Context(
            settings=self.settings,
            own_nodes=frozenset(self.peering.node_names),
            translate=remapper(self.local_remap),
            network_down=self.network_down,
            **self.terms,
        )

    def nodes_changed(self) -> None:
        """A virtual node joined or left the peering: endpoints on its pods are (no longer) the provider's own."""
        self._rewrite()

    def update_network(self, down: bool) -> None:
        """The fabric's tunnel went down or came back: reflected endpoints are rewritten as (not) ready."""
        if down != self.network_down:
            self.network_down = down
            self._rewrite()

    def update_local_remap(self, pairs: tuple) -> None:
        """The consumer's pod ranges as the provider sees them changed: reflected endpoints are rewritten to them."""
        if pairs != self.local_remap:
            self.local_remap = pairs
            self._rewrite()

    def update(self, settings: ReflectionSettings) -> None:
        if settings != self.settings:
            self.settings = settings
            self._rewrite()
            self.tokens.update(settings.kind("serviceAccountTokens"))

    def update_terms(self, service_types: tuple, endpoint_ranges: tuple | None) -> None:
        """The provider's terms changed (its ResourceOffer): copies are rewritten to them."""
        terms = {"service_types": service_types, "endpoint_ranges": endpoint_ranges}
        if terms != self.terms:
            self.terms = terms
            self._rewrite()

    def _rewrite(self) -> None:
        """Every reflector with the current settings and context: copies that now differ are rewritten."""
        context = self._context()
        for reflector in self.reflectors:
            reflector.update(self.settings.kind(reflector.kind.setting), context)

    def local_object(self, kind: str, namespace: str, copy_name: str) -> dict | None:
        """The local object a copy named `copy_name` reflects (for Events about it), as (apiVersion, kind, meta)."""
        for reflector in self.reflectors:
            if reflector.kind.kind == kind:
                local_name = reflector.kind.local_name(copy_name)
                local = reflector.local_of(namespace, local_name) if local_name else None
                if local is None:
                    return None
                return {"apiVersion": reflector.kind.api_version, "kind": kind, "metadata": local["metadata"]}
        return None
