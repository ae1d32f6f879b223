"""PersistentVolumeClaims of pods bound to this virtual node, reflected with the peering's storage class.

A claim of the virtual storage class waits for its first pod (WaitForFirstConsumer); once the scheduler
picks this virtual node for that pod it names the node on the claim, and the claim is this reflector's:
the provider gets a copy (its own class provisions it), and volumes.py binds a local PersistentVolume
that stands for it. A copy holds data, so it is never deleted to correct it, only when its claim goes.
"""

from __future__ import annotations

from lightkube.resources.core_v1 import PersistentVolumeClaim

from ...constants import VIRTUAL_STORAGE_CLASS
from .kind import Context, ReflectedKind, present

SELECTED_NODE = "volume.kubernetes.io/selected-node"
# The consumer's binding and provisioning state: on the copy the provider's controllers would take it
# for their own (a claim marked bind-completed without a volume is Lost).
BINDING_ANNOTATIONS = ("pv.kubernetes.io/", "volume.kubernetes.io/", "volume.beta.kubernetes.io/")


def claimed_here(claim: dict, own_nodes: frozenset[str] | set[str]) -> bool:
    """A claim of the virtual class the scheduler meant for one of the peering's virtual nodes."""
    spec, meta = claim.get("spec") or {}, claim.get("metadata") or {}
    return (
        spec.get("storageClassName") == VIRTUAL_STORAGE_CLASS
        and (meta.get("annotations") or {}).get(SELECTED_NODE) in own_nodes
    )


class PersistentVolumeClaims(ReflectedKind):
    setting = "persistentVolumeClaims"
    resource = PersistentVolumeClaim
    api_version = "v1"
    kind = "PersistentVolumeClaim"
    recreates_on_immutable = False
    keeps_copies_on_policy_change = True

    def skipped(self, local: dict, context: Context) -> bool:
        return not claimed_here(local, context.own_nodes)

    def metadata(self, obj: dict, context: Context) -> dict:
        metadata = super().metadata(obj, context)
        annotations = {
            k: v for k, v in metadata.pop("annotations", {}).items() if not k.startswith(BINDING_ANNOTATIONS)
        }
        return {**metadata, **({"annotations": annotations} if annotations else {})}

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        spec = obj.get("spec") or {}
        requests = (spec.get("resources") or {}).get("requests") or {}
        if local:
            storage_class = context.settings.storage_class
        else:  # unconfigured, the provider's default class fills it in: not compared
            storage_class = spec.get("storageClassName") if context.settings.storage_class else None
        return present(
            metadata=self.metadata(obj, context),
            spec=present(
                accessModes=spec.get("accessModes"),
                resources=present(requests=present(storage=requests.get("storage"))),
                volumeMode=spec.get("volumeMode"),
                storageClassName=storage_class,
            ),
        )
