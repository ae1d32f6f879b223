"""The status a consumer's pod shows: from its remote Pod's (the remote status back, `seen_status`), or Pending while
it is held, or its last one once its remote pod is gone. Pure.

What the provider reports is checked on the way (vk/trust.py; pod IPs by vk/ip_translation.py); vk/pod_status.py
writes the result onto the local pod.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping, Sequence

from .. import quantities
from ..constants import SHADOWPOD_RESIZE_CONDITION, TERMINAL_PHASES
from ..objects import material_status
from .ip_translation import IPTranslator
from .trust import Refusal, accepted_report, bounded_text, sanitised_message

REMOTE_CONDITION = "catamaran.io/RemotePodCreated"
# On a local pod while the pod IPs its provider reports are refused (IPTranslator); the pod then shows none.
POD_IP_CONDITION = "catamaran.io/PodIPAccepted"
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# A kubelet's reasons for PodResizePending; a provider's other reason is shown as the first.
RESIZE_PENDING_REASONS = ("Deferred", "Infeasible")


# A pod made but neither scheduled nor started: nothing for the consumer to show yet.
NOTHING_SHOWN = material_status({})


def seen_status(shadow_status: dict | None, remote_pod: dict | None, shadow_uid: str) -> dict | None:
    """A ShadowPod's status as the virtual kubelet reads it: what the manager wrote there, with its live Pod's status
    and the recreations the manager stamped on that Pod once the Pod is the ShadowPod's and shows something. Else as
    written: by releases that copy the Pod's status there, or the final status of a pod that ended and is gone.

    `remote_pod` is the compact Pod (vk/pods.py compact_remote_pod): its controller `owner`'s uid, its `recreations`
    (a whole number, None when unstamped) and its `status`."""
    if remote_pod is None or remote_pod.get("owner") != shadow_uid:
        return shadow_status
    pod_status = remote_pod.get("status") or {}
    if material_status(pod_status) == NOTHING_SHOWN and not (shadow_status or {}).get("pod"):
        return shadow_status
    seen = dict(shadow_status or {})
    seen["pod"] = pod_status
    stamped, recorded = remote_pod.get("recreations"), seen.get("recreations")
    if stamped is not None and (recorded is None or (type(recorded) is int and recorded < stamped)):
        seen["recreations"] = stamped  # the Pod's own count, before the manager records it on the ShadowPod
    return seen


def _condition(kind: str, status: str, reason: str = "", message: str = "", when: str | None = None) -> dict:
    condition = {"type": kind, "status": status}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    if when:
        condition["lastTransitionTime"] = when
    return condition


def _waiting_containers(containers: list[tuple[str, str]], reason: str, message: str) -> list[dict]:
    return [
        {
            "name": container_name,
            "ready": False,
            "restartCount": 0,
            "image": image,
            "imageID": "",
            "state": {"waiting": {"reason": reason, "message": message}},
        }
        for container_name, image in containers
    ]


def held_pod_status(
    local_status: dict, reason: str, message: str, *, now: str, containers: Sequence[tuple[str, str]] = ()
) -> dict:
    """The status of a pod the virtual kubelet does not send (or the provider refused to take): Pending, and why.

    The message may quote the provider's refusal, so it is bounded like everything else the provider says."""
    message = sanitised_message(message)
    local_conditions = {c["type"]: c for c in local_status.get("conditions") or []}
    previous = local_conditions.get(REMOTE_CONDITION) or {}
    since = previous.get("lastTransitionTime") if previous.get("status") == "False" else None
    conditions = [local_conditions["PodScheduled"]] if "PodScheduled" in local_conditions else []
    conditions.append(_condition(REMOTE_CONDITION, "False", reason, message, since or now))
    return {
        "phase": "Pending",
        "reason": reason,
        "message": message,
        "conditions": conditions,
        "containerStatuses": _waiting_containers(list(containers), reason, message),
    }


def local_pod_status(
    local_status: dict,
    shadow_status: dict | None,
    *,
    node_ip: str,
    translate: IPTranslator | None,
    provider_reachable: bool,
    now: str,
    spec: Mapping | None = None,
    network_down: str | None = None,
    readiness_gates: Sequence[str] = (),
    generation: int | None = None,
    resources_sent: bool = True,
) -> dict:
    """The status the consumer's pod should show, from its ShadowPod's status (None: not created yet).

    What the provider reports is checked on the way: pod IPs by `translate` (a refused one leaves the pod
    without IP and with a POD_IP_CONDITION saying why; None: not decided yet, the pod keeps what it shows),
    and the rest bounded by the local pod's `spec` (vk/trust.py accepted_report: container statuses only of its
    containers, with its images, restart counts clamped, condition types of a kubelet's only, fields the API takes,
    reasons and messages bounded); report_refusals says what was refused. A pod is not ready while its provider
    cannot be reached, nor while the network fabric's tunnel to it is down (`network_down` says why): Services then
    send nothing to it. Its readiness gates (condition types, set on the local pod by the consumer's controllers) are
    kept and gate Ready, as a kubelet does. `generation` (the local pod's) is the status's observedGeneration once
    the pod's spec is acted on remotely (observed_generation); `resources_sent`: the ShadowPod has its resources.
    """
    shadow_status = shadow_status or {}
    remote = shadow_status.get("pod") or {}
    report = accepted_report(remote, spec or {}, shadow_status.get("recreations"))
    local_conditions = {c["type"]: c for c in local_status.get("conditions") or []}
    phase = remote.get("phase") or shadow_status.get("phase") or "Pending"
    status: dict = {
        "phase": phase if phase in POD_PHASES else "Unknown",
        "hostIP": node_ip,
        "hostIPs": [{"ip": node_ip}],
    }
    conditions = [local_conditions["PodScheduled"]] if "PodScheduled" in local_conditions else []
    conditions += _with_resize_refusal(report.conditions, shadow_status, local_conditions, now)
    failure = _creation_failure(shadow_status)
    previous_failure = local_conditions.get(REMOTE_CONDITION)
    if failure is not None:
        since = (previous_failure or {}).get("lastTransitionTime") or now
        conditions.append(
            _condition(REMOTE_CONDITION, "False", failure.get("reason", "Failed"), failure.get("message", ""), since)
        )
    ips, ip_conditions = _pod_ip_status(local_status, remote, translate, now)
    status.update(ips)
    conditions += ip_conditions
    unreachable = _unreachable(provider_reachable, network_down)
    if unreachable is not None:
        conditions = _not_ready(conditions, local_conditions, *unreachable, now)
    status["conditions"] = _gated(conditions, local_conditions, readiness_gates, now)
    if report.start_time:
        status["startTime"] = report.start_time
    for kind, entries in report.container_statuses.items():
        for entry in entries:
            entry["ready"] = entry["ready"] and unreachable is None
        if entries:
            status[kind] = entries
    if not report.container_statuses["containerStatuses"]:
        if failure is not None:
            containers = [(c["name"], c.get("image", "")) for c in (spec or {}).get("containers") or []]
            reason, message = failure.get("reason", "Failed"), failure.get("message", "")
            status["containerStatuses"] = _waiting_containers(containers, reason, message)
        elif previous_failure is not None:
            status["containerStatuses"] = None  # the waiting reasons were the failure's; it is over
    status.update(_reason_and_message(local_status, remote, failure, previous_failure))
    observed = observed_generation(local_status, status, spec or {}, generation, resources_sent)
    if observed is not None:
        status["observedGeneration"] = observed
    return status


def observed_generation(
    local_status: Mapping, status: Mapping, spec: Mapping, generation: int | None, resources_sent: bool
) -> int | None:
    """The generation of the local pod's spec the remote pod has acted on, as a kubelet reports it: the current one once
    its resources reached the ShadowPod and no resize is pending or in progress, with the container resources the
    remote kubelet reports (if it reports them) those of the spec; else the one shown before."""
    previous = local_status.get("observedGeneration")
    if generation is None or not resources_sent:
        return previous
    resizing = {"PodResizePending", "PodResizeInProgress"}
    if any(c["type"] in resizing and c.get("status") == "True" for c in status.get("conditions") or []):
        return previous
    reported = {entry["name"]: entry.get("resources") for entry in status.get("containerStatuses") or []}
    for container in spec.get("containers") or []:
        shown = reported.get(container.get("name"))
        if shown is not None and not quantities.holds_resources(container.get("resources") or {}, shown):
            return previous
    return generation


def report_refusals(shadow_status: dict | None, spec: Mapping) -> list[Refusal]:
    """What local_pod_status refuses or clamps of a ShadowPod's status for a local pod with `spec`."""
    shadow_status = shadow_status or {}
    return accepted_report(shadow_status.get("pod") or {}, spec, shadow_status.get("recreations")).refusals


def _creation_failure(shadow_status: dict) -> dict | None:
    """The provider's refusal to create the pod (its PodCreated condition False), reason and message bounded."""
    for condition in shadow_status.get("conditions") or []:
        if condition["type"] == "PodCreated" and condition["status"] == "False":
            return bounded_text(condition)
    return None


def _with_resize_refusal(conditions: list[dict], shadow_status: dict, local: dict[str, dict], now: str) -> list[dict]:
    """The remote pod's conditions, with PodResizePending as a kubelet sets it while the provider's manager does not
    resize the remote pod as asked (its ShadowPod's SHADOWPOD_RESIZE_CONDITION): the remote kubelet never saw that
    resize, so its own conditions say nothing of it."""
    refused = next((c for c in shadow_status.get("conditions") or [] if c["type"] == SHADOWPOD_RESIZE_CONDITION), None)
    if refused is None or refused.get("status") != "False":
        return conditions
    said = bounded_text(refused)
    reason = said["reason"] if said.get("reason") in RESIZE_PENDING_REASONS else RESIZE_PENDING_REASONS[0]
    previous = local.get("PodResizePending") or {}
    since = previous.get("lastTransitionTime") if previous.get("status") == "True" else None
    pending = _condition("PodResizePending", "True", reason, said.get("message", ""), since or now)
    return [c for c in conditions if c["type"] != "PodResizePending"] + [pending]


def _pod_ip_status(
    local_status: dict, remote: dict, translate: IPTranslator | None, now: str
) -> tuple[dict, list[dict]]:
    """podIP and podIPs as the local pod shows them, and its POD_IP_CONDITION when one is refused (or kept)."""
    previous = next((c for c in local_status.get("conditions") or [] if c["type"] == POD_IP_CONDITION), None)
    if translate is None:
        return {"podIP": local_status.get("podIP"), "podIPs": local_status.get("podIPs")}, [
            previous
        ] if previous else []
    if not remote.get("podIP"):
        return {}, []
    shown, refused = _pod_ips(remote, translate)
    ips = {"podIP": shown[0] if shown else None, "podIPs": [{"ip": ip} for ip in shown] or None}
    if not refused:
        return ips, []
    reason, message = translate.refusal(refused[0])
    since = (previous or {}).get("lastTransitionTime") if (previous or {}).get("status") == "False" else None
    return ips, [_condition(POD_IP_CONDITION, "False", reason, sanitised_message(message), since or now)]


def _unreachable(provider_reachable: bool, network_down: str | None) -> tuple[str, str] | None:
    """(reason, message) why the pod cannot be ready now, or None."""
    if not provider_reachable:
        return "ProviderUnreachable", "the provider cluster's API server is unreachable"
    if network_down:
        return "NetworkUnreachable", network_down
    return None


def _not_ready(conditions: list[dict], local: dict[str, dict], reason: str, message: str, now: str) -> list[dict]:
    """The conditions with ContainersReady and Ready False for `reason` (since when they turned False)."""
    kept = [c for c in conditions if c["type"] not in ("Ready", "ContainersReady")]
    for kind in ("ContainersReady", "Ready"):
        previous = local.get(kind) or {}
        since = previous.get("lastTransitionTime") if previous.get("status") == "False" else now
        kept.append(_condition(kind, "False", reason, message, since or now))
    return kept


def _reason_and_message(local_status: dict, remote: dict, failure: dict | None, previous_failure: dict | None) -> dict:
    """The pod's reason and message: the remote pod's (bounded), else the creation failure's; a failure's are cleared
    once it is over."""
    said = bounded_text({field: remote[field] for field in ("reason", "message") if remote.get(field)})
    shown = {}
    for field in ("reason", "message"):
        if said.get(field):
            shown[field] = said[field]
        elif failure is not None:
            shown[field] = failure.get(field, "")
        elif previous_failure is not None and local_status.get(field) == previous_failure.get(field):
            shown[field] = None  # set for the failure that is over
    return shown


def _gated(conditions: list[dict], local: dict[str, dict], gates: Sequence[str], now: str) -> list[dict]:
    """The local pod's readiness gate conditions kept, and Ready False while one is not True (the kubelet's rule and
    words). The remote pod has no gates: nobody there sets their conditions."""
    if not gates:
        return conditions
    kept = [c for c in conditions if c["type"] not in gates] + [local[g] for g in gates if g in local]
    missing = [g for g in gates if g not in local]
    unset = [g for g in gates if g in local and local[g].get("status") != "True"]
    ready = next((c for c in kept if c["type"] == "Ready"), None)
    if ready is None or ready.get("status") != "True" or not (missing or unset):
        return kept
    if missing:
        message = f'corresponding condition of pod readiness gate "{missing[0]}" does not exist.'
    else:
        message = f'the status of pod readiness gate "{unset[0]}" is not "True", but {local[unset[0]].get("status")}'
    previous = local.get("Ready") or {}
    since = previous.get("lastTransitionTime") if previous.get("status") == "False" else None
    gated = _condition("Ready", "False", "ReadinessGatesNotReady", message, since or now)
    return [gated if c["type"] == "Ready" else c for c in kept]


def terminated_pod_status(local_status: dict, *, now: str) -> dict:
    """The last status of a pod whose remote pod is gone while the local one stays (a finalizer holds it): every
    container not seen ending is terminated now, with the kubelet's words for an end it could not observe."""
    status = copy.deepcopy(local_status)
    for kind in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(kind) or []:
            if "terminated" in (entry.get("state") or {}):
                continue
            started = ((entry.get("state") or {}).get("running") or {}).get("startedAt")
            entry["ready"] = False
            entry["started"] = False
            entry["state"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the pod was terminated",
                    "finishedAt": now,
                    **({"startedAt": started} if started else {}),
                }
            }
    codes = [
        entry["state"]["terminated"].get("exitCode")
        for entry in status.get("containerStatuses") or []
        if "terminated" in (entry.get("state") or {})
    ]
    if status.get("phase") not in TERMINAL_PHASES:
        status["phase"] = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
    status["conditions"] = [
        _condition(c["type"], "False", "PodCompleted", "", now) if c["type"] in ("Ready", "ContainersReady") else c
        for c in status.get("conditions") or []
    ]
    return status


def _pod_ips(remote: dict, translate: IPTranslator) -> tuple[list[str], list[str]]:
    """The IPs the local pod shows (at most one per address family, the primary first), and those refused."""
    entries = [remote["podIP"], *(e.get("ip") for e in remote.get("podIPs") or [] if isinstance(e, dict))]
    reported = list(dict.fromkeys(ip for ip in entries if ip and isinstance(ip, str)))[:2]
    shown, refused, families = [], [], set()
    for ip in reported:
        local_ip = translate(ip)
        if local_ip is None:
            refused.append(ip)
        elif (family := ipaddress.ip_address(local_ip).version) not in families:
            families.add(family)
            shown.append(local_ip)
    return shown, refused
