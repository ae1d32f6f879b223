"""What the consumer takes from a provider's reports: bounded text, and pod status bounded by the local spec. Pure.

A provider's administrator can write anything into the ShadowPod status, the Events of its twin namespaces,
its ResourceOffer and the pod counters its manager serves. Text copied onto the consumer's objects is bounded
here; pod IPs are checked against the consumer's own ranges (vk/ip_translation.py), since the consumer's
EndpointSlices are built from them; a pod's reported status is bounded by the local pod's spec (which containers,
their images) and by what the API takes (restart counts, condition types, field types), so that no report can
freeze the local pod's status writes; usage figures are finite, non-negative and bounded by ceilings
(vk/reported_usage.py). What is refused or clamped is returned as a `Refusal`, which the virtual kubelet reports as
a Warning Event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .. import quantities
from ..constants import DEFAULT_CONTAINER_REQUESTS

# Kubernetes' reason convention: one CamelCase word. A reason that is not one is replaced by PROVIDER_REASON.
REASON_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9]{0,127}")
PROVIDER_REASON = "ProviderReported"
# Messages copied from a provider: at most this many characters, the marker included when cut.
MESSAGE_LIMIT = 1024
TRUNCATION_MARK = "… (truncated)"
# Control characters (but tab and newline, which the kubelet's own messages use) and the invisible ones that
# reorder or hide text in a terminal: bidirectional overrides and isolates, zero-width marks, byte order mark.
# Lone surrogates are dropped too: they cannot be sent as UTF-8.
_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]"
)


def sanitised_reason(reason: object) -> str:
    """A provider's reason if it follows Kubernetes' convention, else PROVIDER_REASON; no reason stays empty."""
    if not reason:
        return ""
    return reason if isinstance(reason, str) and REASON_PATTERN.fullmatch(reason) else PROVIDER_REASON


def sanitised_message(message: object) -> str:
    """A message without control characters, cut to MESSAGE_LIMIT characters with TRUNCATION_MARK."""
    if not message:
        return ""
    # Cut before cleaning, so a huge message costs no more than a long one.
    text = _UNPRINTABLE.sub("", str(message)[: 4 * MESSAGE_LIMIT])
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[: MESSAGE_LIMIT - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def bounded_text(reported: object) -> dict:
    """A condition, container state or status from the provider, its reason and message bounded."""
    if not isinstance(reported, dict):
        return {}
    bounded = dict(reported)
    if "reason" in bounded:
        bounded["reason"] = sanitised_reason(bounded["reason"])
    if "message" in bounded:
        bounded["message"] = sanitised_message(bounded["message"])
    return bounded


# -- a pod's status as its provider reports it ----------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A value a provider reported that the consumer refused or clamped. `kind` is the reason of the Warning Event
    the virtual kubelet records (once per pod and kind); `message` says what was reported and what is shown."""

    kind: str
    message: str


# The kinds of refusal, each a Warning Event's reason on the local pod.
CONTAINER_STATUS_REFUSED = "ContainerStatusRefused"  # a status of a container the local pod's spec does not have
IMAGE_REPLACED = "ContainerImageReplaced"  # another image than the spec's: the spec's is shown
RESTART_COUNT_CLAMPED = "RestartCountClamped"
POD_CONDITION_REFUSED = "PodConditionRefused"
STATUS_FIELD_REFUSED = "StatusFieldRefused"  # a field of a type or size the API would not take

# The restart count a local container shows at most: the provider's count plus its pod's recreations, clamped to
# this. It is about ten years of a container crash-looping at the kubelet's longest back-off (five minutes), so no
# real count reaches it; int32, the field's type, holds over 2000 times it, so neither a recreation more nor a sum over
# many containers (as dashboards make) overflows.
RESTART_COUNT_CEILING = 1_000_000
# imageID and containerID: a runtime's are a digest reference or `<runtime>://<64 hex digits>`, under 200 characters.
IDENTIFIER_LIMIT = 512
# The pod condition types a provider's kubelet and control plane set (core/v1 PodConditionType) that the local pod
# shows, each once at most. Any other type is refused: readiness gates' and other controllers' conditions on the
# local pod are the consumer's to set (a provider could otherwise open a gate or fake a controller's verdict), and a
# provider's custom types mean nothing on the consumer. A fixed set also bounds the list.
PROVIDER_POD_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "DisruptionTarget",
    "PodResizePending",
    "PodResizeInProgress",
)
# Reported by every provider, and not refused, but the local pod shows the consumer's own.
LOCAL_POD_CONDITIONS = ("PodScheduled",)
CONDITION_STATUSES = ("True", "False", "Unknown")
# Each list of container statuses, and the list of the local spec whose containers it may name.
CONTAINER_STATUS_KINDS = {
    "initContainerStatuses": "initContainers",
    "containerStatuses": "containers",
    "ephemeralContainerStatuses": "ephemeralContainers",
}
# metav1.Time as the API writes it (RFC 3339); anything else would fail the local pod's status patch.
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})"
)
_INT32 = range(-(2**31), 2**31)
# The resources a container's reported resources may name besides its spec's: the provider's terms may give defaults
# of these (provider/terms.py, as a LimitRange would).
RUNTIME_RESOURCES = tuple(DEFAULT_CONTAINER_REQUESTS)
# The longest resource quantity a container status shows (the API's are far shorter).
_QUANTITY_LIMIT = 64
# How much of a provider's value a message quotes.
_QUOTED_LIMIT = 60
# How many refused field names one message names.
_FIELDS_SHOWN = 3


class _Refused:
    """A field's check refused its value."""


_REFUSED = _Refused()


def _time(value: object) -> object:
    return value if isinstance(value, str) and _TIMESTAMP.fullmatch(value) else _REFUSED


def _int32(value: object) -> object:
    return value if isinstance(value, int) and not isinstance(value, bool) and value in _INT32 else _REFUSED


def _identifier(value: object) -> object:
    ok = isinstance(value, str) and len(value) <= IDENTIFIER_LIMIT and not _UNPRINTABLE.search(value)
    return value if ok else _REFUSED


def _boolean(value: object) -> object:
    return value if isinstance(value, bool) else _REFUSED


Check = Callable[[object], object]
_CONDITION_FIELDS: dict[str, Check] = {
    "reason": sanitised_reason,
    "message": sanitised_message,
    "lastProbeTime": _time,
    "lastTransitionTime": _time,
}
# What a local container status holds of the reported one, besides its name, image and restart count.
_CONTAINER_FIELDS: dict[str, Check] = {
    "imageID": _identifier,
    "containerID": _identifier,
    "ready": _boolean,
    "started": _boolean,
}
_STATE_FIELDS: dict[str, dict[str, Check]] = {
    "waiting": {"reason": sanitised_reason, "message": sanitised_message},
    "running": {"startedAt": _time},
    "terminated": {
        "exitCode": _int32,
        "signal": _int32,
        "reason": sanitised_reason,
        "message": sanitised_message,
        "startedAt": _time,
        "finishedAt": _time,
        "containerID": _identifier,
    },
}


def quoted_value(value: object) -> str:
    """A provider's value in a message: cut, and quoted so that no character of it is invisible."""
    text = value if isinstance(value, str) else repr(value)
    cut = text[:_QUOTED_LIMIT]
    return repr(cut) + ("…" if len(text) > _QUOTED_LIMIT else "")


def _checked(reported: Mapping, checks: Mapping[str, Check]) -> tuple[dict, list[str]]:
    """The fields `checks` names, each as its check shows it (a null one is left out); the names of those refused."""
    shown, refused = {}, []
    for name, check in checks.items():
        value = reported.get(name)
        if value is None:
            continue
        checked = check(value)
        if checked is _REFUSED:
            refused.append(name)
        else:
            shown[name] = checked
    return shown, refused


def _fields_refused(what: str, names: list[str]) -> Refusal:
    shown = ", ".join(names[:_FIELDS_SHOWN]) + (
        f" and {len(names) - _FIELDS_SHOWN} more" if len(names) > _FIELDS_SHOWN else ""
    )
    return Refusal(
        STATUS_FIELD_REFUSED, f"reported {shown} of {what}, of a type or size the API does not take: not shown"
    )


@dataclass(frozen=True)
class AcceptedReport:
    """What the local pod shows of its remote pod's status, and what was refused or clamped on the way."""

    conditions: list[dict]
    container_statuses: dict[str, list[dict]]  # by status list (CONTAINER_STATUS_KINDS)
    start_time: str | None
    refusals: list[Refusal] = field(default_factory=list)


def accepted_report(remote: Mapping, spec: Mapping, recreations: object) -> AcceptedReport:
    """The remote pod's status (`remote`, from the ShadowPod) as the local pod with `spec` may show it, its pod
    recreated `recreations` times: its conditions (accepted_conditions), its containers' statuses
    (accepted_container_statuses) and its start time."""
    conditions, refusals = accepted_conditions(remote.get("conditions"))
    statuses = {}
    for kind, spec_kind in CONTAINER_STATUS_KINDS.items():
        statuses[kind], refused = accepted_container_statuses(kind, remote.get(kind), spec.get(spec_kind), recreations)
        refusals += refused
    start_time = remote.get("startTime")
    if start_time is not None and _time(start_time) is _REFUSED:
        refusals.append(_fields_refused("the pod", ["startTime"]))
        start_time = None
    return AcceptedReport(conditions, statuses, start_time, refusals)


def accepted_conditions(reported: object) -> tuple[list[dict], list[Refusal]]:
    """The provider's pod conditions the local pod shows: of the PROVIDER_POD_CONDITIONS types, each type once, with
    a status the API takes, reasons and messages bounded; and the refusals (LOCAL_POD_CONDITIONS are left quietly)."""
    accepted: list[dict] = []
    refusals: list[Refusal] = []
    for condition in reported if isinstance(reported, list) else []:
        kind = condition.get("type") if isinstance(condition, dict) else None
        if kind in LOCAL_POD_CONDITIONS:
            continue
        if kind not in PROVIDER_POD_CONDITIONS or any(c["type"] == kind for c in accepted):
            refusals.append(
                Refusal(
                    POD_CONDITION_REFUSED,
                    f"reported pod condition {quoted_value(kind)}, not one a kubelet sets or one already reported:"
                    " not shown (readiness gates' conditions are the consumer's own)",
                )
            )
            continue
        if condition.get("status") not in CONDITION_STATUSES:
            refusals.append(
                Refusal(
                    POD_CONDITION_REFUSED,
                    f"reported pod condition {kind} with status {quoted_value(condition.get('status'))}, not one of"
                    f" {', '.join(CONDITION_STATUSES)}: not shown",
                )
            )
            continue
        shown, refused = _checked(condition, _CONDITION_FIELDS)
        if refused:
            refusals.append(_fields_refused(f"pod condition {kind}", refused))
        accepted.append({"type": kind, "status": condition["status"], **shown})
    return accepted, refusals


def accepted_container_statuses(
    kind: str, reported: object, spec_containers: object, recreations: object
) -> tuple[list[dict], list[Refusal]]:
    """The statuses of list `kind` the local pod shows: one per container of the local spec's list
    (`spec_containers`), with the spec's image, its restart count bounded (shown_restart_count) and its fields of the
    types the API takes; and the refusals."""
    containers = [c for c in spec_containers if isinstance(c, dict)] if isinstance(spec_containers, list) else []
    images = {c.get("name"): c.get("image") or "" for c in containers}
    resource_names = {c.get("name"): _resource_names(c) for c in containers}
    accepted: list[dict] = []
    refusals: list[Refusal] = []
    for entry in reported if isinstance(reported, list) else []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name not in images or any(s["name"] == name for s in accepted):
            refusals.append(
                Refusal(
                    CONTAINER_STATUS_REFUSED,
                    f"reported a status of container {quoted_value(name)} in {kind}, not a container of the pod's"
                    " spec or one already reported: not shown",
                )
            )
            continue
        status, refused = _container_status(entry, images[name], resource_names[name], recreations)
        accepted.append(status)
        refusals += refused
    return accepted, refusals


def _resource_names(container: Mapping) -> frozenset[str]:
    """The resources a container's reported status may name: those its spec requests or limits, and those the
    provider's terms may give it defaults of (RUNTIME_RESOURCES)."""
    resources = container.get("resources")
    named = (
        (name for kind in ("requests", "limits") for name in resources.get(kind) or {})
        if isinstance(resources, dict)
        else ()
    )
    return frozenset((*RUNTIME_RESOURCES, *named))


def _amounts(value: object, names: frozenset[str]) -> object:
    """Resource amounts (allocatedResources, or a resources' requests or limits) of the spec's resources, each a
    quantity the API takes."""
    if not isinstance(value, dict) or not value:
        return _REFUSED
    for name, amount in value.items():
        if name not in names or not isinstance(amount, str) or len(amount) > _QUANTITY_LIMIT:
            return _REFUSED
        try:
            quantities.parse(amount)
        except ValueError:
            return _REFUSED
    return dict(value)


def _container_resources(value: object, names: frozenset[str]) -> object:
    """A container's reported `resources` (what the runtime applied, in-place resizes included): its requests and
    limits of the spec's resources."""
    if not isinstance(value, dict) or set(value) - {"requests", "limits"}:
        return _REFUSED
    shown = {}
    for kind in ("requests", "limits"):
        if value.get(kind) is not None:
            amounts = _amounts(value[kind], names)
            if amounts is _REFUSED:
                return _REFUSED
            shown[kind] = amounts
    return shown


def _container_status(
    entry: dict, image: str, resource_names: frozenset[str], recreations: object
) -> tuple[dict, list[Refusal]]:
    name = entry["name"]
    checks: dict[str, Check] = {
        **_CONTAINER_FIELDS,
        "resources": lambda value: _container_resources(value, resource_names),
        "allocatedResources": lambda value: _amounts(value, resource_names),
    }
    shown, refused = _checked(entry, checks)
    refusals = []
    reported_image = entry.get("image")
    if reported_image is not None and not same_image(reported_image, image):
        refusals.append(
            Refusal(
                IMAGE_REPLACED,
                f"reported image {quoted_value(reported_image)} for container {name!r}, not its spec's {image!r}:"
                " the spec's is shown",
            )
        )
    count, clamped = shown_restart_count(entry.get("restartCount"), recreations)
    if clamped:
        refusals.append(
            Refusal(
                RESTART_COUNT_CLAMPED,
                f"reported restartCount {quoted_value(entry.get('restartCount'))} for container {name!r} and"
                f" {quoted_value(recreations)} recreations of its pod: shown as {count} (whole numbers from 0 to"
                f" {RESTART_COUNT_CEILING})",
            )
        )
    status = {"name": name, "image": image, "imageID": "", "ready": False, **shown, "restartCount": count}
    for which in ("state", "lastState"):
        if entry.get(which) is not None:
            status[which], bad = _state(entry[which])
            refused += [f"{which}.{field}" for field in bad]
    if refused:
        refusals.append(_fields_refused(f"container {name!r}", refused))
    return status, refusals


def _state(reported: object) -> tuple[dict, list[str]]:
    """A container state's `waiting`, `running` or `terminated`, each with the fields it has in the API."""
    if not isinstance(reported, dict):
        return {}, ["(not an object)"]
    shown, refused = {}, []
    for which, value in reported.items():
        checks = _STATE_FIELDS.get(which)
        if checks is None or not isinstance(value, dict):
            refused.append(quoted_value(which))
            continue
        shown[which], bad = _checked(value, checks)
        refused += [f"{which}.{name}" for name in bad]
    return shown, refused


def shown_restart_count(reported: object, recreations: object) -> tuple[int, bool]:
    """A local container's restart count: the provider's count plus its pod's recreations, each a whole number not
    below 0 (else 0), the sum at most RESTART_COUNT_CEILING; and whether anything was clamped."""
    count, bad_count = _whole(reported)
    again, bad_recreations = _whole(recreations)
    total = count + again
    return min(total, RESTART_COUNT_CEILING), bad_count or bad_recreations or total > RESTART_COUNT_CEILING


def _whole(value: object) -> tuple[int, bool]:
    """A count as a whole number not below 0, and whether it was not one (missing is 0)."""
    if value is None:
        return 0, False
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, False
    return 0, True


def same_image(reported: object, spec: str) -> bool:
    """Could a runtime report `reported` for a container of image `spec`? It reports the repository normalised
    (`nginx` as `docker.io/library/nginx`), and may name the image by another tag or a digest of it (one of the image's
    references), or by its bare ID: so only another repository is another image."""
    if not isinstance(reported, str):
        return False
    return reported == spec or bool(_IMAGE_ID.fullmatch(reported)) or _repository(reported) == _repository(spec)


_IMAGE_ID = re.compile(r"(sha256:)?[0-9a-f]{64}")


def _repository(image: str) -> str:
    """The repository of an image reference with its registry, as Docker's normalisation reads it."""
    reference = image.partition("@")[0]
    slash = reference.rfind("/")
    if ":" in reference[slash + 1 :]:
        reference = reference.rpartition(":")[0]
    first, _, rest = reference.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = "docker.io", reference
    if first == "index.docker.io":
        first = "docker.io"
    if first == "docker.io" and "/" not in rest:
        rest = f"library/{rest}"
    return f"{first}/{rest}"
