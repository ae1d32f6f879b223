"""Turn a consumer's pod into the ShadowPod a provider runs, and the remote status back. Pure."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Callable

from .constants import (
    ANNOTATION_LOCAL_POD_UID,
    CONSUMER_ROOT_CA_CONFIGMAP,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_CATAMARAN,
    OFFLOADING_GROUP,
    ROOT_CA_CONFIGMAP,
    VERSION,
    VIRTUAL_NODE_TAINT_KEY,
)
from .steering import OFFLOADING_NAME, is_daemonset_pod, selector_matches

ANNOTATION_LOCAL_NAMESPACE = "catamaran.io/local-namespace"
TOKEN_NAMESPACE_KEY = "namespace"
DEFAULT_TOKEN_EXPIRATION = 3600
# Fields that only make sense on the consumer: placement on its nodes, its priority classes,
# its service accounts (their tokens are not valid on the provider) and host namespaces.
LOCAL_ONLY_SPEC_FIELDS = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "topologySpreadConstraints",
    "schedulerName",
    "priorityClassName",
    "priority",
    "preemptionPolicy",
    "serviceAccountName",
    "serviceAccount",
    "readinessGates",
    "ephemeralContainers",
    "resourceClaims",
    "schedulingGates",
)
DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
REMOTE_CONDITION = "catamaran.io/RemotePodCreated"
# Why a pod bound to the virtual node is never sent to the provider: it stays Pending, saying so.
OFFLOADING_BACKOFF = "OffloadingBackOff"
DAEMONSET_NOT_OFFLOADED = "DaemonSetNotOffloaded"
HELD_REASONS = (OFFLOADING_BACKOFF, DAEMONSET_NOT_OFFLOADED)


def offloading_selects(offloading: dict | None, node_labels: dict, node_name: str) -> bool:
    """Does a namespace's NamespaceOffloading (None: it has none) send its pods to this virtual node?"""
    if offloading is None or offloading["metadata"].get("deletionTimestamp"):
        return False
    return selector_matches(offloading["spec"].get("clusterSelector"), node_labels, node_name)


def offload_refusal(
    pod: dict, offloading: dict | None, node_labels: dict, node_name: str, provider_id: str
) -> tuple[str, str] | None:
    """(reason, message) when a pod bound to the virtual node must not be offloaded, None when it may be.

    Only namespaces whose NamespaceOffloading selects this virtual node are offloaded, and DaemonSet pods
    never are: a pod tolerating every taint, or given this node by name, would otherwise leave the cluster.
    """
    namespace = pod["metadata"]["namespace"]
    where = f"virtual node {node_name} (cluster {provider_id})"
    if is_daemonset_pod(pod):
        return (
            DAEMONSET_NOT_OFFLOADED,
            f"DaemonSet pods are never offloaded, so this pod stays Pending on {where}; keep the DaemonSet off"
            f" virtual nodes with a node affinity on catamaran.io/type NotIn [virtual-node] or tolerations that"
            f" do not match the {VIRTUAL_NODE_TAINT_KEY} taint",
        )
    if offloading is None:
        return (
            OFFLOADING_BACKOFF,
            f"namespace {namespace} is not offloaded, so this pod stays Pending on {where}; to offload it, create"
            f" a NamespaceOffloading named {OFFLOADING_NAME!r} in namespace {namespace} whose clusterSelector"
            f" selects {node_name}",
        )
    if offloading["metadata"].get("deletionTimestamp"):
        return (
            OFFLOADING_BACKOFF,
            f"the NamespaceOffloading of namespace {namespace} is being deleted, so this pod stays Pending on {where}",
        )
    if not offloading_selects(offloading, node_labels, node_name):
        return (
            OFFLOADING_BACKOFF,
            f"the clusterSelector of namespace {namespace}'s NamespaceOffloading does not select {where}, so this"
            f" pod stays Pending there; widen spec.clusterSelector to offload it to cluster {provider_id}",
        )
    return None


def token_volumes(spec: dict) -> list[dict]:
    """Projected volumes that carry a service-account token (the kubelet's kube-api-access-* and custom ones)."""
    return [
        volume
        for volume in spec.get("volumes") or []
        if any("serviceAccountToken" in source for source in (volume.get("projected") or {}).get("sources") or [])
    ]


def token_key(volume_name: str, index: int) -> str:
    return f"{volume_name}.token-{index}"


def token_requests(spec: dict) -> list[tuple[str, str | None, int]]:
    """(Secret key, audience, lifetime) of each token the pod's volumes project; no audience means the API server's."""
    requests = []
    for volume in token_volumes(spec):
        for index, source in enumerate(volume["projected"].get("sources") or []):
            token = source.get("serviceAccountToken")
            if token is not None:
                requests.append(
                    (
                        token_key(volume["name"], index),
                        token.get("audience") or None,
                        int(token.get("expirationSeconds") or DEFAULT_TOKEN_EXPIRATION),
                    )
                )
    return requests


def _remote_token_volume(volume: dict, token_secret: str) -> dict:
    """The volume reading the tokens the virtual kubelet stored, the consumer's CA and the local namespace."""
    projected = dict(volume["projected"])
    sources = []
    for index, source in enumerate(projected.get("sources") or []):
        if "serviceAccountToken" in source:
            path = source["serviceAccountToken"]["path"]
            item = {"key": token_key(volume["name"], index), "path": path}
            sources.append({"secret": {"name": token_secret, "items": [item]}})
        elif (source.get("configMap") or {}).get("name") == ROOT_CA_CONFIGMAP:
            sources.append({"configMap": {**source["configMap"], "name": CONSUMER_ROOT_CA_CONFIGMAP}})
        elif "downwardAPI" in source:
            items = source["downwardAPI"].get("items") or []
            # On the provider the pod's namespace is the twin's; the token speaks for the local one.
            namespace_items = [i for i in items if (i.get("fieldRef") or {}).get("fieldPath") == "metadata.namespace"]
            others = [i for i in items if i not in namespace_items]
            if namespace_items:
                secret_items = [{"key": TOKEN_NAMESPACE_KEY, "path": i["path"]} for i in namespace_items]
                sources.append({"secret": {"name": token_secret, "items": secret_items}})
            if others:
                sources.append({"downwardAPI": {**source["downwardAPI"], "items": others}})
        else:
            sources.append(source)
    projected["sources"] = sources
    return {**volume, "projected": projected}


def forge_pod_spec(spec: dict, token_secret: str | None = None) -> dict:
    """The pod spec for the provider. With `token_secret`, token volumes read the Secret the virtual kubelet
    keeps with the consumer's tokens; without it, they are dropped (the provider's tokens mean nothing here)."""
    forged = copy.deepcopy(spec)
    for field in LOCAL_ONLY_SPEC_FIELDS:
        forged.pop(field, None)
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        forged[field] = False
    if forged.get("dnsPolicy") == "ClusterFirstWithHostNet":
        forged["dnsPolicy"] = "ClusterFirst"
    forged["automountServiceAccountToken"] = False
    forged["tolerations"] = [t for t in forged.get("tolerations") or [] if t.get("key") != VIRTUAL_NODE_TAINT_KEY]
    token_names = {v["name"] for v in token_volumes(forged)}
    if token_secret is not None:
        volumes = forged.get("volumes") or []
        forged["volumes"] = [_remote_token_volume(v, token_secret) if v["name"] in token_names else v for v in volumes]
    else:
        forged["volumes"] = [v for v in forged.get("volumes") or [] if v["name"] not in token_names]
        for kind in ("initContainers", "containers"):
            for container in forged.get(kind) or []:
                mounts = [m for m in container.get("volumeMounts") or [] if m["name"] not in token_names]
                if mounts:
                    container["volumeMounts"] = mounts
                else:
                    container.pop("volumeMounts", None)
    for empty in ("volumes", "tolerations"):
        if not forged[empty]:
            forged.pop(empty)
    return forged


def shadowpod_for(
    pod: dict, *, twin_namespace: str, consumer_id: str, provider_id: str, token_secret: str | None = None
) -> dict:
    """The ShadowPod for a local pod: same name, in the twin namespace, spec forged for the provider."""
    meta = pod["metadata"]
    identity = {
        LABEL_ORIGIN_CLUSTER_ID: consumer_id,
        LABEL_DESTINATION_CLUSTER_ID: provider_id,
        LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN,
    }
    annotations = {
        key: value for key, value in (meta.get("annotations") or {}).items() if key not in DROPPED_ANNOTATIONS
    }
    labels = {**(meta.get("labels") or {}), **identity}
    return {
        "apiVersion": f"{OFFLOADING_GROUP}/{VERSION}",
        "kind": "ShadowPod",
        "metadata": {
            "name": meta["name"],
            "namespace": twin_namespace,
            "labels": labels,
            "annotations": {ANNOTATION_LOCAL_POD_UID: meta["uid"], ANNOTATION_LOCAL_NAMESPACE: meta["namespace"]},
        },
        "spec": {
            "pod": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": forge_pod_spec(pod["spec"], token_secret),
            }
        },
    }


class IPTranslator:
    """Maps provider pod IPs into the consumer's remap range, keeping the offset inside the range.

    A remap range smaller than a provider range cannot hold every offset: the IPs that fit are
    translated, the others are left as they are, and `problem` says so (empty when all fit).
    """

    def __init__(self, provider_cidrs: list[str], remap_cidr: str | None):
        self.sources = [ipaddress.ip_network(c, strict=False) for c in provider_cidrs]
        self.target = ipaddress.ip_network(remap_cidr, strict=False) if remap_cidr else None
        self.problem = ""
        if self.target is not None:
            larger = [source for source in self.sources if source.num_addresses > self.target.num_addresses]
            if larger:
                size, prefix = self.target.num_addresses, min(source.prefixlen for source in larger)
                self.problem = (
                    f"remap range {self.target} (spec.networking.podCIDRRemap) holds {size} addresses, fewer than the"
                    f" provider's pod range {', '.join(map(str, larger))}: pod IPs beyond the first {size} of that"
                    f" range are shown untranslated; use a remap range of prefix /{prefix} or shorter"
                )

    def __call__(self, ip: str) -> str:
        if self.target is None or not ip:
            return ip
        address = ipaddress.ip_address(ip)
        for source in self.sources:
            if address in source:
                offset = int(address) - int(source.network_address)
                if offset >= self.target.num_addresses:
                    return ip
                return str(self.target.network_address + offset)
        return ip


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
    local_status: dict, reason: str, message: str, *, now: str, containers: list[tuple[str, str]] = ()
) -> dict:
    """The status of a pod the virtual kubelet does not send (or the provider refused to take): Pending, and why."""
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
    translate: Callable[[str], str],
    provider_reachable: bool,
    now: str,
    containers: list[tuple[str, str]] = (),
) -> dict:
    """The status the consumer's pod should show, from its ShadowPod's status (None: not created yet)."""
    shadow_status = shadow_status or {}
    remote = shadow_status.get("pod") or {}
    local_conditions = {c["type"]: c for c in local_status.get("conditions") or []}
    status: dict = {"phase": remote.get("phase") or shadow_status.get("phase") or "Pending", "hostIP": node_ip}
    status["hostIPs"] = [{"ip": node_ip}]
    conditions = [local_conditions["PodScheduled"]] if "PodScheduled" in local_conditions else []
    conditions += [c for c in remote.get("conditions") or [] if c["type"] != "PodScheduled"]
    failure = next(
        (c for c in shadow_status.get("conditions") or [] if c["type"] == "PodCreated" and c["status"] == "False"),
        None,
    )
    previous_failure = local_conditions.get(REMOTE_CONDITION)
    if failure is not None:
        conditions.append(
            _condition(
                REMOTE_CONDITION,
                "False",
                failure.get("reason", "Failed"),
                failure.get("message", ""),
                (previous_failure or {}).get("lastTransitionTime") or now,
            )
        )
    if not provider_reachable:
        unreachable = [c for c in conditions if c["type"] not in ("Ready", "ContainersReady")]
        message = "the provider cluster's API server is unreachable"
        for kind in ("ContainersReady", "Ready"):
            previous = local_conditions.get(kind) or {}
            since = previous.get("lastTransitionTime") if previous.get("status") == "False" else now
            unreachable.append(_condition(kind, "False", "ProviderUnreachable", message, since or now))
        conditions = unreachable
    status["conditions"] = conditions
    if remote.get("startTime"):
        status["startTime"] = remote["startTime"]
    if remote.get("podIP"):
        status["podIP"] = translate(remote["podIP"])
        status["podIPs"] = [{"ip": translate(entry["ip"])} for entry in remote.get("podIPs") or []] or [
            {"ip": status["podIP"]}
        ]
    recreations = int(shadow_status.get("recreations") or 0)
    for kind in ("initContainerStatuses", "containerStatuses"):
        entries = copy.deepcopy(remote.get(kind) or [])
        for entry in entries:
            entry["restartCount"] = int(entry.get("restartCount") or 0) + recreations
            if not provider_reachable:
                entry["ready"] = False
        if entries:
            status[kind] = entries
    if failure is not None and not remote.get("containerStatuses"):
        status["containerStatuses"] = _waiting_containers(
            list(containers), failure.get("reason", "Failed"), failure.get("message", "")
        )
    elif previous_failure is not None and not remote.get("containerStatuses"):
        status["containerStatuses"] = None  # the waiting reasons were the failure's; it is over
    for field in ("reason", "message"):
        if remote.get(field):
            status[field] = remote[field]
        elif failure is not None:
            status[field] = failure.get(field, "")
        elif previous_failure is not None and local_status.get(field) == previous_failure.get(field):
            status[field] = None  # set for the failure that is over
    return status
