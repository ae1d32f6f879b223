"""Small helpers over plain API objects (dicts). Pure."""

from __future__ import annotations

import datetime
from typing import Any

from .constants import ANNOTATION_DELETION_GRACE, ANNOTATION_RECREATIONS


def as_dict(obj) -> dict:
    """lightkube models and generic resources alike, as the API's JSON form."""
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def reference(obj: dict) -> dict:
    meta = obj["metadata"]
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta["name"],
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }


def set_condition(conditions: list[dict], kind: str, status: str, reason: str, message: str = "") -> list[dict]:
    """Conditions with `kind` set; its transition time moves only when the status changes."""
    result = [c for c in conditions if c["type"] != kind]
    previous = next((c for c in conditions if c["type"] == kind), None)
    since = previous["lastTransitionTime"] if previous and previous["status"] == status else now_iso()
    result.append({"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": since})
    return sorted(result, key=lambda c: c["type"])


def condition(obj_status: dict | None, kind: str) -> dict | None:
    return next((c for c in (obj_status or {}).get("conditions") or [] if c["type"] == kind), None)


def same_conditions(a: list[dict], b: list[dict]) -> bool:
    def strip(conditions):
        return sorted((c["type"], c["status"], c.get("reason", ""), c.get("message", "")) for c in conditions)

    return strip(a or []) == strip(b or [])


def merge_patch(old: dict, new: dict) -> dict:
    """The JSON merge patch that turns `old` into `new` (removed keys become null)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        previous = old.get(key)
        if isinstance(value, dict) and isinstance(previous, dict):
            nested = merge_patch(previous, value)
            if nested:
                patch[key] = nested
        elif value != previous:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def status_patch(current: dict, wanted: dict) -> dict:
    """A merge patch setting exactly the `wanted` top-level status fields, leaving the others alone."""
    return merge_patch({key: current[key] for key in wanted if key in current}, wanted)


def changeable_pod_fields(template: dict) -> dict:
    """What of a running pod may still change and the remote pod follows: labels, annotations (the downward API
    shows them) and activeDeadlineSeconds. The rest of a pod's spec is immutable, ephemeral containers aside."""
    meta = template.get("metadata") or {}
    return {
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "activeDeadlineSeconds": (template.get("spec") or {}).get("activeDeadlineSeconds"),
    }


def container_resources(spec: dict) -> dict[str, dict]:
    """Each container's resources by name, the part of a running pod's spec an in-place resize (`pods/resize`)
    changes: its containers' and its sidecars' (init containers that keep running); other init containers never
    resize."""
    containers = [
        *(spec.get("containers") or []),
        *(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"),
    ]
    return {c["name"]: c.get("resources") or {} for c in containers}


def deletion_grace(annotations: dict | None) -> int | None:
    """The grace period a ShadowPod's ANNOTATION_DELETION_GRACE asks for; None when unset or not a whole number."""
    value = (annotations or {}).get(ANNOTATION_DELETION_GRACE) or ""
    return int(value) if value.isdecimal() and value.isascii() else None


def recreations_stamp(annotations: dict | None) -> int | None:
    """How many pods of its ShadowPod were gone before this one, as the manager stamped it on the pod
    (ANNOTATION_RECREATIONS); None when unset or not a whole number (of at most nine digits)."""
    value = (annotations or {}).get(ANNOTATION_RECREATIONS) or ""
    return int(value) if value.isdecimal() and value.isascii() and len(value) <= 9 else None


def material_status(status: dict) -> tuple:
    """What the consumer shows of a pod's status; a scheduled-but-pending pod adds nothing to it."""
    conditions = tuple(
        sorted(
            (c["type"], c["status"], c.get("reason") or "")
            for c in status.get("conditions") or []
            if not (c["type"] == "PodScheduled" and c["status"] == "True")
        )
    )
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
        *(status.get("ephemeralContainerStatuses") or []),
    ]
    containers = tuple(
        (
            c.get("name"),
            c.get("ready"),
            c.get("restartCount"),
            tuple(sorted((c.get("state") or {}).items(), key=str)),
            c.get("resources"),  # what an in-place resize changed, and what the kubelet allocated for it
            c.get("allocatedResources"),
        )
        for c in statuses
    )
    return (status.get("phase") or "Pending", status.get("podIP"), status.get("reason"), conditions, containers)
