"""The red team's case of issue 37, shared by the tests of each part that acts on twin claims.

Namespace `victim` of consumer `c1` holds twin `victim-c1`; namespace `evil` asks for the same remote name
(SelectedName naming it, or EnforceSameName in a namespace named `victim-c1`).
"""

from __future__ import annotations

from catamaran.constants import tenant_namespace

CONSUMER = "c1"
TWIN = "victim-c1"


def offloading(namespace: str, created: str = "2024-01-01T00:00:00Z", deleting: bool = False, **spec) -> dict:
    meta = {"name": "offloading", "namespace": namespace, "creationTimestamp": created, "uid": f"uid-{namespace}"}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-01T00:00:00Z"
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": meta,
        "spec": spec,
    }


def selected_name(namespace: str, remote: str = TWIN, created: str = "2024-02-01T00:00:00Z") -> dict:
    return offloading(namespace, created, namespaceMappingStrategy="SelectedName", remoteNamespaceName=remote)


VICTIM = offloading("victim", "2024-01-01T00:00:00Z")  # DefaultName: victim-c1
EVIL = selected_name("evil")  # younger, same remote name
SAME_NAME = offloading(TWIN, "2024-02-01T00:00:00Z", namespaceMappingStrategy="EnforceSameName")


class Recorder:
    """Both clusters as the twin manager and pod controller write to them."""

    def __init__(self):
        self.calls: list[tuple] = []

    async def create(self, obj, **kwargs):
        self.calls.append(("create", getattr(obj, "kind", None), obj))
        return obj

    async def patch(self, resource, name, body, **kwargs):
        self.calls.append(("patch", resource, name, kwargs.get("namespace"), body))

    async def delete(self, resource, name, **kwargs):
        self.calls.append(("delete", resource, name, kwargs.get("namespace")))

    async def apply(self, obj, **kwargs):
        self.calls.append(("apply", getattr(obj, "kind", None), obj))

    async def list(self, resource, **kwargs):
        for _ in ():
            yield


def add_offloading(manager, namespace: str, body: dict) -> None:
    manager.offloadings._store((namespace, "offloading"), body)
    manager._offloading_changed("ADDED", (namespace, "offloading"), body, None)


def hold_twin(manager, origin: str, name: str = TWIN, phase: str = "Ready") -> None:
    request = {
        "metadata": {"name": name, "namespace": tenant_namespace(CONSUMER)},
        "spec": {"originNamespace": origin},
        "status": {"phase": phase},
    }
    manager.requests._store((tenant_namespace(CONSUMER), name), request)


TENANT = tenant_namespace(CONSUMER)


def twin_namespace(origin: str | None) -> dict:
    annotations = {"catamaran.io/twin-of": f"{TENANT}/{TWIN}"}
    if origin is not None:
        annotations["catamaran.io/origin-namespace"] = origin
    return {"metadata": {"name": TWIN, "labels": {"catamaran.io/managed-by": "catamaran"}, "annotations": annotations}}
