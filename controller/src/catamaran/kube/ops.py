"""API calls every reconciler makes the same way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from ..objects import as_dict
from .clients import generic_client


@contextlib.contextmanager
def tolerating(*codes: int):
    """Swallow API errors with these status codes: 404 when an object is already gone, 409 already there."""
    try:
        yield
    except ApiError as error:
        if error.status.code not in codes:
            raise


async def patch_status(client: AsyncClient, resource, meta: dict, status: dict, *, if_unchanged: bool = False):
    """Merge-patch an object's status subresource and return the object as written (None: deleted meanwhile, which is
    no error). `if_unchanged`: only if it is still at meta's resourceVersion (409 otherwise), when what is written
    comes from fields others may set."""
    body: dict = {"status": status}
    if if_unchanged:
        body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
    with tolerating(404):
        return await client.patch(
            resource.Status,
            meta["name"],
            body,
            namespace=meta.get("namespace"),
            patch_type=PatchType.MERGE,
        )
    return None


async def delete_with_uid(client: AsyncClient, resource, name: str, namespace: str, uid: str) -> None:
    """Delete an object only if it is still the one with `uid`: 409 when another took its name meanwhile."""
    # lightkube's delete() sends no body, and preconditions travel in the DeleteOptions body.
    http = generic_client(client)
    request = http.prepare_request("delete", res=resource, name=name, namespace=namespace)
    request.data = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    response = await http.send(http.build_adapter_request(request))
    http.raise_for_status(response)


CONFLICT_RETRIES = 5


async def patch_status_if_unchanged(
    client: AsyncClient, resource, name: str, namespace: str | None, change: Callable[[dict], dict | None]
) -> dict | None:
    """Read the object, let `change(obj)` say which status fields to write (None: nothing to write) and merge-patch
    them only if the object is still at the version read, again on a conflict: writers of different conditions of one
    object (a list a merge patch replaces whole) never undo each other's. Returns the object as read before the write
    that took effect; None when it is gone or nothing was written."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            obj = as_dict(await client.get(resource, name, namespace=namespace))
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        status = change(obj)
        if status is None:
            return None
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status}
        try:
            await client.patch(resource.Status, name, body, namespace=namespace, patch_type=PatchType.MERGE)
            return obj
        except ApiError as error:
            if error.status.code != 409 or attempt == CONFLICT_RETRIES - 1:
                raise
    return None
