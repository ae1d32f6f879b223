"""The manager's consumer half: NamespaceOffloading and its policies, the pod webhook, kubelet-serving approvals,
the virtual storage class."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lightkube import AsyncClient

from .. import health
from ..constants import MANAGER_COMPONENT
from ..kube.events import EventRecorder
from .csr import KubeletServingApprover
from .offloading import NamespaceOffloadingController
from .policies import NamespaceOffloadingPolicyController
from .storage import keep_virtual_storage_class
from .webhook import PodWebhook


@dataclass(frozen=True)
class WebhookOptions:
    """Where the pod webhook listens and how the API server reaches it (a URL, or a Service in deployment mode)."""

    port: int
    cert_dir: Path
    hosts: list[str]
    url: str | None = None
    service: dict | None = None  # namespace, name, port


def consumer_tasks(
    client: AsyncClient, cluster_id: str, controller_namespace: str, webhook: WebhookOptions | None
) -> list:
    events = EventRecorder(client, MANAGER_COMPONENT)
    offloadings = NamespaceOffloadingController(client, cluster_id, events, controller_namespace)
    policies = NamespaceOffloadingPolicyController(client, events, offloadings.offloadings, controller_namespace)
    approver = KubeletServingApprover(client, events, controller_namespace)
    tasks = [*offloadings.tasks(), *policies.tasks(), *approver.tasks(), keep_virtual_storage_class(client)]
    if webhook is not None:
        server = PodWebhook(
            client,
            offloadings,
            policies,
            cert_dir=webhook.cert_dir,
            hosts=webhook.hosts,
            port=webhook.port,
            url=webhook.url,
            service=webhook.service,
        )
        tasks.append(server.run())
        health.HEALTH.add_check("pod webhook", health.listening("127.0.0.1", webhook.port))
    return tasks
