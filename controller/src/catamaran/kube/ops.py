"""API calls every reconciler makes the same way."""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType


async def patch_status(client: AsyncClient, resource, meta: dict, status: dict) -> None:
    """Merge-patch an object's status subresource; an object deleted meanwhile is no error."""
    try:
        await client.patch(
            resource.Status,
            meta["name"],
            {"status": status},
            namespace=meta.get("namespace"),
            patch_type=PatchType.MERGE,
        )
    except ApiError as error:
        if error.status.code != 404:
            raise
