"""Small manifest builders shared by the integration tests and the benchmarks."""

from __future__ import annotations

import copy

from catamaran.constants import VIRTUAL_NODE_TAINT_KEY
from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT

IMAGE = "registry.invalid/app:1"  # never pulled: kwok and the provider's kwok run nothing
# What the Pod Security Standard "restricted" asks of a container: the default level of a tenant on a provider.
RESTRICTED_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def container(name: str = "app", cpu: str | None = None, memory: str | None = None, image: str = IMAGE) -> dict:
    """A container that meets the "restricted" Pod Security Standard, so providers accept it at the default level."""
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value}
    return {
        "name": name,
        "image": image,
        "securityContext": copy.deepcopy(RESTRICTED_SECURITY_CONTEXT),
        **({"resources": {"requests": requests}} if requests else {}),
    }


def to_virtual_node(node: str) -> dict:
    """Pod spec fields that send a pod to virtual node `node` (its name, and its registration taint tolerated)."""
    return {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}],
    }


def deployment(name: str, replicas: int, pod_spec: dict | None = None, namespace: str | None = None) -> dict:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec or {"containers": [container()]}},
        },
    }


def http_service(name: str) -> dict:
    """Service `name` on port 80 for the pods labelled app=<name> serving on 8080."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def unmanaged_node(name: str) -> dict:
    """A Node without the lab's label, like a Catamaran virtual node: kwok leaves it alone, nobody heartbeats it."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"type": "virtual"}}}


# The lab's own image (catamaran-lab build), present on every real node and never pulled.
BUSYBOX = "catamaran.lab/busybox:1.35.0"
REAL_NODE_SELECTOR = {NODE_KIND_LABEL: "real"}
REAL_NODE_TOLERATION = {**REAL_NODE_TAINT, "operator": "Equal"}


def restricted_busybox(command: list[str], **container) -> dict:
    """A pod spec: one busybox container (on every real node, never pulled) running `command`, as nobody,
    restricted."""
    return {
        "terminationGracePeriodSeconds": 1,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "main",
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": command,
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                **container,
            }
        ],
    }


def real_pod(name: str, command: list[str], labels: dict | None = None, **spec) -> dict:
    """A pod for the real node: one busybox container running `command`, as nobody, restricted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeSelector": REAL_NODE_SELECTOR,
            "tolerations": [REAL_NODE_TOLERATION],
            **restricted_busybox(command, **spec.pop("container", {})),
            **spec,
        },
    }
