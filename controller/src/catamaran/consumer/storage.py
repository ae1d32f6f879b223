"""The consumer's virtual storage class: claims of it are provisioned on a provider by the virtual kubelet
of the node their first pod is scheduled to (vk/reflection/claims.py and volumes.py)."""

from __future__ import annotations

import asyncio
import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.storage_v1 import StorageClass

from ..constants import (
    LABEL_MANAGED_BY,
    LABEL_TYPE,
    MANAGED_BY_CATAMARAN,
    TYPE_VIRTUAL_NODE,
    VIRTUAL_STORAGE_CLASS,
    VIRTUAL_STORAGE_PROVISIONER,
)
from ..logs import fields
from .offloading import FIELD_MANAGER

log = logging.getLogger(__name__)


def virtual_storage_class() -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": VIRTUAL_STORAGE_CLASS, "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}},
        "provisioner": VIRTUAL_STORAGE_PROVISIONER,
        # The claim waits for its pod, so the scheduler picks the virtual node first, then the claim follows it.
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
        # Only virtual nodes can provide it: a pod with such a claim is never placed on a physical node.
        "allowedTopologies": [{"matchLabelExpressions": [{"key": LABEL_TYPE, "values": [TYPE_VIRTUAL_NODE]}]}],
    }


async def keep_virtual_storage_class(client: AsyncClient) -> None:
    """Apply the class once the API server takes it; the manager's next start restores it if deleted."""
    while True:
        try:
            await client.apply(StorageClass.from_dict(virtual_storage_class()), field_manager=FIELD_MANAGER, force=True)
            return
        except ApiError as error:
            log.warning(
                "cannot apply the virtual storage class",
                extra=fields(storage_class=VIRTUAL_STORAGE_CLASS, error=error.status.message, retry_in=30),
            )
            await asyncio.sleep(30)
