"""What the consumer takes from a provider's reports, and its own addresses no provider pod IP may take. Pure.

A provider's administrator can write anything into the ShadowPod status, the Events of its twin namespaces,
its ResourceOffer and the pod counters its manager serves. Text copied onto the consumer's objects is bounded
here; pod IPs are checked against the consumer's own ranges (forge.IPTranslator), since the consumer's
EndpointSlices are built from them; a pod's reported status is bounded by the local pod's spec (which containers,
their images) and by what the API takes (restart counts, condition types, field types), so that no report can
freeze the local pod's status writes; usage figures are finite, non-negative and bounded by ceilings. What is
refused or clamped is returned as a `Refusal`, which the virtual kubelet reports as a Warning Event.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from .. import quantities

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
# A provider announces one range per address family (networks.covering_networks); more are ignored.
PROVIDER_RANGES_LIMIT = 8
# Shown in messages about overlaps; the rest are counted.
OVERLAPS_SHOWN = 3

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
OwnRange = tuple[Network, str]  # a range or address of the consumer's, and what it is

# Addresses no pod has. EndpointSlice validation refuses most of them, so one such pod IP could stall its
# Service's slices; a link-local one would point the Service at the nodes' metadata server; an IPv4-mapped IPv6
# one is an IPv4 address (the API server's, say) in disguise.
SPECIAL_RANGES: tuple[OwnRange, ...] = tuple(
    (ipaddress.ip_network(cidr), what)
    for cidr, what in (
        ("0.0.0.0/32", "unspecified address"),
        ("127.0.0.0/8", "loopback range"),
        ("169.254.0.0/16", "link-local range (metadata services)"),
        ("224.0.0.0/4", "multicast range"),
        ("::/128", "unspecified address"),
        ("::1/128", "loopback address"),
        ("::ffff:0:0/96", "IPv4-mapped range"),
        ("fe80::/10", "link-local range"),
        ("ff00::/8", "multicast range"),
    )
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


def provider_networks(cidrs: list) -> tuple[list[Network], list[str]]:
    """The provider's announced pod ranges that are networks, of the first PROVIDER_RANGES_LIMIT; what was ignored."""
    networks, ignored = [], []
    for cidr in cidrs[:PROVIDER_RANGES_LIMIT]:
        network = _network(cidr)
        if network is None:
            ignored.append(repr(cidr)[:60])
        elif network not in networks:
            networks.append(network)
    if len(cidrs) > PROVIDER_RANGES_LIMIT:
        ignored.append(f"{len(cidrs) - PROVIDER_RANGES_LIMIT} beyond the first {PROVIDER_RANGES_LIMIT}")
    return networks, ignored


def own_ranges(entries: Iterable[tuple[str, str]]) -> tuple[OwnRange, ...]:
    """(network, what) for each (CIDR or address, what) of the consumer's; what is not one is skipped."""
    ranges = []
    for cidr, what in entries:
        network = _network(cidr)
        if network is not None:
            ranges.append((network, what))
    return tuple(ranges)


def overlaps(network: Network, own: Iterable[OwnRange]) -> str:
    """What of the consumer's (`own`, and SPECIAL_RANGES) overlaps `network`, for a message; empty when nothing."""
    hits = [f"{what} {_shown(range_)}" for range_, what in (*SPECIAL_RANGES, *own) if network.overlaps(range_)]
    if len(hits) > OVERLAPS_SHOWN:
        hits[OVERLAPS_SHOWN:] = [f"{len(hits) - OVERLAPS_SHOWN} more"]
    return ", ".join(hits)


def node_entries(node: dict) -> list[tuple[str, str]]:
    """A consumer node's pod ranges and addresses (names, like Hostname, are skipped later)."""
    name = node["metadata"]["name"]
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ranges = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    entries = [(cidr, f"node {name}'s pod range") for cidr in ranges]
    entries += [(a.get("address") or "", f"node {name}'s address") for a in status.get("addresses") or []]
    return entries


def service_cidr_entries(service_cidr: dict) -> list[tuple[str, str]]:
    name = service_cidr["metadata"]["name"]
    return [
        (cidr, f"service range (ServiceCIDR {name})") for cidr in (service_cidr.get("spec") or {}).get("cidrs") or []
    ]


def kubernetes_service_entries(service: dict | None) -> list[tuple[str, str]]:
    """The `kubernetes` Service's cluster IPs: inside the consumer's service range (the first of it, usually)."""
    spec = (service or {}).get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    return [(ip, "kubernetes Service's cluster IP") for ip in ips if ip and ip != "None"]


def api_server_entries(endpoint_slice: dict | None) -> list[tuple[str, str]]:
    """The API server's own addresses, from the `kubernetes` Service's EndpointSlice."""
    return [
        (address, "API server's address")
        for endpoint in (endpoint_slice or {}).get("endpoints") or []
        for address in endpoint.get("addresses") or []
    ]


def _network(cidr: object) -> Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False) if isinstance(cidr, str) else None
    except ValueError:
        return None


def _shown(network: Network) -> str:
    return str(network.network_address) if network.num_addresses == 1 else str(network)


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
USAGE_REFUSED = "UsageRefused"  # a counter that is not a finite, non-negative number, or of no container of the spec
USAGE_CLAMPED = "UsageClamped"

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


def _quoted(value: object) -> str:
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
                    f"reported pod condition {_quoted(kind)}, not one a kubelet sets or one already reported:"
                    " not shown (readiness gates' conditions are the consumer's own)",
                )
            )
            continue
        if condition.get("status") not in CONDITION_STATUSES:
            refusals.append(
                Refusal(
                    POD_CONDITION_REFUSED,
                    f"reported pod condition {kind} with status {_quoted(condition.get('status'))}, not one of"
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
    containers = spec_containers if isinstance(spec_containers, list) else []
    images = {c.get("name"): c.get("image") or "" for c in containers if isinstance(c, dict)}
    accepted: list[dict] = []
    refusals: list[Refusal] = []
    for entry in reported if isinstance(reported, list) else []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name not in images or any(s["name"] == name for s in accepted):
            refusals.append(
                Refusal(
                    CONTAINER_STATUS_REFUSED,
                    f"reported a status of container {_quoted(name)} in {kind}, not a container of the pod's spec or"
                    " one already reported: not shown",
                )
            )
            continue
        status, refused = _container_status(entry, images[name], recreations)
        accepted.append(status)
        refusals += refused
    return accepted, refusals


def _container_status(entry: dict, image: str, recreations: object) -> tuple[dict, list[Refusal]]:
    name = entry["name"]
    shown, refused = _checked(entry, _CONTAINER_FIELDS)
    refusals = []
    reported_image = entry.get("image")
    if reported_image is not None and not same_image(reported_image, image):
        refusals.append(
            Refusal(
                IMAGE_REPLACED,
                f"reported image {_quoted(reported_image)} for container {name!r}, not its spec's {image!r}:"
                " the spec's is shown",
            )
        )
    count, clamped = shown_restart_count(entry.get("restartCount"), recreations)
    if clamped:
        refusals.append(
            Refusal(
                RESTART_COUNT_CLAMPED,
                f"reported restartCount {_quoted(entry.get('restartCount'))} for container {name!r} and"
                f" {_quoted(recreations)} recreations of its pod: shown as {count} (whole numbers from 0 to"
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
            refused.append(_quoted(which))
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


# -- usage a provider reports (its pod counters, or metrics.k8s.io) ---------------------------------------------

# A container's ceilings when neither its limits nor the provider's allocatable say more: above what any single node
# has (the largest machines have under 2000 CPUs and 32 TiB), and a container runs on one node.
CPU_CORES_CEILING = 4096.0
MEMORY_BYTES_CEILING = float(2**46)  # 64 TiB
# A container's cumulative CPU seconds at most (272 core-years): in nanoseconds, stats/summary's unit, inside int64,
# which its readers decode it into.
CPU_SECONDS_CEILING = float(2**33)
# A CPU rate between two samples may pass the limit a little: the samples' times and the CFS periods do not align.
CPU_LIMIT_TOLERANCE = 1.1
# Without limits a container may use what its node keeps from allocation for the system too: never as much again.
ALLOCATABLE_HEADROOM = 2
# A counter sampled at no time the provider says is timed here, on reads cached on both sides: two of its samples may
# be further apart than the times taken here, so its rise is bounded by twice its ceiling.
UNTIMED_SAMPLE_SLACK = 2
# Times a provider reports may be this far ahead of the consumer's clock.
CLOCK_SKEW_SECONDS = 3600.0


@dataclass(frozen=True)
class UsageCeilings:
    """The most one container can use: CPU (its rate, and its counter's rise) and working set."""

    cpu_cores: float
    memory_bytes: float


@dataclass(frozen=True)
class ContainerUsageReport:
    """One container's figures as accepted: cumulative CPU seconds (counters) or cores (rates), working set."""

    name: str
    cpu: float
    memory_bytes: float
    start_time: float | None = None  # unix seconds, when the report gave a real one
    sampled_at: float | None = None


def usage_ceilings(spec: Mapping, allocatable: Mapping) -> dict[str, UsageCeilings]:
    """Each container of a local pod's spec, and the most it can use: its limit (or its pod's) where the spec sets
    one, as the provider's kubelet enforces it; else ALLOCATABLE_HEADROOM times what the provider's usable nodes can
    allocate together (its ResourceOffer's status.allocatable); never more than the absolute ceilings."""
    pod_limits = (spec.get("resources") or {}).get("limits") or {}
    allocatable = allocatable if isinstance(allocatable, Mapping) else {}  # the provider's, as it reports it
    ceilings = {}
    for kind in CONTAINER_STATUS_KINDS.values():
        for container in spec.get(kind) or []:
            held = [(container.get("resources") or {}).get("limits") or {}, pod_limits]
            ceilings[container["name"]] = UsageCeilings(
                _ceiling("cpu", held, allocatable, CPU_LIMIT_TOLERANCE, CPU_CORES_CEILING),
                _ceiling("memory", held, allocatable, 1, MEMORY_BYTES_CEILING),
            )
    return ceilings


def _ceiling(resource: str, limits: list[Mapping], allocatable: Mapping, tolerance: float, absolute: float) -> float:
    known = [_quantity(held.get(resource), tolerance) for held in limits]
    if all(value is None for value in known):
        known = [_quantity(allocatable.get(resource), ALLOCATABLE_HEADROOM)]
    return min([absolute, *(value for value in known if value is not None)])


def _quantity(value: object, scale: float) -> float | None:
    """A positive quantity times `scale`, as a float (cut where a float would overflow); None when not one."""
    amount = _number(value)
    if amount is None or amount <= 0:
        return None
    return float(min(amount * Fraction(scale), _FLOAT_GUARD))


_FLOAT_GUARD = Fraction(2**64)


def _number(value: object) -> Fraction | None:
    """A finite number, from JSON or a Kubernetes quantity; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Fraction(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return quantities.parse(value)
        except (ValueError, ZeroDivisionError):
            return None
    return None


def usage_figure(value: object, ceiling: float) -> tuple[float | None, str]:
    """A reported usage figure as shown: None when it is not a finite number at least 0, else at most `ceiling`; and
    the kind of refusal (USAGE_REFUSED, USAGE_CLAMPED) or ""."""
    number = _number(value)
    if number is None or number < 0:
        return None, USAGE_REFUSED
    if number > Fraction(ceiling):
        return ceiling, USAGE_CLAMPED
    return float(number), ""


def reported_epoch(value: object, now: float) -> float | None:
    """A unix time a provider reported, when it is one: after 1970, and no further ahead of `now` than clock skew."""
    number = _number(value)
    if number is None or not 0 < number <= now + CLOCK_SKEW_SECONDS:
        return None
    return float(number)


def accepted_counters(
    reported: object, ceilings: Mapping[str, UsageCeilings], now: float
) -> tuple[ContainerUsageReport | None, list[Refusal]]:
    """One container of a podcounters item as shown: a container of the local spec (`ceilings` has one per
    container), its cumulative CPU seconds (at most CPU_SECONDS_CEILING) and its working set (at most its ceiling)
    finite numbers at least 0, else it is left out, as a kubelet leaves out a container it has no figures of; a time
    that is not one is left to the caller's default. Also what was refused or clamped."""
    named = _named(reported, ceilings)
    if named is None:
        return None, [_unknown_container(reported)]
    name, reported = named
    seconds = ("cpuSeconds", reported.get("cpuSeconds") or 0, CPU_SECONDS_CEILING)
    memory = ("memoryWorkingSetBytes", reported.get("memoryWorkingSetBytes") or 0, ceilings[name].memory_bytes)
    (cpu, memory_bytes), refusals = _figures(name, [seconds, memory])
    times = {key: reported_epoch(reported.get(key), now) for key in ("startTime", "sampledAt")}
    for key, value in times.items():
        if value is None and reported.get(key) is not None:
            refusals.append(
                Refusal(
                    USAGE_REFUSED,
                    f"reported {key} {_quoted(reported[key])} of container {name!r}, not a time: not shown",
                )
            )
    if cpu is None or memory_bytes is None:
        return None, refusals
    return ContainerUsageReport(name, cpu, memory_bytes, times["startTime"], times["sampledAt"]), refusals


def accepted_rates(
    reported: object, ceilings: Mapping[str, UsageCeilings]
) -> tuple[ContainerUsageReport | None, list[Refusal]]:
    """One container of a metrics.k8s.io PodMetrics as shown: as accepted_counters, its CPU in cores (a rate)."""
    named = _named(reported, ceilings)
    if named is None:
        return None, [_unknown_container(reported)]
    name, reported = named
    usage = reported.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    ceiling = ceilings[name]
    cpu_figure = ("usage.cpu", usage.get("cpu") or 0, ceiling.cpu_cores)
    memory_figure = ("usage.memory", usage.get("memory") or 0, ceiling.memory_bytes)
    (cpu, memory_bytes), refusals = _figures(name, [cpu_figure, memory_figure])
    if cpu is None or memory_bytes is None:
        return None, refusals
    return ContainerUsageReport(name, cpu, memory_bytes), refusals


def _named(reported: object, ceilings: Mapping[str, UsageCeilings]) -> tuple[str, dict] | None:
    """(its name, the report) when `reported` is of a container of the local spec."""
    name = reported.get("name") if isinstance(reported, dict) else None
    return (name, reported) if isinstance(reported, dict) and isinstance(name, str) and name in ceilings else None


def _unknown_container(reported: object) -> Refusal:
    name = reported.get("name") if isinstance(reported, dict) else None
    return Refusal(
        USAGE_REFUSED, f"reported usage of container {_quoted(name)}, not a container of the pod's spec: left out"
    )


def _figures(name: str, figures: list[tuple[str, object, float]]) -> tuple[list[float | None], list[Refusal]]:
    """(field, value, ceiling) of one container, as shown (usage_figure), and what was refused or clamped."""
    shown, refusals = [], []
    for key, value, ceiling in figures:
        figure, verdict = usage_figure(value, ceiling)
        shown.append(figure)
        if verdict == USAGE_REFUSED:
            message = f"reported {key} {_quoted(value)} of container {name!r}, not a finite number at least 0"
            refusals.append(Refusal(USAGE_REFUSED, f"{message}: the container's usage is left out"))
        elif verdict == USAGE_CLAMPED:
            message = f"reported {key} {_quoted(value)} of container {name!r}, above its ceiling"
            refusals.append(
                Refusal(
                    USAGE_CLAMPED, f"{message} (its limit, else what the provider can allocate): shown as {figure:g}"
                )
            )
    return shown, refusals


def bounded_counter(seconds: float, at: float, previous: tuple[float, float] | None, cores: float) -> float:
    """A container's cumulative CPU seconds as shown: since the previous sample shown (`previous`: its seconds and
    time) it rises by at most `cores` per second, so no rate taken from two samples passes the ceiling; a lower
    value is the container's restart and passes. Never above CPU_SECONDS_CEILING."""
    if previous is not None and seconds >= previous[0]:
        seconds = min(seconds, previous[0] + cores * max(at - previous[1], 0.0))
    return min(seconds, CPU_SECONDS_CEILING)


def counter_clamped(name: str, reported: float, shown: float, cores: float) -> Refusal:
    return Refusal(
        USAGE_CLAMPED,
        f"reported cpuSeconds {reported:g} of container {name!r}, rising faster than its ceiling of {cores:g} cores"
        f" (its limit, else what the provider can allocate): shown as {shown:g}",
    )
