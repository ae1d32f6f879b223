"""PodController.reconcile (vk/pods.py), the virtual kubelet's heart, against in-memory clusters.

Each case starts a consumer and a provider FakeCluster with what it lists (local pods, ShadowPods), lets the
controller's informers list them as in production, optionally does something first (a user deletes the pod, the
provider refuses), calls reconcile for pod shop/web once, and checks what it returned, the ShadowPod and the local
pod it left, the Events it recorded and the requests it made to the provider. See tests/unit/fakes/.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from catamaran.constants import (
    ANNOTATION_DELETION_GRACE,
    ANNOTATION_LOCAL_NAMESPACE,
    ANNOTATION_LOCAL_POD_UID,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
)
from catamaran.kube.resources import ShadowPod
from tests.unit.fakes.kube import ABSENT, PRESENT, assert_matches
from tests.unit.fakes.offloading import (
    CONSUMER,
    IMAGE,
    NAMESPACE,
    NODE_IP,
    PROVIDER,
    PROVIDER_POD_RANGE,
    TWIN,
    Consumer,
    local_pod,
    remote_running,
    run,
    shadow_of,
    shadow_status,
)

# What a local pod shows of its offloading and of its pod IP (vk/status_back.py), as users read them.
REMOTE_CONDITION = "catamaran.io/RemotePodCreated"
POD_IP_CONDITION = "catamaran.io/PodIPAccepted"

WEB = local_pod()
RUNNING_WEB = local_pod(
    phase="Running",
    status={
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "app",
                "ready": True,
                "restartCount": 0,
                "image": IMAGE,
                "imageID": "",
                "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}},
            }
        ],
    },
)


def condition(kind: str, status: str, reason: str | None = None) -> Callable[[Any], bool]:
    """A conditions list holding `kind` with this status (and reason)."""

    def holds(conditions) -> bool:
        found = next((c for c in conditions or [] if c["type"] == kind), None)
        return found is not None and found["status"] == status and reason in (None, found.get("reason"))

    holds.__name__ = f"condition {kind}={status} ({reason})"
    return holds


def held_back(reason: str) -> dict:
    """A pod kept Pending on the consumer: the reason on the pod, its offloading condition and its container."""
    return {
        "status": {
            "phase": "Pending",
            "reason": reason,
            "conditions": condition(REMOTE_CONDITION, "False", reason),
            "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": reason}}}],
        }
    }


def no_condition(kind: str) -> Callable[[Any], bool]:
    def lacks(conditions) -> bool:
        return all(c["type"] != kind for c in conditions or [])

    lacks.__name__ = f"no condition {kind}"
    return lacks


def raised(code: int) -> Callable[[Any], bool]:
    def refused(result) -> bool:
        return isinstance(result, ApiError) and result.status.code == code

    refused.__name__ = f"ApiError {code}"
    return refused


# -- what happens before the reconcile --------------------------------------------------------------------------------

Step = Callable[[Consumer], Awaitable[None]]


def user_deletes(grace: int | None = None) -> Step:
    async def step(world: Consumer) -> None:
        await world.local.client().delete(Pod, "web", namespace=NAMESPACE, grace_period=grace)

    return step


def provider_deletes_shadow() -> Step:
    async def step(world: Consumer) -> None:
        await world.provider.client().delete(ShadowPod, "web", namespace=TWIN)

    return step


def provider_refuses_create(code: int, message: str) -> Step:
    async def step(world: Consumer) -> None:
        world.provider.fail("create", ShadowPod, code, message, name="web")

    return step


def provider_unreachable() -> Step:
    async def step(world: Consumer) -> None:
        world.nodes.health.healthy = False

    return step


@dataclass
class Case:
    id: str
    pods: tuple = (WEB,)  # local pods
    shadows: tuple = ()  # ShadowPods in the twin
    consumer: dict = field(default_factory=dict)  # Consumer's options
    before: Step | None = None
    returns: Any = None
    shadow: Any = ABSENT  # what ShadowPod web holds (assert_matches), ABSENT: there is none
    pod: Any = PRESENT  # what local pod web holds
    events: frozenset = frozenset()  # (type, reason) of the Events on local pods, all of them
    provider_writes: list = field(default_factory=list)  # the reconcile's writes to the provider, in order


def writes(cluster, since: int) -> list[dict]:
    return [asdict(a) for a in cluster.actions[since:] if a.verb != "get"]


CASES = [
    Case(
        "create: a pod bound to the virtual node gets its ShadowPod in its namespace's twin",
        shadow={
            "metadata": {
                "annotations": {
                    ANNOTATION_LOCAL_POD_UID: WEB["metadata"]["uid"],
                    ANNOTATION_LOCAL_NAMESPACE: NAMESPACE,
                },
                "labels": {LABEL_ORIGIN_CLUSTER_ID: CONSUMER, LABEL_DESTINATION_CLUSTER_ID: PROVIDER},
            },
            "spec": {
                "pod": {
                    "metadata": {"labels": {LABEL_MANAGED_BY: "catamaran"}},
                    "spec": {
                        "containers": [{"name": "app", "image": IMAGE}],
                        "nodeName": ABSENT,
                        "automountServiceAccountToken": False,
                    },
                }
            },
        },
        pod={"status": {"phase": "Pending", "reason": ABSENT}},
        provider_writes=[{"verb": "create", "kind": "ShadowPod", "namespace": TWIN, "name": "web"}],
    ),
    Case(
        "create: nothing for a pod that has already finished",
        pods=(local_pod(phase="Succeeded"),),
    ),
    Case(
        "create: a ShadowPod the provider already has (409) is no error",
        before=provider_refuses_create(409, 'shadowpods.offloading.catamaran.io "web" already exists'),
        provider_writes=[{"verb": "create", "kind": "ShadowPod"}],
    ),
    Case(
        "delete local->remote: the pod deleted with its own grace period, its ShadowPod is deleted in the foreground",
        shadows=(shadow_of(WEB),),
        before=user_deletes(),
        shadow={
            "metadata": {
                "deletionTimestamp": PRESENT,
                "finalizers": ["foregroundDeletion"],
                "annotations": {ANNOTATION_DELETION_GRACE: ABSENT},
            }
        },
        pod={"metadata": {"deletionTimestamp": PRESENT, "deletionGracePeriodSeconds": 30}},
        provider_writes=[
            {"verb": "delete", "kind": "ShadowPod", "grace_period": 30, "cascade": CascadeType.FOREGROUND},
        ],
    ),
    Case(
        "delete local->remote: a grace period other than the pod's own is passed on to the provider's manager",
        shadows=(shadow_of(WEB),),
        before=user_deletes(grace=5),
        shadow={"metadata": {"deletionTimestamp": PRESENT, "annotations": {ANNOTATION_DELETION_GRACE: "5"}}},
        pod={"metadata": {"deletionTimestamp": PRESENT, "deletionGracePeriodSeconds": 5}},
        provider_writes=[
            {"verb": "patch", "kind": "ShadowPod", "patch_type": PatchType.MERGE},
            {"verb": "delete", "kind": "ShadowPod", "grace_period": 5},
        ],
    ),
    Case(
        "delete local->remote: once its ShadowPod is gone, the local pod is released",
        before=user_deletes(),
        pod=ABSENT,
    ),
    Case(
        "delete local->remote: a pod a finalizer keeps shows its containers ended",
        pods=(local_pod(finalizers=["example.com/keep"], status=RUNNING_WEB["status"]),),
        before=user_deletes(),
        pod={
            "metadata": {"deletionTimestamp": PRESENT, "deletionGracePeriodSeconds": 0},
            "status": {
                "phase": "Failed",
                "containerStatuses": [
                    {"ready": False, "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}}}
                ],
            },
        },
    ),
    Case(
        "delete remote->local: a ShadowPod deleted on the provider is made again while its pod runs (recreation)",
        pods=(RUNNING_WEB,),
        shadows=(shadow_of(RUNNING_WEB, uid="first-shadow-uid"),),
        before=provider_deletes_shadow(),
        shadow={"metadata": {"uid": lambda uid: uid != "first-shadow-uid", "deletionTimestamp": ABSENT}},
        pod={"status": {"phase": "Running"}},
        provider_writes=[{"verb": "create", "kind": "ShadowPod"}],
    ),
    Case(
        "orphan: a ShadowPod whose local pod is gone is deleted",
        pods=(),
        shadows=(shadow_of(WEB),),
        shadow={"metadata": {"deletionTimestamp": PRESENT}},
        pod=ABSENT,
        provider_writes=[{"verb": "delete", "kind": "ShadowPod", "grace_period": None}],
    ),
    Case(
        "orphan: one already being deleted is left to go",
        pods=(),
        shadows=(
            {
                **shadow_of(WEB),
                "metadata": {
                    **shadow_of(WEB)["metadata"],
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": ["foregroundDeletion"],
                },
            },
        ),
        shadow={"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},
        pod=ABSENT,
    ),
    Case(
        "UID mismatch: the ShadowPod an earlier pod of that name left is deleted at once, and looked at again",
        shadows=(shadow_of(WEB, local_uid="uid-of-an-earlier-web"),),
        returns=1,
        shadow={
            "metadata": {
                "deletionTimestamp": PRESENT,
                "annotations": {ANNOTATION_LOCAL_POD_UID: "uid-of-an-earlier-web"},
            }
        },
        provider_writes=[{"verb": "delete", "kind": "ShadowPod", "grace_period": 0}],
    ),
    Case(
        "refusal: a pod of a namespace that is not offloaded stays Pending and says why",
        consumer={"offloaded": False, "twin": False},
        pod=held_back("OffloadingBackOff"),
        events=frozenset({("Warning", "OffloadingBackOff")}),
    ),
    Case(
        "refusal: a DaemonSet pod is never offloaded, and one sent before is taken back",
        pods=(local_pod(owner_kind="DaemonSet"),),
        shadows=(shadow_of(local_pod(owner_kind="DaemonSet")),),
        shadow={"metadata": {"deletionTimestamp": PRESENT}},
        pod={"status": {"phase": "Pending", "reason": "DaemonSetNotOffloaded"}},
        events=frozenset({("Warning", "DaemonSetNotOffloaded")}),
        provider_writes=[{"verb": "delete", "kind": "ShadowPod", "grace_period": 0}],
    ),
    Case(
        "refusal: the provider's quota refuses the ShadowPod (403): the pod is held and the error retried",
        before=provider_refuses_create(
            403, 'shadowpods.offloading.catamaran.io "web" is forbidden: exceeded quota: tenant, requested: pods=1'
        ),
        returns=raised(403),
        pod={
            "status": {
                "phase": "Pending",
                "reason": "QuotaExceeded",
                "conditions": condition(REMOTE_CONDITION, "False", "QuotaExceeded"),
            }
        },
        events=frozenset({("Warning", "RemoteQuotaExceeded")}),
        provider_writes=[{"verb": "create", "kind": "ShadowPod"}],
    ),
    Case(
        "refusal: the twin namespace is missing on the provider (its own 404)",
        consumer={"twin_namespace": False},
        returns=raised(404),
        pod={"status": {"phase": "Pending", "reason": "NamespaceMissing"}},
        events=frozenset({("Warning", "RemoteNamespaceMissing")}),
        provider_writes=[{"verb": "create", "kind": "ShadowPod"}],
    ),
    Case(
        "refusal: a provider failing (500) is an Event and a retry, not a held pod",
        before=provider_refuses_create(500, "etcdserver: request timed out"),
        returns=raised(500),
        pod={"status": {"phase": "Pending", "reason": ABSENT}},
        events=frozenset({("Warning", "RemoteCreateFailed")}),
        provider_writes=[{"verb": "create", "kind": "ShadowPod"}],
    ),
    Case(
        "status back: the remote pod's status becomes the local pod's",
        consumer={"provider_cidrs": [PROVIDER_POD_RANGE]},
        shadows=(shadow_of(WEB, status=shadow_status(remote_running("10.245.0.7"))),),
        shadow=PRESENT,
        pod={
            "status": {
                "phase": "Running",
                "podIP": "10.245.0.7",
                "podIPs": [{"ip": "10.245.0.7"}],
                "hostIP": NODE_IP,
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": condition("Ready", "True"),
                "containerStatuses": [
                    {"name": "app", "ready": True, "image": IMAGE, "restartCount": 0, "state": {"running": PRESENT}}
                ],
            }
        },
    ),
    Case(
        "status back: a remote pod not ready yet leaves the local pod not ready",
        consumer={"provider_cidrs": [PROVIDER_POD_RANGE]},
        shadows=(shadow_of(WEB, status=shadow_status(remote_running(ready=False, restarts=2))),),
        shadow=PRESENT,
        pod={
            "status": {
                "phase": "Running",
                "conditions": condition("Ready", "False"),
                "containerStatuses": [{"ready": False, "restartCount": 2}],
            }
        },
    ),
    Case(
        "status back: the provider's refusal to create the pod shows on the local pod",
        shadows=(
            shadow_of(
                WEB,
                status={
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodCreated",
                            "status": "False",
                            "reason": "QuotaExceeded",
                            "message": "exceeds the quota of tenant c1 on this provider: cpu",
                        }
                    ],
                },
            ),
        ),
        shadow=PRESENT,
        pod=held_back("QuotaExceeded"),
        events=frozenset({("Warning", "RemoteQuotaExceeded")}),
    ),
    Case(
        "status back: a provider out of reach makes a running pod not ready",
        consumer={"provider_cidrs": [PROVIDER_POD_RANGE]},
        shadows=(shadow_of(WEB, status=shadow_status(remote_running())),),
        before=provider_unreachable(),
        shadow=PRESENT,
        pod={
            "status": {
                "phase": "Running",
                "conditions": condition("Ready", "False", "ProviderUnreachable"),
                "containerStatuses": [{"ready": False}],
            }
        },
    ),
    Case(
        "update: a label added to the local pod reaches the ShadowPod's template",
        pods=(local_pod(labels={"app": "web", "tier": "front"}),),
        shadows=(shadow_of(local_pod(labels={"app": "web"})),),
        shadow={"spec": {"pod": {"metadata": {"labels": {"app": "web", "tier": "front"}}}}},
        provider_writes=[{"verb": "patch", "kind": "ShadowPod", "patch_type": PatchType.MERGE}],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_reconcile(case: Case):
    async def scenario():
        world = Consumer(**case.consumer)
        for pod in case.pods:
            world.local.add(Pod, pod)
        for shadow in case.shadows:
            world.provider.add(ShadowPod, shadow)
        await world.start()
        if case.before is not None:
            await case.before(world)
            await world.settle()
        since = len(world.provider.actions)
        result = await world.reconcile()
        return world, result, writes(world.provider, since)

    world, result, provider_writes = run(scenario)
    assert_matches(result, case.returns, "returned")
    assert_matches(world.shadow(), case.shadow, "ShadowPod")
    assert_matches(world.pod(), case.pod, "local pod")
    assert world.events() == case.events
    assert_matches(provider_writes, case.provider_writes, "requests to the provider")


# -- IP translation ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("announced", "remap", "reported", "shown", "refusal"),
    [
        pytest.param([PROVIDER_POD_RANGE], None, "10.245.0.7", "10.245.0.7", None, id="inside an announced range"),
        pytest.param(
            ["10.244.0.0/16"], "10.250.0.0/16", "10.244.3.4", "10.250.3.4", None, id="remapped at the same offset"
        ),
        pytest.param(
            ["10.244.0.0/16"],
            None,
            "10.244.3.4",
            None,
            "ProviderRangeOverlapsConsumer",
            id="refused: the provider's range overlaps the consumer's pods and no remap",
        ),
        pytest.param(
            [PROVIDER_POD_RANGE],
            None,
            "192.168.9.9",
            None,
            "PodIPOutsideProviderRanges",
            id="refused: outside every announced range",
        ),
        pytest.param(
            ["10.245.0.0/16"],
            "10.250.0.0/24",
            "10.245.1.4",
            None,
            "PodIPNotTranslatable",
            id="refused: beyond a remap range smaller than the provider's",
        ),
        pytest.param(None, None, "10.245.0.7", None, None, id="nothing announced yet: the pod shows no IP"),
    ],
)
def test_pod_ips_are_translated_on_the_way_back(announced, remap, reported, shown, refusal):
    async def scenario():
        world = Consumer(remap=remap, provider_cidrs=announced)
        world.local.add(Pod, WEB)
        world.provider.add(ShadowPod, shadow_of(WEB, status=shadow_status(remote_running(reported))))
        await world.start()
        await world.reconcile()
        return world

    world = run(scenario)
    ips = [{"ip": shown}] if shown else ABSENT
    conditions = condition(POD_IP_CONDITION, "False", refusal) if refusal else no_condition(POD_IP_CONDITION)
    assert_matches(world.pod(), {"status": {"phase": "Running", "podIP": shown or ABSENT, "podIPs": ips}})
    assert_matches(world.pod()["status"]["conditions"], conditions, "conditions")
    assert world.events() == ({("Warning", "PodIPRefused")} if refusal else set())


# -- over several reconciles ------------------------------------------------------------------------------------------


def test_a_deleted_pod_is_released_only_once_its_shadowpod_is_gone():
    async def scenario():
        world = await Consumer().start()
        world.local.add(Pod, RUNNING_WEB)
        await world.settle()
        assert await world.reconcile() is None
        assert world.shadow() is not None
        await world.local.client().delete(Pod, "web", namespace=NAMESPACE)
        await world.settle()
        assert await world.reconcile() is None
        assert world.shadow()["metadata"]["deletionTimestamp"]
        assert world.pod() is not None, "released before the remote pod went"
        world.provider.collect_garbage()  # the provider removes it (its pod gone)
        await world.settle()
        assert world.shadow() is None
        assert await world.reconcile() is None
        return world

    world = run(scenario)
    assert world.pod() is None
    user, release = world.local.requests("delete", Pod)
    assert (user.grace_period, release.grace_period) == (None, 0)


def test_the_shadowpod_of_an_earlier_pod_gives_way_to_the_new_pods():
    async def scenario():
        world = Consumer()
        world.local.add(Pod, local_pod(uid="new-web"))
        world.provider.add(ShadowPod, shadow_of(local_pod(uid="old-web")))
        await world.start()
        assert await world.reconcile() == 1
        world.provider.collect_garbage()
        await world.settle()
        assert await world.reconcile() is None
        return world

    world = run(scenario)
    assert_matches(
        world.shadow(),
        {"metadata": {"deletionTimestamp": ABSENT, "annotations": {ANNOTATION_LOCAL_POD_UID: "new-web"}}},
    )
