"""The manager's provider half: ShadowPods, resource offers, twin namespaces and tenant credentials."""

from __future__ import annotations

from lightkube import AsyncClient

from ..constants import MANAGER_COMPONENT
from ..kube.events import EventRecorder
from ..kube.informer import Informer, call, changed
from ..tenancy import CREDENTIAL_RENEW_FRACTION
from .counters import CounterOptions, CountersServer
from .credentials import CredentialController
from .enforcement_probe import PROBE_INTERVAL_SECONDS, EnforcementProbe, not_probed
from .hosts import IngressHostsController
from .offers import ResourceOfferController
from .shadowpods import WORKERS as SHADOWPOD_WORKERS
from .shadowpods import ShadowPodController
from .twins import TwinNamespaceController


def provider_tasks(
    client: AsyncClient,
    cluster_id: str,
    workers: int = SHADOWPOD_WORKERS,
    credential_renew_fraction: float = CREDENTIAL_RENEW_FRACTION,
    counters: CounterOptions | None = None,
    canary_image: str = "",
    canary_pull_secrets: list[str] | None = None,
    probe_interval: float = PROBE_INTERVAL_SECONDS,
) -> list:
    """The provider's loops; with `canary_image`, NetworkPolicy enforcement is probed every `probe_interval`."""
    events = EventRecorder(client, MANAGER_COMPONENT)
    offers = ResourceOfferController(client, cluster_id)
    tenants: Informer = offers.tenants
    twins = TwinNamespaceController(
        client,
        cluster_id,
        tenants,
        events,
        terms=offers.offers,
        provider_pod_cidrs=offers.pod_cidrs,
        wait_for=(offers.nodes,),
    )
    # A node with a new pod range may overlap a consumer's: the twins' endpoint ranges follow it, as the offers' do.
    offers.nodes.on_change(
        call(twins.pod_ranges_changed, when=lambda event, key, new, old: _pod_cidrs(new) != _pod_cidrs(old))
    )

    shadowpods = ShadowPodController(
        client,
        events,
        workers=workers,
        offers=offers,
        twin_namespaces=twins.namespaces,
        wait_for=(offers.offers, offers.nodes, offers.pods, twins.namespaces),
    )
    credentials = CredentialController(
        client,
        tenants,
        lambda namespace: offers.terms(namespace).credential_lifetime_seconds,
        events,
        renew_fraction=credential_renew_fraction,
        wait_for=(offers.offers,),
    )
    offers.offers.on_change(call(credentials.terms_changed, key=lambda key: key[0], when=changed))
    hosts = IngressHostsController(client)
    tasks = [*offers.tasks(), *twins.tasks(), *shadowpods.tasks(), *credentials.tasks(), *hosts.tasks()]
    if canary_image:
        probe = EnforcementProbe(client, offers, canary_image, probe_interval, pull_secrets=canary_pull_secrets)
        tasks += probe.tasks()
    else:
        offers.network_policy_condition = not_probed()
    if counters is not None:
        server = CountersServer(
            client,
            counters,
            pods_in=lambda namespace: _placed(offers.pods, namespace),
            namespace_labels=lambda namespace: _labels(twins.namespaces.get(None, namespace)),
        )
        tasks.append(server.run())
    return tasks


def _placed(pods: Informer, namespace: str) -> dict[str, str]:
    """Pod name -> node of a namespace's running pods (the offers' cache: finished pods are None there)."""
    placed = {}
    for key in pods.keys_in(namespace):
        summary = pods.cache.get(key)
        if summary is not None and summary.node:
            placed[key[1]] = summary.node
    return placed


def _labels(namespace: dict | None) -> dict | None:
    return None if namespace is None else namespace["metadata"].get("labels") or {}


def _pod_cidrs(node) -> tuple:
    """A node's pod ranges as the offers cache them (NodeSummary; None when the node is gone)."""
    return node.pod_cidrs if node is not None else ()
