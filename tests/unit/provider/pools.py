"""A provider lending tenant c1 two node pools besides its own placement, for the node pool tests.

The tenant's own pods run on the seeded worker (4 CPUs, 8Gi; its placement selects it by hostname), its quota 80 % of
it. Pool `gpu`: the tainted nodes gpu-1 (8 CPUs, 32Gi, 2 example.com/gpu) and gpu-2 (3 CPUs, 16Gi, 1 example.com/gpu),
its quota 50 % of them. Pool `small`: node small-1 (2500m, 4Gi, 50 pods), its quota the tenant's 80 %. Each pool node
has 100Gi of ephemeral-storage.
"""

from __future__ import annotations

from lightkube.resources.core_v1 import Node

from catamaran.constants import LABEL_POOL
from catamaran.provider.offers import TenantTerms
from catamaran.provider.shadowpods import pod_from_shadow
from tests.unit.fakes.offloading import CONSUMER, IMAGE, RESTRICTED_CONTAINER, Provider, provider_shadow, remote_running

GPU_TOLERATION = {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_POOL = {
    "name": "gpu",
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [GPU_TOLERATION],
    "sharingPercentage": 50,
}
SMALL_POOL = {"name": "small", "nodeSelector": {"pool": "small"}}
OWN_PLACEMENT = {"kubernetes.io/hostname": "provider-worker"}
OFFER = {"clusterID": "p1", "nodeSelector": OWN_PLACEMENT, "sharingPercentage": 80, "pools": [GPU_POOL, SMALL_POOL]}
GPU_TAINT = {"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}
DISK = {"ephemeral-storage": "100Gi"}
NODES = {
    "gpu-1": (
        {"pool": "gpu"},
        {"cpu": "8", "memory": "32Gi", "pods": "110", "example.com/gpu": "2", **DISK},
        [GPU_TAINT],
    ),
    "gpu-2": (
        {"pool": "gpu"},
        {"cpu": "3", "memory": "16Gi", "pods": "110", "example.com/gpu": "1", **DISK},
        [GPU_TAINT],
    ),
    "small-1": ({"pool": "small"}, {"cpu": "2500m", "memory": "4Gi", "pods": "50", **DISK}, []),
}


def pool_world(offer: dict | None = None) -> Provider:
    """The provider (not started) with the pools' nodes and the tenant's offer (default OFFER)."""
    world = Provider(offer_spec=offer if offer is not None else OFFER)
    for name, (labels, allocatable, taints) in NODES.items():
        world.cluster.add(
            Node,
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
                "spec": {"taints": taints},
                "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
            },
        )
    return world


def requesting(requests: dict) -> dict:
    """A restricted container with these requests."""
    return {"name": "app", "image": IMAGE, "securityContext": RESTRICTED_CONTAINER, "resources": {"requests": requests}}


def shadow_of_pool(pool: str | None, name: str = "web", **kwargs) -> dict:
    """A ShadowPod (provider_shadow's) whose pod is of `pool`, as the consumer labels it (None: of no pool)."""
    shadow = provider_shadow(name, **kwargs)
    if pool is not None:
        shadow["metadata"]["labels"] = {**shadow["metadata"]["labels"], LABEL_POOL: pool}
    return shadow


def running_pod(shadow: dict, pool: str | None, node: str) -> dict:
    """The Pod the manager made of `shadow` for `pool`, running on `node`."""
    pod = pod_from_shadow(shadow, consumer=CONSUMER, terms=TenantTerms(), pool=pool)
    pod["metadata"]["uid"] = f"remote-uid-{shadow['metadata']['name']}"
    pod["spec"]["nodeName"] = node
    pod["status"] = remote_running()
    return pod


def provider_pod(name: str, node: str, requests: dict) -> dict:
    """A pod of the provider's own on `node`."""
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": IMAGE, "resources": {"requests": requests}}]},
        "status": {"phase": "Running"},
    }
