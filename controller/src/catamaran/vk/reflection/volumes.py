"""Local PersistentVolumes that stand for the provider's: the consumer's scheduler binds pods to them.

For each claim reflected to the provider (claims.py) this creates a PersistentVolume pre-bound to the
claim, with node affinity to this virtual node, so the claim binds and the pod's scheduling completes;
the pod itself runs on the provider with the copy of the claim. When the claim is deleted the volume is
Released, and, its reclaim policy being Delete, removed here (this virtual kubelet is its provisioner).
"""

from __future__ import annotations

import logging

from lightkube.resources.core_v1 import PersistentVolume

from ...constants import LABEL_VIRTUAL_VOLUME_NODE, VIRTUAL_STORAGE_CLASS, VIRTUAL_STORAGE_PROVISIONER
from ...kube.informer import Informer, enqueue
from ...kube.ops import tolerating
from ...kube.workqueue import WorkQueue
from ...logs import fields
from ...objects import as_dict
from ..context import PeeringContext
from ..namespaces import TwinManager
from .claims import SELECTED_NODE, claimed_here
from .reflector import Reflector

log = logging.getLogger(__name__)
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def volume_name(claim: dict) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def volume_for(claim: dict, peering_node: str, provider_id: str, twin: str) -> dict:
    """The local PersistentVolume standing for the provider's copy of `claim`, bound to the virtual node its pod was
    scheduled to (the pool whose provider nodes hold the data) and labelled with the peering's own node name, which
    names the peering whatever its pools. Pure."""
    meta, spec = claim["metadata"], claim["spec"]
    node_name = (meta.get("annotations") or {}).get(SELECTED_NODE) or peering_node
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(claim),
            "labels": {LABEL_VIRTUAL_VOLUME_NODE: peering_node},
            "annotations": {PROVISIONED_BY: VIRTUAL_STORAGE_PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": VIRTUAL_STORAGE_CLASS,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            # Never mounted here: the path only says where the data lives.
            "local": {"path": f"/catamaran/{provider_id}/{twin}/{meta['name']}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            },
        },
    }


class VirtualVolumes:
    name = "virtual-volumes"

    def __init__(self, peering: PeeringContext, twins: TwinManager, claims: Reflector):
        self.peering = peering
        self.twins = twins
        self.claims = claims
        self.volumes = Informer(
            peering.local,
            PersistentVolume,
            name="virtual-volumes",
            labels={LABEL_VIRTUAL_VOLUME_NODE: peering.node_name},
            transform=as_dict,
        )
        self.queue = WorkQueue(self.name, self.reconcile, workers=2)
        claims.local_objects.informer.on_change(enqueue(self.queue, key=lambda key: ("claim", *key)))
        self.volumes.on_change(enqueue(self.queue, key=lambda key: ("volume", key[1])))

    def tasks(self):
        return [self.volumes.run(), self._run()]

    async def _run(self):
        await self.volumes.synced.wait()
        await self.claims.local_objects.wait_synced()
        await self.queue.run()

    async def reconcile(self, key) -> float | None:
        if key[0] == "volume":
            return await self._release(key[1])
        _, namespace, name = key
        claim = self.claims.local_of(namespace, name)
        if (
            claim is None
            or not claimed_here(claim, self.peering.node_names)
            or (claim.get("spec") or {}).get("volumeName")
        ):
            return None
        twin = self.twins.ready_twin(namespace)
        if twin is None:
            self.twins.want(namespace)
            return 2.0  # the twin comes first: the pod cannot run before it
        if self.volumes.get(None, volume_name(claim)) is None:
            body = volume_for(claim, self.peering.node_name, self.peering.provider_id, twin)
            with tolerating(409):
                await self.peering.local.create(PersistentVolume.from_dict(body))
                log.info("virtual volume created", extra=fields(claim=f"{namespace}/{name}", volume=volume_name(claim)))
        return None

    async def _release(self, name: str) -> None:
        volume = self.volumes.get(None, name)
        if volume is None or (volume.get("status") or {}).get("phase") not in ("Released", "Failed"):
            return None
        with tolerating(404):
            await self.peering.local.delete(PersistentVolume, name)
            log.info("released virtual volume deleted", extra=fields(volume=name))
        return None
