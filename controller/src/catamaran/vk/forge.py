"""Turn a consumer's pod into the ShadowPod a provider runs, and the remote status back. Pure."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping, Sequence

from ..constants import (
    ANNOTATION_API_SERVER_ACCESS,
    ANNOTATION_LOCAL_NAMESPACE,
    ANNOTATION_LOCAL_POD_UID,
    API_SERVER_ACCESS_HOME,
    API_SERVER_ACCESS_MODES,
    API_SERVER_ACCESS_PROVIDER,
    CONSUMER_ROOT_CA_CONFIGMAP,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    MANAGED_BY_CATAMARAN,
    OFFLOADING_GROUP,
    ROOT_CA_CONFIGMAP,
    TERMINAL_PHASES,
    VERSION,
    VIRTUAL_NODE_TAINT_KEY,
)
from ..networks import judge_announced
from ..objects import changeable_pod_fields
from ..steering import OFFLOADING_NAME, is_daemonset_pod, selector_matches
from .trust import (
    OwnRange,
    Refusal,
    accepted_report,
    bounded_text,
    overlaps,
    provider_networks,
    sanitised_message,
)

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
INVALID_API_SERVER_ACCESS = "InvalidAPIServerAccess"
HELD_REASONS = (OFFLOADING_BACKOFF, DAEMONSET_NOT_OFFLOADED, INVALID_API_SERVER_ACCESS)
# On a local pod while the pod IPs its provider reports are refused (IPTranslator); the pod then shows none.
POD_IP_CONDITION = "catamaran.io/PodIPAccepted"
POD_IP_OUTSIDE_PROVIDER_RANGES = "PodIPOutsideProviderRanges"
POD_IP_NOT_TRANSLATABLE = "PodIPNotTranslatable"
# Every pod IP of a provider refused: its ranges, or the remap range, overlap the consumer's own.
PROVIDER_RANGE_OVERLAPS_CONSUMER = "ProviderRangeOverlapsConsumer"
REMAP_OVERLAPS_CONSUMER = "RemapRangeOverlapsConsumer"
POD_IP_NOT_CONSENTED = "PodIPNotConsented"
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


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
    if (access := api_server_access(pod)) not in API_SERVER_ACCESS_MODES:
        return (
            INVALID_API_SERVER_ACCESS,
            f"annotation {ANNOTATION_API_SERVER_ACCESS}={access!r} is none of {', '.join(API_SERVER_ACCESS_MODES)},"
            f" so this pod stays Pending on {where}",
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


def api_server_access(pod: dict) -> str:
    """The pod's choice of API server for its in-cluster clients (its annotation), `home` when unset."""
    return ((pod["metadata"].get("annotations") or {}).get(ANNOTATION_API_SERVER_ACCESS) or "").strip() or (
        API_SERVER_ACCESS_HOME
    )


def home_api_server_env(home: tuple[str, int]) -> list[dict]:
    """What in-cluster clients read to find the API server, pointing at the consumer's: client-go and most libraries
    read KUBERNETES_SERVICE_HOST/PORT; the others the `kubernetes` Service's docker-link variables (their port name
    stays 443's, as the provider's kubelet names them, so that these override its)."""
    host, port = home
    address = f"[{host}]" if ":" in host else host
    return [
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)},
        {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": str(port)},
        {"name": "KUBERNETES_PORT", "value": f"tcp://{address}:{port}"},
        {"name": "KUBERNETES_PORT_443_TCP", "value": f"tcp://{address}:{port}"},
        {"name": "KUBERNETES_PORT_443_TCP_PROTO", "value": "tcp"},
        {"name": "KUBERNETES_PORT_443_TCP_PORT", "value": str(port)},
        {"name": "KUBERNETES_PORT_443_TCP_ADDR", "value": host},
    ]


def forge_pod_spec(
    spec: dict,
    token_secret: str | None = None,
    *,
    access: str = API_SERVER_ACCESS_HOME,
    home_api_server: tuple[str, int] | None = None,
    local_fields: dict[str, str] | None = None,
) -> dict:
    """The pod spec for the provider.

    `local_fields` (downward API field path -> the local pod's value) are given to the containers' variables as
    values: on the provider the pod's namespace is the twin's and its uid another's.

    `access` home: token volumes read the Secret the virtual kubelet keeps with the consumer's tokens
    (`token_secret`), and with `home_api_server` every container finds the consumer's API server through the
    variables in-cluster clients read (a variable the container sets itself is kept). provider: the provider mounts
    a token of the twin's default ServiceAccount (its own API server, the provider's variables). disabled: no token.
    Without `token_secret`, token volumes are dropped (the provider's tokens mean nothing here).
    """
    forged = copy.deepcopy(spec)
    for field in LOCAL_ONLY_SPEC_FIELDS:
        forged.pop(field, None)
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        forged[field] = False
    if forged.get("dnsPolicy") == "ClusterFirstWithHostNet":
        forged["dnsPolicy"] = "ClusterFirst"
    forged["automountServiceAccountToken"] = access == API_SERVER_ACCESS_PROVIDER
    forged["tolerations"] = [t for t in forged.get("tolerations") or [] if t.get("key") != VIRTUAL_NODE_TAINT_KEY]
    token_names = {v["name"] for v in token_volumes(forged)}
    if access != API_SERVER_ACCESS_HOME:
        token_secret = None
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
    if access == API_SERVER_ACCESS_HOME and home_api_server is not None:
        home_env = home_api_server_env(home_api_server)
        for kind in ("initContainers", "containers"):
            for container in forged.get(kind) or []:
                own = {variable["name"] for variable in container.get("env") or []}
                container["env"] = [*(container.get("env") or []), *(v for v in home_env if v["name"] not in own)]
    local_fields = local_fields or {}
    for kind in ("initContainers", "containers"):
        for container in forged.get(kind) or []:
            for variable in container.get("env") or []:
                path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
                if path in local_fields:
                    variable.pop("valueFrom")
                    variable["value"] = local_fields[path]
    for empty in ("volumes", "tolerations"):
        if not forged[empty]:
            forged.pop(empty)
    return forged


def missing_ephemeral_containers(pod: dict, shadow: dict) -> list[dict] | None:
    """`kubectl debug` added ephemeral containers to the local pod that its ShadowPod lacks: the ShadowPod's whole new
    list (they are only ever added), or None when it holds them all."""
    local = pod["spec"].get("ephemeralContainers") or []
    sent = set(shadow.get("ephemeralContainers") or ())
    if all(container["name"] in sent for container in local):
        return None
    return copy.deepcopy(local)


def template_metadata(pod: dict, consumer_id: str, provider_id: str) -> tuple[dict, dict]:
    """The labels (the pod's and whose it is) and annotations of the remote pod, and of its ShadowPod."""
    meta = pod["metadata"]
    identity = {
        LABEL_ORIGIN_CLUSTER_ID: consumer_id,
        LABEL_DESTINATION_CLUSTER_ID: provider_id,
        LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN,
    }
    annotations = {
        key: value for key, value in (meta.get("annotations") or {}).items() if key not in DROPPED_ANNOTATIONS
    }
    return {**(meta.get("labels") or {}), **identity}, annotations


def changed_template(pod: dict, shadow: dict, consumer_id: str, provider_id: str) -> dict | None:
    """The ShadowPod merge patch carrying the local pod's changes (`changeable_pod_fields`); None when it has them."""
    labels, annotations = template_metadata(pod, consumer_id, provider_id)
    wanted = changeable_pod_fields({"metadata": {"labels": labels, "annotations": annotations}, "spec": pod["spec"]})
    sent = shadow.get("changeable") or {}
    if wanted == sent:
        return None
    metadata = {
        field: {**{key: None for key in sent.get(field) or {} if key not in wanted[field]}, **wanted[field]}
        for field in ("labels", "annotations")
    }
    return {"spec": {"pod": {"metadata": metadata, "spec": {"activeDeadlineSeconds": wanted["activeDeadlineSeconds"]}}}}


def shadowpod_for(
    pod: dict,
    *,
    twin_namespace: str,
    consumer_id: str,
    provider_id: str,
    token_secret: str | None = None,
    home_api_server: tuple[str, int] | None = None,
) -> dict:
    """The ShadowPod for a local pod: same name, in the twin namespace, spec forged for the provider."""
    meta = pod["metadata"]
    labels, annotations = template_metadata(pod, consumer_id, provider_id)
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
                "spec": forge_pod_spec(
                    pod["spec"],
                    token_secret,
                    access=api_server_access(pod),
                    home_api_server=home_api_server,
                    local_fields={"metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"]},
                ),
            }
        },
    }


class IPTranslator:
    """Which provider pod IPs the consumer's pods show, and as what: None for an IP it refuses.

    The provider is trusted only with the pod ranges it announced (its ResourceOffer's status.podCIDRs). Any
    other IP is refused, and so is every IP before it announced any: the consumer's EndpointSlice controller
    builds Service endpoints from pod status, so a provider could otherwise point the consumer's Services at
    the consumer's API server, nodes or pods. With a remap range, an accepted IP is shown at the same offset
    inside it.

    Without a remap range, a provider range that overlaps the consumer's own (`own`: node pod ranges and
    addresses, service range, API server, addresses no pod has) is refused as a whole, and so is a remap range
    that overlaps them: no IP is shown, and `conflict` holds (reason, message). A remap range smaller than a
    provider range (or of another address family) cannot hold every offset: the IPs beyond it are refused too,
    not shown untranslated (they would be addresses the remap was meant to keep apart from the consumer's),
    and `problem` says so; it is empty when every offset fits.

    `consented` (consented_pod_cidrs): the provider's pod ranges the consumer agreed to at peering. An announced
    range outside them is refused (`refused`: (range, reason, why)), and so are its pod IPs; None: no consent to
    check against (mode Flat, or a remap range, which alone is routed, from a peering of an earlier release).
    """

    def __init__(
        self,
        provider_cidrs: list[str],
        remap_cidr: str | None,
        own: tuple[OwnRange, ...] = (),
        consented: Sequence[str] | None = None,
    ):
        self.sources, self.ignored = provider_networks(provider_cidrs)
        self.consented = tuple(consented) if consented is not None else None
        self.refused: list[tuple[str, str, str]] = []
        if self.consented is not None:
            accepted, self.refused = judge_announced([str(s) for s in self.sources], self.consented)
            self.sources = [ipaddress.ip_network(cidr) for cidr in accepted]
        self.target = ipaddress.ip_network(remap_cidr, strict=False) if remap_cidr else None
        self.problem = ""
        self.conflict: tuple[str, str] | None = None
        if self.target is not None:
            problems = []
            larger = [
                s
                for s in self.sources
                if s.version == self.target.version and s.num_addresses > self.target.num_addresses
            ]
            if larger:
                size, prefix = self.target.num_addresses, min(source.prefixlen for source in larger)
                problems.append(
                    f"remap range {self.target} (spec.networking.podCIDRRemap) holds {size} addresses, fewer than the"
                    f" provider's pod range {', '.join(map(str, larger))}: pod IPs beyond the first {size} of that"
                    f" range are refused (their pods show no IP); use a remap range of prefix /{prefix} or shorter"
                )
            if other_family := [s for s in self.sources if s.version != self.target.version]:
                problems.append(
                    f"remap range {self.target} (spec.networking.podCIDRRemap) cannot hold the provider's pod range"
                    f" {', '.join(map(str, other_family))} of another address family: its pod IPs are refused"
                )
            self.problem = "; ".join(problems)
            if overlapping := overlaps(self.target, own):
                self.conflict = (
                    REMAP_OVERLAPS_CONSUMER,
                    f"remap range {self.target} (spec.networking.podCIDRRemap) overlaps the consumer's {overlapping}:"
                    " no pod IP of this provider is shown; choose a remap range the consumer does not use",
                )
        else:
            for source in self.sources:
                if overlapping := overlaps(source, own):
                    self.conflict = (
                        PROVIDER_RANGE_OVERLAPS_CONSUMER,
                        f"the provider's pod range {source} overlaps the consumer's {overlapping}: no pod IP of"
                        " this provider is shown; set spec.networking.podCIDRRemap to a range the consumer does"
                        " not use",
                    )
                    break

    def __call__(self, ip: str) -> str | None:
        if self.conflict is not None:
            return None
        address = _address(ip)
        if address is None:
            return None
        source = next((s for s in self.sources if address in s), None)
        if source is None:
            return None
        if self.target is None:
            return str(address)
        offset = int(address) - int(source.network_address)
        if source.version != self.target.version or offset >= self.target.num_addresses:
            return None
        return str(self.target.network_address + offset)

    def seen_ranges(self) -> list[str]:
        """The provider's pod ranges as the consumer sees them: where its accepted pod IPs are shown."""
        if self.conflict is not None:
            return []
        if self.target is None:
            return [str(source) for source in self.sources]
        return [str(self.target)] if any(s.version == self.target.version for s in self.sources) else []

    def refusal(self, ip: str) -> tuple[str, str]:
        """(reason, message) for the local pod when `ip` is refused."""
        if self.conflict is not None:
            return self.conflict
        shown = repr(str(ip)[:50])
        address = _address(ip)
        if any(address is not None and address in source for source in self.sources):
            return (
                POD_IP_NOT_TRANSLATABLE,
                f"the provider reported pod IP {shown}, which cannot be translated: {self.problem}",
            )
        if address is not None and (refused := self._refused_range(address)) is not None:
            cidr, _, why = refused
            return (
                POD_IP_NOT_CONSENTED,
                f"the provider reported pod IP {shown}, inside its announced range {cidr}, which the consumer refuses"
                f" ({why}): the pod shows no IP, so no Service sends it traffic",
            )
        announced = ", ".join(map(str, self.sources)) or "none yet"
        return (
            POD_IP_OUTSIDE_PROVIDER_RANGES,
            f"the provider reported pod IP {shown}, outside the pod ranges it announced ({announced}): the pod shows"
            " no IP, so no Service sends it traffic",
        )

    def same_as(self, other: IPTranslator) -> bool:
        """Does `other` decide every IP as this one does, and say the same about it?"""
        return self._verdict() == other._verdict()

    def _verdict(self) -> tuple:
        return self.sources, self.target, self.problem, self.conflict, self.ignored, self.consented, self.refused

    def _refused_range(self, address) -> tuple[str, str, str] | None:
        for refused in self.refused:
            network = _network_or_none(refused[0])
            if network is not None and address.version == network.version and address in network:
                return refused
        return None


def consented_pod_cidrs(networking: Mapping) -> list[str] | None:
    """What a ForeignCluster's spec.networking consents to of the provider's announced pod ranges: its podCIDRs,
    which every peering run records; None (no check, the ForeignCluster says NoConsentRecorded) when none are, as in
    a peering of an earlier release until its next run, which must keep its traffic through an upgrade."""
    if "podCIDRs" in networking:
        return list(networking.get("podCIDRs") or [])
    return None


def _network_or_none(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def _address(ip: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(ip) if isinstance(ip, str) else None
    except ValueError:
        return None


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
) -> dict:
    """The status the consumer's pod should show, from its ShadowPod's status (None: not created yet).

    What the provider reports is checked on the way: pod IPs by `translate` (a refused one leaves the pod
    without IP and with a POD_IP_CONDITION saying why; None: not decided yet, the pod keeps what it shows),
    and the rest bounded by the local pod's `spec` (vk/trust.py accepted_report: container statuses only of its
    containers, with its images, restart counts clamped, condition types of a kubelet's only, fields the API takes,
    reasons and messages bounded); report_refusals says what was refused. A pod is not ready while its provider
    cannot be reached, nor while the network fabric's tunnel to it is down (`network_down` says why): Services then
    send nothing to it. Its readiness gates (condition types, set on the local pod by the consumer's controllers) are
    kept and gate Ready, as a kubelet does.
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
    conditions += report.conditions
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
    return status


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
