"""The manager's provider half: ShadowPods, resource offers and twin namespaces."""

from __future__ import annotations

from lightkube import AsyncClient

from ..kube.events import EventRecorder
from ..kube.informer import Informer
from .offers import ResourceOfferController
from .shadowpods import ShadowPodController
from .twins import TwinNamespaceController


def provider_tasks(client: AsyncClient, cluster_id: str, workers: int = 8) -> list:
    events = EventRecorder(client, "catamaran-manager")
    offers = ResourceOfferController(client, cluster_id)
    tenants: Informer = offers.tenants
    twins = TwinNamespaceController(client, cluster_id, tenants, events)
    shadowpods = ShadowPodController(client, events, workers=workers)
    return [*offers.tasks(), *twins.tasks(), *shadowpods.tasks()]
