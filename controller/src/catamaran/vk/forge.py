"""Turn a consumer's pod into the ShadowPod a provider runs, or say why it is not sent. Pure.

The status back is vk/status_back.py's; the provider's pod IPs, vk/ip_translation.py's.
"""

from __future__ import annotations

import copy
import hashlib

from .. import quantities
from ..constants import (
    ANNOTATION_API_SERVER_ACCESS,
    ANNOTATION_LOCAL_NAMESPACE,
    ANNOTATION_LOCAL_POD_UID,
    ANNOTATION_STATUS_SOURCE,
    API_SERVER_ACCESS_HOME,
    API_SERVER_ACCESS_MODES,
    API_SERVER_ACCESS_PROVIDER,
    CONSUMER_ROOT_CA_CONFIGMAP,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    LABEL_POOL,
    MANAGED_BY_CATAMARAN,
    OFFLOADING_GROUP,
    ROOT_CA_CONFIGMAP,
    STATUS_SOURCE_POD,
    VERSION,
    VIRTUAL_NODE_TAINT_KEY,
)
from ..objects import changeable_pod_fields, container_resources
from ..steering import OFFLOADING_NAME, is_daemonset_pod, selector_matches

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
# Why a pod bound to the virtual node is never sent to the provider: it stays Pending, saying so.
OFFLOADING_BACKOFF = "OffloadingBackOff"
DAEMONSET_NOT_OFFLOADED = "DaemonSetNotOffloaded"
INVALID_API_SERVER_ACCESS = "InvalidAPIServerAccess"
HELD_REASONS = (OFFLOADING_BACKOFF, DAEMONSET_NOT_OFFLOADED, INVALID_API_SERVER_ACCESS)


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


def token_projections(spec: dict) -> list[tuple[str, int, str | None, int]]:
    """(volume name, source index, audience, lifetime) of each token the pod's volumes project; no audience means
    the API server's."""
    projections = []
    for volume in token_volumes(spec):
        for index, source in enumerate(volume["projected"].get("sources") or []):
            token = source.get("serviceAccountToken")
            if token is not None:
                projections.append((volume["name"], index, *projected_token(token)))
    return projections


def projected_token(token: dict) -> tuple[str | None, int]:
    """(audience, lifetime) of a serviceAccountToken projection; no audience means the API server's."""
    return token.get("audience") or None, int(token.get("expirationSeconds") or DEFAULT_TOKEN_EXPIRATION)


def token_requests(spec: dict) -> list[tuple[str | None, int]]:
    """(audience, lifetime) of each distinct token the pod needs: its service account's token Secret holds one each."""
    return sorted({(audience, seconds) for _, _, audience, seconds in token_projections(spec)}, key=request_order)


def request_order(request: tuple[str | None, int]) -> tuple[str, int]:
    audience, seconds = request
    return audience or "", seconds


def token_key(audience: str | None, seconds: int) -> str:
    """The key of a token in its service account's token Secret: one per audience and lifetime, whatever the volume
    or pod asking for it."""
    if audience is None:
        return f"token.{seconds}s"
    return f"token.{seconds}s.{hashlib.sha256(audience.encode()).hexdigest()[:12]}"


def volume_token_key(volume_name: str, index: int) -> str:
    """The key of a projection's token in a per-pod token Secret, which ShadowPods made by releases before tokens
    were shared per service account still read."""
    return f"{volume_name}.token-{index}"


def _remote_token_volume(volume: dict, token_secret: str) -> dict:
    """The volume reading the tokens the virtual kubelet stored, the consumer's CA and the local namespace."""
    projected = dict(volume["projected"])
    sources = []
    for source in projected.get("sources") or []:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            item = {"key": token_key(*projected_token(token)), "path": token["path"]}
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


def resized_containers(pod: dict, shadow: dict) -> list[dict] | None:
    """A resize of the local pod (`pods/resize`) that its ShadowPod lacks: the JSON patch replacing the resources of
    each container that changed, each guarded by a test of the container's name (the forged spec keeps the local
    order); None when the ShadowPod has them. The provider's manager resizes the remote pod in place."""
    sent = shadow.get("resources") or {}
    wanted = container_resources(pod["spec"])
    operations: list[dict] = []
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(pod["spec"].get(kind) or []):
            name = container["name"]
            if name not in wanted or name not in sent or quantities.same_resources(wanted[name], sent[name]):
                continue
            path = f"/spec/pod/spec/{kind}/{index}"
            operations += [
                {"op": "test", "path": f"{path}/name", "value": name},
                {"op": "replace" if "resources" in container else "remove", "path": f"{path}/resources"}
                | ({"value": container["resources"]} if "resources" in container else {}),
            ]
    return operations or None


def shadowpod_for(
    pod: dict,
    *,
    twin_namespace: str,
    consumer_id: str,
    provider_id: str,
    token_secret: str | None = None,
    home_api_server: tuple[str, int] | None = None,
    pool: str | None = None,
) -> dict:
    """The ShadowPod for a local pod: same name, in the twin namespace, spec forged for the provider; labelled with
    the node pool of the virtual node it is bound to, whose placement and quota the provider gives it."""
    meta = pod["metadata"]
    labels, annotations = template_metadata(pod, consumer_id, provider_id)
    return {
        "apiVersion": f"{OFFLOADING_GROUP}/{VERSION}",
        "kind": "ShadowPod",
        "metadata": {
            "name": meta["name"],
            "namespace": twin_namespace,
            "labels": {**labels, **({LABEL_POOL: pool} if pool else {})},
            "annotations": {
                ANNOTATION_LOCAL_POD_UID: meta["uid"],
                ANNOTATION_LOCAL_NAMESPACE: meta["namespace"],
                ANNOTATION_STATUS_SOURCE: STATUS_SOURCE_POD,  # this virtual kubelet reads the remote Pod's status
            },
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
