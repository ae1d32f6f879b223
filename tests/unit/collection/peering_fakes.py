"""In-memory clusters, a fake module and the peering parameters and inventories the peering tests share."""

from __future__ import annotations

import base64
import copy
import sys

import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils import kube
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    LABEL_TYPE,
    TYPE_VIRTUAL_NODE,
    tenant_namespace,
)
from ansible_collections.catamaran.federation.plugins.module_utils.peering import CONSUMER_CRDS, CRD_API, PROVIDER_CRDS


def _fields_match(obj, selector):
    """The field selectors the modules use: metadata.name=<name> and spec.nodeName=<node>, as the API server reads
    them."""
    for term in (selector or "").split(","):
        if not term:
            continue
        path, value = term.split("=", 1)
        found = obj
        for key in path.split("."):
            found = (found or {}).get(key)
        if found != value:
            return False
    return True


def _matches(obj, selector):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in (selector or "").split(","):
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        else:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
    return True


INSTALLED_CRDS = [
    yaml.safe_load(path.read_text()) for path in sorted((REPO_ROOT / "controller" / "crds").glob("*.yaml"))
]


class FakeCluster:
    """A cluster in memory: apply stores the object as sent (the server's dry run would add the same defaults to the
    live object and the planned one alike), paths come from kube.KINDS as a real Cluster builds them."""

    def __init__(self, label, objects=(), crds=True):
        self.label = label
        self.server = f"https://{label}.example:6443"
        self.ca_data = None
        self.objects = {}
        self.deleted = []
        self.propagations = []
        # The checkout's CRDs are served, as the crds role installs them before any peering (crds=False: none); each
        # cluster its own copies, so a test that serves a previous release's schema changes no other test's.
        self.crds = {crd["metadata"]["name"]: copy.deepcopy(crd) for crd in INSTALLED_CRDS} if crds else {}
        for obj in objects:
            self._store(obj)

    def _store(self, obj):
        meta = obj["metadata"]
        self.objects[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = copy.deepcopy(obj)

    def path(self, api_version, kind, name=None, namespace=None):
        return kube.Cluster.path(self, api_version, kind, name, namespace)

    def get(self, api_version, kind, name, namespace=None):
        self.path(api_version, kind, name, namespace)
        if kind == "CustomResourceDefinition":
            return copy.deepcopy(self.crds.get(name))
        return copy.deepcopy(self.objects.get((api_version, kind, namespace, name)))

    def list(self, api_version, kind, namespace=None, labels=None, fields=None):
        return [
            copy.deepcopy(obj)
            for (api, k, ns, _), obj in sorted(self.objects.items(), key=lambda item: str(item[0]))
            if (api, k) == (api_version, kind)
            and namespace in (None, ns)
            and _matches(obj, labels)
            and _fields_match(obj, fields)
        ]

    def apply(self, obj, dry_run=False, force=True):
        meta = obj["metadata"]
        self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        obj = self._with_node_ports(obj)
        if not dry_run:
            self._store(obj)
        return copy.deepcopy(obj)

    def _with_node_ports(self, obj):
        """As the API server does, a dry run included: a NodePort or LoadBalancer Service's port without a node port
        keeps the one it has, else gets the lowest free one from 30000."""
        if obj["kind"] != "Service" or obj["spec"].get("type") not in ("NodePort", "LoadBalancer"):
            return obj
        obj = copy.deepcopy(obj)
        current = self.get("v1", "Service", obj["metadata"]["name"], obj["metadata"].get("namespace")) or {}
        kept = {p["port"]: p.get("nodePort") for p in (current.get("spec") or {}).get("ports") or []}
        taken = {
            p.get("nodePort") for service in self.list("v1", "Service") for p in service["spec"].get("ports") or []
        }
        for port in obj["spec"]["ports"]:
            if not port.get("nodePort"):
                port["nodePort"] = kept.get(port["port"]) or min(set(range(30000, 32768)) - taken)
        return obj

    def delete(
        self, api_version, kind, name, namespace=None, dry_run=False, grace_period=None, propagation="Background"
    ):
        self.path(api_version, kind, name, namespace)
        if not dry_run:
            self.objects.pop((api_version, kind, namespace, name), None)
            self.deleted.append((kind, name))
            self.propagations.append(propagation)
        return True

    def merge_patch(self, api_version, kind, name, patch, namespace=None, dry_run=False, subresource=None):
        """A JSON merge patch (RFC 7386) of a stored object."""

        def merged(target, change):
            if not isinstance(change, dict):
                return copy.deepcopy(change)
            result = dict(target) if isinstance(target, dict) else {}
            for key, value in change.items():
                if value is None:
                    result.pop(key, None)
                else:
                    result[key] = merged(result.get(key), value)
            return result

        current = self.get(api_version, kind, name, namespace)
        result = merged(current, patch)
        if not dry_run:
            self._store(result)
        return copy.deepcopy(result)

    def watch_list_until(self, api_version, kind, namespace, done, timeout, labels=None, fields=None):
        items = self.list(api_version, kind, namespace, labels, fields)
        return done(items), items

    def watch_until(self, api_version, kind, name, namespace, done, timeout):
        """No time passes: the object as it is now decides."""
        obj = self.get(api_version, kind, name, namespace)
        return done(obj), obj


class FakeAnsible:
    def __init__(self):
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)


class FakeModule:
    def __init__(self, check_mode=True):
        self.check_mode = check_mode
        self.ansible = FakeAnsible()

    def hide(self, *values):
        pass


def node(name, pod_cidrs=None, pod_cidr=None, virtual=False):
    spec = {}
    if pod_cidrs:
        spec["podCIDRs"] = pod_cidrs
    if pod_cidr:
        spec["podCIDR"] = pod_cidr
    labels = {LABEL_TYPE: TYPE_VIRTUAL_NODE} if virtual else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec}


def tenant_credential(consumer_id="c1"):
    """What the provider's manager would have minted: the module waits for it before storing it on the consumer."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "catamaran-tenant-credential", "namespace": f"catamaran-tenant-{consumer_id}", "uid": "u"},
        "data": {"token": base64.b64encode(b"token").decode()},
    }


def crd(name):
    return {"apiVersion": CRD_API, "kind": "CustomResourceDefinition", "metadata": {"name": name}}


def clusters(consumer_nodes=(), provider_objects=()):
    consumer = FakeCluster("c1", [crd(n) for n in CONSUMER_CRDS] + list(consumer_nodes))
    provider = FakeCluster("p1", [crd(n) for n in PROVIDER_CRDS] + list(provider_objects))
    return consumer, provider


def params(**extra):
    return {"consumer_id": "c1", "provider_id": "p1", "provider": {}, "wait_timeout": 5, **extra}


OFFER = f"p1: ResourceOffer {tenant_namespace('c1')}/resources"


def inventory(allowances=None, **entry):
    provider = {"catamaran_cluster_id": "cluster-2", "catamaran_kubeconfig": "/k2"}
    if allowances is not None:
        provider["catamaran_tenant_allowances"] = allowances
    return {
        "h1": {
            "catamaran_cluster_id": "cluster-1",
            "catamaran_kubeconfig": "/k1",
            "catamaran_peerings": [{"provider": "cluster-2", **entry}],
        },
        "h2": provider,
    }
