"""Twin namespaces, created by the provider's manager on behalf of its tenants.

A tenant asks with a TwinNamespace in its tenant namespace; the manager creates the namespace,
labels it with origin and destination and with the tenant's Pod Security level (Pod Security
Admission enforces it; relabelled when the tenant's ResourceOffer changes the level), and binds
the tenant's workload role there. A namespace that Catamaran did not create is reported as a
conflict and never adopted or altered; reserved names (the cluster's own namespaces, Catamaran's)
are refused before anything is created.

A twin extends one consumer namespace: the manager records its first TwinNamespace's originNamespace on the namespace
(ANNOTATION_ORIGIN_NAMESPACE). A TwinNamespace of the same name extending another namespace (one made after the first
lost its finalizer, say) is a conflict: never adopted, and its deletion never removes the namespace. The consumer
refuses such claims too (twin_claims.py); the provider does not rely on it.
"""

from __future__ import annotations

import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import LimitRange, Namespace, ResourceQuota, ServiceAccount
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.resources.rbac_authorization_v1 import RoleBinding
from lightkube.resources.storage_v1 import StorageClass
from lightkube.types import PatchType

from ..constants import (
    ANNOTATION_DEFAULT_STORAGE_CLASS,
    ANNOTATION_ORIGIN_NAMESPACE,
    ANNOTATION_TWIN_OF,
    CLUSTER_DNS_NAMESPACE,
    CLUSTER_DNS_SERVICE,
    FABRIC_NAMESPACE,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_CATAMARAN,
    MANAGER_COMPONENT,
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    TENANT_NAMESPACE_PREFIX,
    TENANT_WORKLOAD_CLUSTER_ROLE,
    TWIN_FINALIZER,
)
from ..kube.events import EventRecorder
from ..kube.informer import Informer, call, changed, enqueue
from ..kube.ops import patch_status
from ..kube.resources import TwinNamespace
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, reference
from ..tenancy import tenant_role_binding
from . import terms as tenant_terms
from .offers import TenantTerms

log = logging.getLogger(__name__)

POD_SECURITY_MODES = ("enforce", "warn", "audit")
RESERVED_NAMES = frozenset({"default", SYSTEM_NAMESPACE, FABRIC_NAMESPACE})
RESERVED_PREFIXES = ("kube-", TENANT_NAMESPACE_PREFIX)


def slice_endpoints(endpoint_slice) -> tuple[tuple[str, int], ...]:
    """(address, port) of every endpoint and TCP port of an EndpointSlice."""
    ports = [p.port for p in endpoint_slice.ports or [] if p.port and (p.protocol or "TCP") == "TCP"] or [0]
    addresses = [a for e in endpoint_slice.endpoints or [] for a in e.addresses or []]
    return tuple(sorted((address, port) for address in addresses for port in ports))


def is_default_class(storage_class) -> bool:
    return (storage_class.metadata.annotations or {}).get(ANNOTATION_DEFAULT_STORAGE_CLASS) == "true"


def reserved_name(name: str) -> bool:
    """Names a tenant may never have as a twin: the cluster's own namespaces and Catamaran's."""
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES)


def pod_security_labels(level: str) -> dict[str, str]:
    """Pod Security Admission labels enforcing (and warning and auditing) `level` at the latest version."""
    labels = {f"pod-security.kubernetes.io/{mode}": level for mode in POD_SECURITY_MODES}
    return {**labels, **{f"pod-security.kubernetes.io/{mode}-version": "latest" for mode in POD_SECURITY_MODES}}


def owned_by(namespace: dict | None, twin_of: str, origin: str | None = None) -> bool:
    """Is this namespace the twin `twin_of` (tenant namespace/name) made, extending `origin` (when given)? A twin made
    before origins were recorded has none: its TwinNamespace's origin is taken as its own."""
    meta = (namespace or {}).get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (
        (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY_CATAMARAN
        and annotations.get(ANNOTATION_TWIN_OF) == twin_of
        and origin_matches(annotations, origin)
    )


def origin_matches(annotations: dict, origin: str | None) -> bool:
    recorded = annotations.get(ANNOTATION_ORIGIN_NAMESPACE)
    return origin is None or recorded is None or recorded == origin


def name_refusal(name: str, consumer: str, terms: TenantTerms) -> tuple[str, str] | None:
    """(reason, message) when `name` may never be this tenant's twin: reserved, or not allowed by its terms."""
    if reserved_name(name):
        message = (
            f"namespace {name} is reserved (default, kube-*, {SYSTEM_NAMESPACE}, {FABRIC_NAMESPACE}, "
            f"{TENANT_NAMESPACE_PREFIX}*) and is never a twin namespace"
        )
        return "ReservedName", message
    if not tenant_terms.twin_name_allowed(name, consumer, terms.twin_names):
        message = (
            f"namespace {name} is not allowed by the provider's terms: twin names must be <name>-{consumer} "
            "(the DefaultName strategy) unless the peering allows any name"
        )
        return "TwinNameNotAllowed", message
    return None


def ownership_conflict(existing: dict | None, name: str, twin_of: str, origin: str | None) -> tuple[str, str] | None:
    """(reason, message) when the namespace `name` exists and is not this TwinNamespace's to use."""
    if existing is None:
        return None
    if owned_by(existing, twin_of) and not owned_by(existing, twin_of, origin):
        message = f"namespace {name} is the twin of another namespace of this tenant; a twin extends only one namespace"
        return "TwinNamespaceTaken", message
    if not owned_by(existing, twin_of):
        return (
            "NamespaceConflict",
            f"namespace {name} already exists and is not managed by Catamaran for {twin_of}; not adopted",
        )
    return None


class TwinNamespaceController:
    name = "twinnamespaces"

    def __init__(
        self,
        client: AsyncClient,
        cluster_id: str,
        tenants: Informer,
        events: EventRecorder,
        terms: Informer | None = None,
        provider_pod_cidrs=lambda: [],
        wait_for: tuple[Informer, ...] = (),
    ):
        self.client = client
        self.cluster_id = cluster_id
        self.events = events
        self.tenants = tenants  # tenant namespace -> consumer cluster id
        self.terms = terms  # the ResourceOffers' terms (TenantTerms): level, names, guards and what the tenant writes
        self.provider_pod_cidrs = provider_pod_cidrs  # () -> this cluster's pod ranges, which tenants never point at
        self.wait_for = wait_for  # informers behind provider_pod_cidrs
        self.twins = Informer(client, TwinNamespace, name="twinnamespaces", transform=as_dict)
        self.namespaces = Informer(
            client,
            Namespace,
            name="twin-namespaces",
            labels={LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
            transform=as_dict,
        )
        # Which classes are the cluster's default: what a tenant's claims may name when its terms name none.
        self.storage_classes = Informer(client, StorageClass, name="storageclasses", transform=is_default_class)
        self.storage_classes.on_change(call(self.requeue_all, when=changed))
        # The cluster DNS, which every twin's pods may query, and the API server, which the terms may lend: their
        # endpoints are what a NetworkPolicy sees after kube-proxy's translation.
        self.dns = self._service_endpoints(CLUSTER_DNS_NAMESPACE, CLUSTER_DNS_SERVICE)
        self.api_server = self._service_endpoints("default", "kubernetes")
        self.queue = WorkQueue(self.name, self.reconcile, workers=4)
        self.twins.on_change(enqueue(self.queue))
        self.namespaces.on_change(self._namespace_changed)
        if terms is not None:
            terms.on_change(self._terms_changed)

    def _terms_changed(self, event, key, new, old) -> None:
        if new is not None and old is not None and new == old:
            return
        for twin_key in self.twins.keys_in(key[0]):
            self.queue.add(twin_key)

    def pod_ranges_changed(self) -> None:
        """The provider's own pod ranges changed: every twin's allowed endpoint ranges are computed again."""
        self.requeue_all()

    @property
    def own_informers(self) -> tuple[Informer, ...]:
        return (self.twins, self.namespaces, self.storage_classes, self.dns, self.api_server)

    def requeue_all(self) -> None:
        for twin_key in list(self.twins.cache):
            self.queue.add(twin_key)

    def _service_endpoints(self, namespace: str, service: str) -> Informer:
        informer = Informer(
            self.client,
            EndpointSlice,
            name=f"{service}-endpoints",
            namespace=namespace,
            labels={"kubernetes.io/service-name": service},
            transform=slice_endpoints,
        )
        informer.on_change(call(self.requeue_all, when=changed))
        return informer

    @staticmethod
    def endpoints(informer: Informer) -> list[tuple[str, int]]:
        cache = informer.cache
        return sorted({endpoint for key in list(cache) for endpoint in cache[key]})

    def default_storage_classes(self) -> list[str]:
        cache = self.storage_classes.cache
        return sorted(key[1] for key in list(cache) if cache[key])

    def tenant_terms(self, tenant_ns: str) -> TenantTerms:
        terms = self.terms.get(tenant_ns, RESOURCE_OFFER_NAME) if self.terms is not None else None
        return terms or TenantTerms()

    def _namespace_changed(self, event, key, new, old) -> None:
        twin_of = ((new or old)["metadata"].get("annotations") or {}).get(ANNOTATION_TWIN_OF)
        if twin_of and "/" in twin_of:
            self.queue.add(tuple(twin_of.split("/", 1)))

    def tasks(self):
        return [*(informer.run() for informer in self.own_informers), self._run()]

    async def _run(self):
        terms = [self.terms] if self.terms else []
        for informer in (*self.own_informers, self.tenants, *terms, *self.wait_for):
            await informer.synced.wait()
        await self.queue.run()

    async def reconcile(self, key) -> float | None:
        tenant_ns, name = key
        twin = self.twins.get(tenant_ns, name)
        if twin is None:
            return None
        twin_of = f"{tenant_ns}/{name}"
        meta = twin["metadata"]
        origin = (twin.get("spec") or {}).get("originNamespace")
        if meta.get("deletionTimestamp"):
            return await self._remove(twin, twin_of, origin)
        consumer = self.tenants.get(None, tenant_ns)
        if consumer is None:
            await self._status(twin, "Failed", f"{tenant_ns} is not a Catamaran tenant namespace")
            return None
        terms = self.tenant_terms(tenant_ns)
        refused = name_refusal(name, consumer, terms)
        if refused is not None:
            await self._refuse(twin, "Failed", *refused)
            return None
        if TWIN_FINALIZER not in (meta.get("finalizers") or []):
            await self.client.patch(
                TwinNamespace,
                name,
                {"metadata": {"finalizers": [*(meta.get("finalizers") or []), TWIN_FINALIZER]}},
                namespace=tenant_ns,
                patch_type=PatchType.MERGE,
            )
        ranges, problem = tenant_terms.endpoint_ranges(terms.consumer_pod_cidrs, self.provider_pod_cidrs())
        lent = tenant_terms.twin_annotations(terms, ranges, self.default_storage_classes())
        annotations = {**lent, ANNOTATION_ORIGIN_NAMESPACE: origin}
        existing = await self._get_namespace(name)
        conflict = ownership_conflict(existing, name, twin_of, origin)
        if conflict is not None:
            await self._refuse(twin, "Conflict", *conflict)
            return None
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            await self._status(twin, "Pending", f"namespace {name} is still terminating")
            return 2
        await self._ensure_namespace(existing, name, twin_of, consumer, terms.pod_security, annotations)
        if problem:
            await self.events.record(reference(twin), "Warning", "EndpointRangesRefused", problem)
        api_server, refusal = tenant_terms.consumer_api_server_egress(
            terms.consumer_api_server, self.provider_pod_cidrs()
        )
        if refusal:
            await self.events.record(reference(twin), "Warning", "ConsumerAPIServerRefused", refusal)
        await self._apply_guards(name, tenant_ns, terms, ranges, api_server)
        await self._status(twin, "Ready", f"namespace {name} is ready for {consumer}")
        return None

    async def _refuse(self, twin: dict, phase: str, reason: str, message: str) -> None:
        """The phase and message on the TwinNamespace; a Warning Event the first time it enters that phase."""
        if (twin.get("status") or {}).get("phase") != phase:
            await self.events.record(reference(twin), "Warning", reason, message)
        await self._status(twin, phase, message)

    async def _ensure_namespace(
        self, existing: dict | None, name: str, twin_of: str, consumer: str, level: str, annotations: dict
    ) -> None:
        """Create the twin namespace, or bring an existing one's Pod Security labels and terms up to date."""
        if existing is None:
            labels = {
                LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN,
                LABEL_ORIGIN_CLUSTER_ID: consumer,
                LABEL_DESTINATION_CLUSTER_ID: self.cluster_id,
                **pod_security_labels(level),
            }
            metadata = {"name": name, "labels": labels, "annotations": {ANNOTATION_TWIN_OF: twin_of, **annotations}}
            await self.client.create(Namespace.from_dict({"metadata": metadata}))
            log.info("twin namespace created", extra=fields(namespace=name, tenant=consumer))
            return
        wanted = pod_security_labels(level)
        labels = existing["metadata"].get("labels") or {}
        current = existing["metadata"].get("annotations") or {}
        if any(labels.get(k) != v for k, v in wanted.items()) or any(
            current.get(k) != v for k, v in annotations.items()
        ):
            patch = {"metadata": {"labels": wanted, "annotations": annotations}}
            await self.client.patch(Namespace, name, patch, patch_type=PatchType.MERGE)
            log.info("twin namespace's terms updated", extra=fields(namespace=name, pod_security=level))

    async def _apply_guards(
        self, name: str, tenant_ns: str, terms: TenantTerms, ranges: list[str], api_server: dict | None
    ) -> None:
        """The tenant's rights in the twin, and what holds them to the terms: its LimitRange and ResourceQuota, its
        NetworkPolicy, and a default ServiceAccount that mounts no provider token."""
        limit_range, resource_quota = tenant_terms.twin_guards(name, terms)
        service_account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": name},
            "automountServiceAccountToken": False,
        }
        reachable = tenant_terms.Reachable(
            dns=tuple(address for address, _ in self.endpoints(self.dns)),
            consumer_api_server=api_server,
            provider_api_server=tuple(self.endpoints(self.api_server)),
        )
        for resource, body in (
            (RoleBinding, tenant_role_binding(name, tenant_ns, TENANT_WORKLOAD_CLUSTER_ROLE)),
            (LimitRange, limit_range),
            (ResourceQuota, resource_quota),
            (ServiceAccount, service_account),
            (NetworkPolicy, tenant_terms.twin_isolation(name, terms, ranges, reachable)),
        ):
            await self.client.apply(resource.from_dict(body), field_manager=MANAGER_COMPONENT, force=True)

    async def _remove(self, twin: dict, twin_of: str, origin: str | None) -> float | None:
        name = twin["metadata"]["name"]
        await self._status(twin, "Terminating", f"removing namespace {name}")
        existing = await self._get_namespace(name)
        if existing is not None and owned_by(existing, twin_of, origin):
            if not existing["metadata"].get("deletionTimestamp"):
                await self.client.delete(Namespace, name)
            return 2
        finalizers = [f for f in twin["metadata"].get("finalizers") or [] if f != TWIN_FINALIZER]
        await self.client.patch(
            TwinNamespace,
            name,
            {"metadata": {"finalizers": finalizers or None}},
            namespace=twin["metadata"]["namespace"],
            patch_type=PatchType.MERGE,
        )
        return None

    async def _get_namespace(self, name: str) -> dict | None:
        cached = self.namespaces.get(None, name)
        if cached is not None:
            return cached
        try:
            return as_dict(await self.client.get(Namespace, name))
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise

    async def _status(self, twin: dict, phase: str, message: str) -> None:
        status = twin.get("status") or {}
        if status.get("phase") == phase and status.get("message") == message:
            return
        meta = twin["metadata"]
        await patch_status(
            self.client,
            TwinNamespace,
            meta,
            {"phase": phase, "message": message, "observedGeneration": meta.get("generation")},
        )
