"""The hosts each namespace's Ingresses serve on this provider, kept in one ConfigMap for the tenant admission policy.

A tenant Ingress may not serve a host that another namespace serves: it would split or take the provider's traffic
for it, or another twin's. An admission policy reads no object but its parameter, so the manager keeps the record
(`INGRESS_HOSTS_CONFIGMAP` in `SYSTEM_NAMESPACE`: a key per host, the value the namespaces serving it) from one
cluster-wide watch of Ingresses, each cached as its hosts only. Bursts are written once: the queue holds one key.
Like any informer-fed check, it sees a host a moment after it is served; two Ingresses created in that moment
both pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap
from lightkube.resources.networking_v1 import Ingress

from ..constants import (
    INGRESS_HOSTS_CONFIGMAP,
    LABEL_MANAGED_BY,
    MANAGED_BY_CATAMARAN,
    MANAGER_COMPONENT,
    SYSTEM_NAMESPACE,
)
from ..kube.informer import Informer, changed, enqueue
from ..kube.workqueue import WorkQueue
from ..tenancy import ingress_host_key

# Changes this close together are written as one.
COALESCE_SECONDS = 0.2
_KEY = "hosts"


def rule_hosts(ingress) -> frozenset[str]:
    """The hosts an Ingress's rules name (rules without a host are a tenant's only with `*` lent: no record)."""
    spec = ingress.spec
    return frozenset(rule.host for rule in (spec.rules or []) if rule.host) if spec is not None else frozenset()


def served_hosts(ingresses: Iterable[tuple[str, frozenset[str]]]) -> dict[str, str]:
    """(namespace, hosts) of every Ingress -> the ConfigMap's data: host key -> the namespaces serving it, sorted."""
    served: dict[str, set[str]] = {}
    for namespace, hosts in ingresses:
        for host in hosts:
            served.setdefault(ingress_host_key(host), set()).add(namespace)
    return {key: ",".join(sorted(namespaces)) for key, namespaces in sorted(served.items())}


def hosts_config_map(data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": INGRESS_HOSTS_CONFIGMAP,
            "namespace": SYSTEM_NAMESPACE,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN},
        },
        "data": data,
    }


class IngressHostsController:
    def __init__(self, client: AsyncClient):
        self.client = client
        self.ingresses = Informer(client, Ingress, name="ingresses", transform=rule_hosts)
        self.queue = WorkQueue("ingress-hosts", self.reconcile, workers=1)
        self.ingresses.on_change(enqueue(self.queue, key=lambda key: _KEY, delay=COALESCE_SECONDS, when=changed))
        self._written: dict[str, str] | None = None

    def tasks(self):
        return [self.ingresses.run(), self._run()]

    async def _run(self):
        await self.ingresses.synced.wait()
        self.queue.add(_KEY)
        await self.queue.run()

    async def reconcile(self, key) -> None:
        cache = self.ingresses.cache
        data = served_hosts((namespace or "", cache[(namespace, name)]) for namespace, name in list(cache))
        if data == self._written:
            return
        body = hosts_config_map(data)
        await self.client.apply(ConfigMap.from_dict(body), field_manager=MANAGER_COMPONENT, force=True)
        self._written = data
