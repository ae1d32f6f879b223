"""Does this cluster enforce NetworkPolicies where its tenants' pods run? The canary's objects and verdict. Pure.

A tenant's pods are confined by NetworkPolicies (terms.twin_isolation), which only the cluster's network plugin
enforces; a plugin that does not (flannel alone, a bare bridge) leaves every twin open without a word. So the manager
keeps a canary where tenants' pods run: a pod per distinct placement of the tenants (their node selector and
tolerations), listening on two ports, and one NetworkPolicy admitting connections to OPEN_PORT from anywhere and to
nothing else. The manager connects to both (enforcement_probe.py): the open port answering shows the canary is
reachable, and then the guarded port answering shows the policy is not enforced. Each tenant's ResourceOffer carries
the verdict for its placement as the condition NETWORK_POLICY_CONDITION, which the consumer's virtual kubelet copies
onto its ForeignCluster.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from ..constants import (
    LABEL_MANAGED_BY,
    LABEL_TYPE,
    MANAGED_BY_CATAMARAN,
    NETWORK_POLICY_CONDITION,
    SYSTEM_NAMESPACE,
    TYPE_VIRTUAL_NODE,
)

LABEL_COMPONENT = "app.kubernetes.io/component"
CANARY_COMPONENT = "networkpolicy-canary"
CANARY_LABELS = {LABEL_COMPONENT: CANARY_COMPONENT, LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN}
LABEL_PLACEMENT = "catamaran.io/placement"
CANARY_PREFIX = "catamaran-networkpolicy-canary-"
CANARY_POLICY = "catamaran-networkpolicy-canary"
OPEN_PORT = 8080  # the policy admits anyone here: the canary is reachable
GUARDED_PORT = 8081  # and no one here: an answer means the policy is not enforced
# A canary or a policy younger than this may not be programmed into the nodes yet: its answer proves nothing.
SETTLE_SECONDS = 20
# The canary's process (catamaran.policy_canary) in the controller's image.
NOT_VIRTUAL = {"key": LABEL_TYPE, "operator": "NotIn", "values": [TYPE_VIRTUAL_NODE]}
CANARY_COMMAND = ["python", "-m", "catamaran.policy_canary", str(OPEN_PORT), str(GUARDED_PORT)]


def placement_key(node_selector: tuple, tolerations: tuple) -> str:
    """A short, stable name for one placement (sorted selector pairs and tolerations, as offers.Placement holds)."""
    return hashlib.sha256(repr((node_selector, tolerations)).encode()).hexdigest()[:10]


def canary_name(key: str) -> str:
    return f"{CANARY_PREFIX}{key}"


def canary_pod(key: str, image: str, pull_secrets: list[str] | tuple = ()) -> dict:
    """The canary of one placement (the caller adds the placement): Pod Security restricted, no API credential, never
    on a virtual node (a canary there would test another cluster)."""
    pod: dict = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": canary_name(key),
            "namespace": SYSTEM_NAMESPACE,
            "labels": {**CANARY_LABELS, LABEL_PLACEMENT: key},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [NOT_VIRTUAL]}]
                    }
                }
            },
            "containers": [
                {
                    "name": "canary",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": CANARY_COMMAND,
                    "ports": [
                        {"name": "open", "containerPort": OPEN_PORT},
                        {"name": "guarded", "containerPort": GUARDED_PORT},
                    ],
                    # The kubelet's probe comes from the node, which every plugin lets through.
                    "readinessProbe": {"tcpSocket": {"port": OPEN_PORT}, "periodSeconds": 10},
                    "resources": {"requests": {"cpu": "5m", "memory": "24Mi"}, "limits": {"memory": "64Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    if pull_secrets:
        pod["spec"]["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    return pod


def canary_policy() -> dict:
    """Every canary admits connections to OPEN_PORT, from anywhere, and none to GUARDED_PORT."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": CANARY_POLICY, "namespace": SYSTEM_NAMESPACE, "labels": CANARY_LABELS},
        "spec": {
            "podSelector": {"matchLabels": {LABEL_COMPONENT: CANARY_COMPONENT}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": OPEN_PORT}]}],
        },
    }


@dataclass(frozen=True)
class Canary:
    """What the probe needs of a canary pod (the pods informer's view)."""

    placement: str  # its placement key
    ip: str
    ready_since: str  # the Ready condition's transition time, "" while not ready
    waiting: str  # why its container is not running ("ImagePullBackOff: ..."), "" when it runs
    finished: bool = False  # Failed or Succeeded (evicted, say): it is replaced
    deleting: bool = False


def summarize_canary(pod: dict) -> Canary:
    status = pod.get("status") or {}
    ready: dict = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    waiting = ""
    for container in status.get("containerStatuses") or []:
        state = (container.get("state") or {}).get("waiting")
        if state:
            waiting = f"{state.get('reason', '')}: {state.get('message', '')}".strip(": ")
    return Canary(
        placement=(pod["metadata"].get("labels") or {}).get(LABEL_PLACEMENT, ""),
        ip=status.get("podIP") or "",
        ready_since=(ready.get("lastTransitionTime") or "") if ready.get("status") == "True" else "",
        waiting=waiting or status.get("phase") or "",
        finished=status.get("phase") in ("Failed", "Succeeded"),
        deleting=bool(pod["metadata"].get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class Verdict:
    status: str  # "True", "False" or "Unknown", as a condition's
    reason: str
    message: str


def not_probed(canary: Canary | None, name: str) -> Verdict | None:
    """The verdict when the canary cannot be probed yet; None when it can."""
    if canary is None:
        return Verdict("Unknown", "CanaryStarting", f"canary pod {SYSTEM_NAMESPACE}/{name} is being created")
    if not canary.ip or not canary.ready_since:
        detail = f": {canary.waiting}" if canary.waiting else ""
        return Verdict("Unknown", "CanaryNotReady", f"canary pod {SYSTEM_NAMESPACE}/{name} is not ready{detail}")
    return None


def verdict(canary: Canary, open_answered: bool, guarded_answered: bool, settled: bool) -> Verdict:
    """What two connections to a ready canary say of the cluster's NetworkPolicy enforcement."""
    where = f"canary {canary.ip}"
    if not open_answered:
        return Verdict(
            "Unknown",
            "CanaryUnreachable",
            f"{where} does not answer on port {OPEN_PORT}, which its policy admits: the manager cannot probe it "
            "from where it runs (outside the pod network?)",
        )
    if not guarded_answered:
        return Verdict("True", "Enforced", f"{where} refused port {GUARDED_PORT}, as its NetworkPolicy says")
    if not settled:
        return Verdict("Unknown", "Settling", f"{where} or its NetworkPolicy is too new to judge")
    return Verdict(
        "False",
        "NotEnforced",
        f"{where} answered on port {GUARDED_PORT}, which its NetworkPolicy denies: this cluster's network plugin "
        "does not enforce NetworkPolicies, so tenants' pods are not confined to their twins",
    )


NOT_PROBED = Verdict(
    "Unknown",
    "NotProbed",
    "this provider's manager runs no NetworkPolicy canary (no canary image): whether its network plugin enforces "
    "NetworkPolicies is not known",
)


def seconds_between(earlier: str, later: datetime) -> float:
    """Seconds from an API timestamp to `later` (an aware datetime); 0 for an empty timestamp."""
    if not earlier:
        return 0.0
    return (later - datetime.fromisoformat(earlier.replace("Z", "+00:00"))).total_seconds()


def condition(verdict: Verdict, since: str) -> dict:
    """The condition a ResourceOffer's status carries."""
    return {
        "type": NETWORK_POLICY_CONDITION,
        "status": verdict.status,
        "reason": verdict.reason,
        "message": verdict.message,
        "lastTransitionTime": since,
    }
