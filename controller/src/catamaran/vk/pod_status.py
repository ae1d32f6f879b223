"""Status back: what a local pod on the virtual node shows, from its ShadowPod's status (vk/status_back.py's
local_pod_status), or why it is held Pending; Warning Events when a refusal first appears, and once per pod and
kind for what the provider reported that the consumer refused or clamped (vk/refusals.py)."""

from __future__ import annotations

import logging

from lightkube.resources.core_v1 import Pod

from ..kube.echoes import OwnWrites
from ..kube.ops import patch_status
from ..logs import fields
from ..objects import as_dict, condition, now_iso, reference, status_patch
from .context import PeeringContext
from .forge import HELD_REASONS, resized_containers
from .node import ProviderHealth
from .pod_ips import PodIPs
from .refusals import RefusalEvents
from .status_back import (
    POD_IP_CONDITION,
    REMOTE_CONDITION,
    held_pod_status,
    local_pod_status,
    report_refusals,
    terminated_pod_status,
)

log = logging.getLogger(__name__)

REMOTE_FAILURE_EVENTS = {
    "QuotaExceeded": "RemoteQuotaExceeded",
    "AdmissionRejected": "RemoteAdmissionRejected",
    "NamespaceMissing": "RemoteNamespaceMissing",
}
# On a local pod, once for each pod IP its provider reports that the consumer refuses (POD_IP_CONDITION says why).
POD_IP_REFUSED = "PodIPRefused"


def comparable_status(status: dict) -> dict:
    """The fields the virtual kubelet owns, without heartbeat-like noise."""
    return {
        "phase": status.get("phase"),
        "observedGeneration": status.get("observedGeneration"),
        "podIP": status.get("podIP"),
        "hostIP": status.get("hostIP"),
        "startTime": status.get("startTime"),
        "reason": status.get("reason"),
        "conditions": sorted(
            (c["type"], c["status"], c.get("reason") or "", c.get("message") or "")
            for c in status.get("conditions") or []
        ),
        "containers": [
            (
                c["name"],
                c.get("image"),
                c.get("ready"),
                c.get("restartCount"),
                sorted((c.get("state") or {}).keys()),
                c.get("resources"),  # an in-place resize applied
                c.get("allocatedResources"),
            )
            for kind in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
            for c in status.get(kind) or []
        ],
    }


class PodStatus:
    """Writes local pods' status: the remote pod's as the consumer may show it, or a held pod's reason."""

    def __init__(self, peering: PeeringContext, health: ProviderHealth, node_ip: str, ips: PodIPs):
        self.peering = peering
        # The pod controller is not told of the watch events these writes cause (kube/echoes.py).
        self.writes = OwnWrites()
        self.health = health  # the provider link every virtual node of the peering shows
        self.node_ip = node_ip  # the hostIP of every pod here (the virtual nodes' one address)
        self.ips = ips
        self.refusals = RefusalEvents(peering.events, peering.provider_id)

    def held(self, pod: dict) -> bool:
        """Does the pod show a reason it is not offloaded, or that the provider refused its ShadowPod?"""
        return (
            any(
                c["type"] == REMOTE_CONDITION and c["status"] == "False" and c.get("reason") in HELD_REASONS
                for c in pod["status"].get("conditions") or []
            )
            or pod["status"].get("reason") in HELD_REASONS
        )

    async def hold(self, pod: dict, reason: str, message: str, event_reason: str | None = None) -> None:
        """Keep the pod Pending with the reason; one Warning Event when the reason first appears."""
        wanted = held_pod_status(
            pod["status"],
            reason,
            message,
            now=now_iso(),
            containers=[(c["name"], c.get("image", "")) for c in pod["spec"].get("containers") or []],
        )
        if comparable_status(wanted) == comparable_status(pod["status"]):
            return
        previous = next((c for c in pod["status"].get("conditions") or [] if c["type"] == REMOTE_CONDITION), None)
        if (previous or {}).get("reason") != reason:
            log.info(
                "pod not offloaded",
                extra=fields(pod=f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", reason=reason),
            )
            await self.peering.events.record(
                reference({"apiVersion": "v1", "kind": "Pod", **pod}),
                "Warning",
                event_reason or reason,
                wanted["message"],
            )
        await self._write(pod, wanted)

    async def terminated(self, pod: dict) -> None:
        """The remote pod is gone and the local one stays (a finalizer): its containers show that they ended."""
        wanted = terminated_pod_status(pod["status"], now=now_iso())
        if comparable_status(wanted) != comparable_status(pod["status"]):
            await self._write(pod, wanted)

    async def update(self, pod: dict, shadow: dict | None) -> None:
        meta = pod["metadata"]
        shadow_status = (shadow or {}).get("status")
        refused = any(
            c["type"] == "PodCreated" and c["status"] == "False" for c in (shadow_status or {}).get("conditions") or []
        )
        if not (shadow_status or {}).get("pod") and not refused and self.health.healthy and not self.held(pod):
            return  # nothing to report yet: the remote pod has not been created or observed
        wanted = local_pod_status(
            pod["status"],
            shadow_status,
            node_ip=self.node_ip,
            translate=self.ips.translate,
            provider_reachable=self.health.healthy,
            network_down=self.ips.network_down,
            now=now_iso(),
            spec=pod["spec"],
            readiness_gates=[g["conditionType"] for g in pod["spec"].get("readinessGates") or []],
            generation=meta.get("generation"),
            resources_sent=shadow is not None and resized_containers(pod, shadow) is None,
        )
        # Before the comparison: a refused value (a ghost container) may leave the status as it was.
        await self.refusals.record(pod, report_refusals(shadow_status, pod["spec"]))
        if comparable_status(wanted) == comparable_status(pod["status"]):
            return
        involved = reference({"apiVersion": "v1", "kind": "Pod", **pod})
        failure = condition(wanted, REMOTE_CONDITION)
        if (
            failure is not None
            and (condition(pod["status"], REMOTE_CONDITION) or {}).get("reason") != failure["reason"]
        ):
            await self.peering.events.record(
                involved,
                "Warning",
                REMOTE_FAILURE_EVENTS.get(failure["reason"], f"Remote{failure['reason']}"),
                f"provider {self.peering.provider_id} refused the pod: {failure.get('message', '')}",
            )
        # Its message names the refused IP: a new IP, or new ranges, is worth a new Event.
        refused = condition(wanted, POD_IP_CONDITION)
        if (
            refused is not None
            and (condition(pod["status"], POD_IP_CONDITION) or {}).get("message") != refused["message"]
        ):
            await self.peering.events.record(involved, "Warning", POD_IP_REFUSED, refused["message"])
        # Readiness gates' conditions are set by the consumer's controllers and written back here whole (a merge
        # patch replaces the list): only onto the status they were read from.
        gated = bool(pod["spec"].get("readinessGates")) and bool(meta.get("resourceVersion"))
        await self._write(pod, wanted, if_unchanged=gated)

    async def _write(self, pod: dict, wanted: dict, *, if_unchanged: bool = False) -> None:
        meta = pod["metadata"]
        patch = status_patch(pod["status"], wanted)
        written = await patch_status(self.peering.local, Pod, meta, patch, if_unchanged=if_unchanged)
        # A patch made against a cache that lagged may leave other than wanted: then its echo is reconciled.
        if written is not None and comparable_status(as_dict(written).get("status") or {}) == comparable_status(wanted):
            self.writes.wrote((meta["namespace"], meta["name"]), written)
