"""ShadowPodController.reconcile (provider/shadowpods.py), the provider manager's heart, against an in-memory cluster.

Each case starts a provider FakeCluster with the tenant c1, its twin shop-c1 (Pod Security restricted), one worker
of 4 CPUs, and what the case lists (ShadowPods, pods the manager made); the manager's informers list them as in
production; then reconcile runs once for shop-c1/web and the case checks what it returned, the ShadowPod and Pod it
left, the Events it recorded and the requests it made. The last tests run both hearts together. See
tests/unit/fakes/.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from catamaran.constants import (
    ANNOTATION_LOCAL_POD_UID,
    ANNOTATION_RECREATIONS,
    LABEL_MANAGED_BY,
    LABEL_ORIGIN_CLUSTER_ID,
    TENANT_PRIORITY_CLASS,
)
from catamaran.kube.resources import ShadowPod
from catamaran.provider.shadowpods import made_for_a_shadowpod
from tests.unit.fakes.kube import ABSENT, PRESENT, assert_matches
from tests.unit.fakes.offloading import (
    CONSUMER,
    IMAGE,
    NAMESPACE,
    PROVIDER_POD_RANGE,
    RESTRICTED_CONTAINER,
    TWIN,
    Consumer,
    Provider,
    local_pod,
    made_pod,
    outcome,
    provider_shadow,
    remote_running,
    run,
    shadow_status,
)

SHADOW = provider_shadow()
POD = made_pod(SHADOW)  # running, owned by SHADOW
CURRENT = shadow_status(remote_running(), pod_uid=POD["metadata"]["uid"])  # what SHADOW says once POD is reported
# Made by an earlier virtual kubelet, which reads the pod's status from its ShadowPod: the manager copies it there.
COPYING = provider_shadow(copies_status=True)
PRIVILEGED = {"privileged": True}


def pod_created(status: str, reason: str) -> list:
    """A ShadowPod's conditions: PodCreated only, with this status and reason."""
    return [{"type": "PodCreated", "status": status, "reason": reason, "message": PRESENT}]


def refused_status(reason: str) -> dict:
    """A ShadowPod's status as a refusal left it (_report_refusal)."""
    condition = {"type": "PodCreated", "status": "False", "reason": reason, "message": "no", "lastTransitionTime": "x"}
    return {"phase": "Pending", "conditions": [condition]}


def ephemeral(name: str, context: dict) -> dict:
    return {"name": name, "image": "busybox:1.36", "targetContainerName": "app", "securityContext": context}


Step = Callable[[Provider], Awaitable[None]]


def api_refuses_pod(code: int, message: str) -> Step:
    async def step(world: Provider) -> None:
        world.cluster.fail("create", Pod, code, message, name="web")

    return step


def api_refuses_resize(code: int, message: str) -> Step:
    async def step(world: Provider) -> None:
        world.cluster.fail("patch", Pod.Resize, code, message, name="web")

    return step


def resize_refused(reason: str) -> Callable[[list], bool]:
    """Conditions saying the pod is not resized as asked (PodResized False) for `reason`, with a message."""

    def holds(conditions: list) -> bool:
        said = [(c["status"], c["reason"], bool(c["message"])) for c in conditions if c["type"] == "PodResized"]
        return said == [("False", reason, True)]

    return holds


def refused_resize(status: dict) -> dict:
    """`status` with a resize refused."""
    condition = {
        "type": "PodResized",
        "status": "False",
        "reason": "Deferred",
        "message": "no",
        "lastTransitionTime": "x",
    }
    return {**status, "conditions": [*status.get("conditions", []), condition]}


@dataclass
class Case:
    id: str
    shadows: tuple = (SHADOW,)
    pods: tuple = ()  # pods in the twin
    before: Step | None = None
    returns: Any = None
    shadow: Any = PRESENT  # what ShadowPod web holds (assert_matches)
    pod: Any = ABSENT  # what Pod web holds, ABSENT: there is none
    events: frozenset = frozenset()  # (type, reason) of the Events on ShadowPods, all of them
    writes: list = field(default_factory=list)  # the reconcile's writes, in order (Events aside)


def requesting(requests: dict) -> dict:
    """A restricted container with these requests."""
    return {"name": "app", "image": IMAGE, "securityContext": RESTRICTED_CONTAINER, "resources": {"requests": requests}}


def refused(reason: str, returns: Any = 300) -> dict:
    """What a refusal by the terms leaves: no pod, PodCreated=False with the reason, one Warning Event."""
    return {
        "returns": returns,
        "shadow": {"status": {"phase": "Pending", "conditions": pod_created("False", reason)}},
        "pod": ABSENT,
        "events": frozenset({("Warning", reason)}),
    }


CASES = [
    Case(
        "create: a ShadowPod gets its Pod, owned by it, on the tenant's terms",
        shadow={"status": ABSENT},
        pod={
            "metadata": {
                "labels": {LABEL_MANAGED_BY: "catamaran", LABEL_ORIGIN_CLUSTER_ID: CONSUMER},
                "annotations": {ANNOTATION_LOCAL_POD_UID: ABSENT},
                "ownerReferences": [
                    {"kind": "ShadowPod", "name": "web", "uid": "shadow-uid-web", "controller": True},
                ],
            },
            "spec": {
                "containers": [
                    {"name": "app", "image": IMAGE, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
                ],
                "priorityClassName": TENANT_PRIORITY_CLASS,
                "serviceAccountName": "default",
                "automountServiceAccountToken": False,
                "nodeName": ABSENT,
            },
            "status": {"phase": "Pending"},
        },
        writes=[{"verb": "create", "kind": "Pod", "namespace": TWIN, "name": "web"}],
    ),
    Case(
        "create: none for a ShadowPod whose pod finished and is gone",
        shadows=(provider_shadow(status=shadow_status({"phase": "Succeeded"})),),
        shadow={"status": {"phase": "Succeeded"}},
    ),
    Case(
        "create: a pod of that name the manager did not make (409) is never adopted, and the ShadowPod says so",
        pods=({"metadata": {"name": "web", "namespace": TWIN}, "spec": {"containers": [{"name": "x", "image": "x"}]}},),
        returns=300,
        shadow={"status": {"phase": "Pending", "conditions": pod_created("False", "PodNameTaken")}},
        pod={"metadata": {"ownerReferences": ABSENT}},
        events=frozenset({("Warning", "PodNameTaken")}),
        writes=[
            {"verb": "create", "kind": "Pod"},
            {"verb": "patch", "kind": "ShadowPod", "subresource": "status", "patch_type": PatchType.MERGE},
        ],
    ),
    Case(
        "refusal: a pod spec field the terms refuse",
        shadows=(provider_shadow(runtimeClassName="kata"),),
        **refused("FieldNotAllowed"),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status", "patch_type": PatchType.MERGE}],
    ),
    Case(
        "refusal: a privileged container breaks the tenant's Pod Security level",
        shadows=(provider_shadow(containers=[{"name": "app", "image": IMAGE, "securityContext": PRIVILEGED}]),),
        **refused("PodSecurityViolation"),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "refusal: more than the tenant's quota (90 % of 4 CPUs) on a node that could hold it",
        shadows=(provider_shadow(containers=[requesting({"cpu": "3800m"})]),),
        **refused("QuotaExceeded"),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "refusal: more than any node the tenant may use has (its one worker: 4 CPUs), however free the quota",
        shadows=(provider_shadow(containers=[requesting({"cpu": "8"})]),),
        **refused("Infeasible"),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "refusal: an extended resource no node the tenant may use has",
        shadows=(provider_shadow(containers=[requesting({"cpu": "1", "example.com/gpu": "1"})]),),
        **refused("Infeasible"),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "refusal: a ShadowPod whose pod is of another consumer namespace than its twin's",
        shadows=(provider_shadow(local_namespace="elsewhere"),),
        **refused("ForeignNamespace"),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "refusal: the API server's ResourceQuota refuses the pod (403)",
        before=api_refuses_pod(403, 'pods "web" is forbidden: exceeded quota: compute, requested: cpu=100m'),
        **refused("QuotaExceeded", returns=15),
        writes=[{"verb": "create", "kind": "Pod"}, {"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "refusal: an admission webhook denies the pod (400)",
        before=api_refuses_pod(400, 'admission webhook "policy.example.com" denied the request: no'),
        **refused("AdmissionRejected", returns=15),
        writes=[{"verb": "create", "kind": "Pod"}, {"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "UID mismatch: a pod of that name owned by an earlier ShadowPod is a conflict, looked at again later",
        pods=(made_pod(provider_shadow(uid="earlier-shadow-uid")),),
        returns=30,
        shadow={"status": {"conditions": pod_created("False", "Conflict")}},
        pod={"metadata": {"ownerReferences": [{"uid": "earlier-shadow-uid"}], "deletionTimestamp": ABSENT}},
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "status: a pod running as it should costs its ShadowPod no write (the virtual kubelet reads the Pod)",
        pods=(POD,),
        shadow={"status": ABSENT},
        pod=PRESENT,
    ),
    Case(
        "status: a recreated pod (stamped with its recreations) is recorded with its uid, and said",
        pods=(made_pod(SHADOW, recreations=2),),
        shadow={"status": {"podUID": POD["metadata"]["uid"], "recreations": 2, "pod": ABSENT, "phase": ABSENT}},
        pod=PRESENT,
        events=frozenset({("Normal", "PodRecreated")}),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status", "patch_type": PatchType.MERGE}],
    ),
    Case(
        "status: the final status of a pod that ended is recorded, which keeps it from being made again",
        pods=(made_pod(SHADOW, status={"phase": "Succeeded", "reason": "Completed"}),),
        shadow={"status": {"phase": "Succeeded", "podUID": POD["metadata"]["uid"], "pod": {"phase": "Succeeded"}}},
        pod=PRESENT,
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "status: the end of a refusal is recorded, and the Pending it recorded dropped",
        shadows=(provider_shadow(status=refused_status("QuotaExceeded")),),
        pods=(POD,),
        shadow={"status": {"phase": ABSENT, "conditions": pod_created("True", "Created"), "pod": ABSENT}},
        pod=PRESENT,
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "status back (earlier virtual kubelets): the pod's status is copied to its ShadowPod",
        shadows=(COPYING,),
        pods=(made_pod(COPYING),),
        shadow={
            "status": {
                "phase": "Running",
                "podUID": POD["metadata"]["uid"],
                "pod": {"podIP": "10.245.0.7", "containerStatuses": [{"name": "app", "ready": True}]},
                "conditions": pod_created("True", "Created"),
                "recreations": ABSENT,
            }
        },
        pod=PRESENT,
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status", "patch_type": PatchType.MERGE}],
    ),
    Case(
        "status back (earlier virtual kubelets): nothing is written while nothing the consumer shows changed",
        shadows=(provider_shadow(status=CURRENT, copies_status=True),),
        pods=(made_pod(COPYING),),
        pod=PRESENT,
    ),
    Case(
        "status back (earlier virtual kubelets): a pod no longer ready is reported",
        shadows=(provider_shadow(status=CURRENT, copies_status=True),),
        pods=(made_pod(COPYING, status=remote_running(ready=False)),),
        shadow={"status": {"pod": {"conditions": lambda found: {"type": "Ready", "status": "False"} in found}}},
        pod=PRESENT,
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "recreation (earlier virtual kubelets): a pod in place of the one reported is counted and said",
        shadows=(
            provider_shadow(status=shadow_status(remote_running(), pod_uid="first-remote-uid"), copies_status=True),
        ),
        pods=(made_pod(COPYING),),
        shadow={"status": {"podUID": POD["metadata"]["uid"], "recreations": 1}},
        pod=PRESENT,
        events=frozenset({("Normal", "PodRecreated")}),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "recreation: an evicted pod is deleted at once, to be made again",
        shadows=(provider_shadow(status=CURRENT),),
        pods=(made_pod(SHADOW, status={"phase": "Failed", "reason": "Evicted"}),),
        writes=[{"verb": "delete", "kind": "Pod", "grace_period": 0}],
    ),
    Case(
        "recreation: a pod still terminating is waited for",
        shadows=(provider_shadow(status=CURRENT),),
        pods=(made_pod(SHADOW, deleting=True),),
        pod={"metadata": {"deletionTimestamp": PRESENT}},
    ),
    Case(
        "delete: a ShadowPod deleted with the local pod's grace period passes it to its pod",
        shadows=(provider_shadow(deleting=True, grace=5, status=CURRENT),),
        pods=(POD,),
        shadow={"metadata": {"deletionTimestamp": PRESENT}},
        pod={"metadata": {"deletionTimestamp": PRESENT, "deletionGracePeriodSeconds": 5}},
        writes=[{"verb": "delete", "kind": "Pod", "grace_period": 5}],
    ),
    Case(
        "delete: a ShadowPod deleted without one leaves its pod to the garbage collector, still reporting it",
        shadows=(provider_shadow(deleting=True, copies_status=True),),
        pods=(made_pod(COPYING),),
        shadow={"status": {"phase": "Running"}},
        pod={"metadata": {"deletionTimestamp": ABSENT}},
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "orphan: a pod whose ShadowPod is gone is left to the garbage collector",
        shadows=(),
        pods=(POD,),
        shadow=ABSENT,
        pod={"metadata": {"deletionTimestamp": ABSENT}},
    ),
    Case(
        "update: a label the consumer added reaches the running pod",
        shadows=(provider_shadow(labels={"app": "web", "tier": "front"}, status=CURRENT),),
        pods=(made_pod(provider_shadow(labels={"app": "web"})),),
        pod={"metadata": {"labels": {"app": "web", "tier": "front"}}},
        writes=[{"verb": "patch", "kind": "Pod", "subresource": None, "patch_type": PatchType.MERGE}],
    ),
    Case(
        "update: a deadline raised is refused by the API server (422) and said in an Event",
        shadows=(provider_shadow(activeDeadlineSeconds=600, status=CURRENT),),
        pods=(made_pod(provider_shadow(activeDeadlineSeconds=300)),),
        pod={"spec": {"activeDeadlineSeconds": 300}},
        events=frozenset({("Warning", "RemotePodUpdateRefused")}),
        writes=[{"verb": "patch", "kind": "Pod"}],
    ),
    Case(
        "resize: the ShadowPod's new requests reach the running pod in place (pods/resize), no status written",
        shadows=(provider_shadow(containers=[requesting({"cpu": "300m"})], status=CURRENT),),
        pods=(made_pod(provider_shadow(containers=[requesting({"cpu": "100m"})])),),
        pod={
            "metadata": {"uid": "remote-uid-web"},
            "spec": {"containers": [{"resources": {"requests": {"cpu": "300m"}}}]},
        },
        writes=[{"verb": "patch", "kind": "Pod", "subresource": "resize", "patch_type": PatchType.STRATEGIC}],
    ),
    Case(
        "resize: none when the pod has the same amounts in the API server's own words (1000m is 1)",
        shadows=(provider_shadow(containers=[requesting({"cpu": "1000m"})], status=CURRENT),),
        pods=(made_pod(provider_shadow(containers=[requesting({"cpu": "1"})])),),
        pod=PRESENT,
    ),
    Case(
        "resize: past the tenant's whole quota (90 % of 4 CPUs) is Infeasible, the pod left as it is",
        shadows=(provider_shadow(containers=[requesting({"cpu": "3800m"})], status=CURRENT),),
        pods=(made_pod(provider_shadow(containers=[requesting({"cpu": "100m"})])),),
        returns=300,
        shadow={"status": {"conditions": resize_refused("Infeasible")}},
        pod={"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}},
        events=frozenset({("Warning", "ResizeRefused")}),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "resize: past what the tenant's other pods leave of its quota is Deferred",
        shadows=(provider_shadow(containers=[requesting({"cpu": "1"})], status=CURRENT),),
        pods=(
            made_pod(provider_shadow(containers=[requesting({"cpu": "100m"})])),
            made_pod(provider_shadow("db", containers=[requesting({"cpu": "3"})])),
        ),
        returns=300,
        shadow={"status": {"conditions": resize_refused("Deferred")}},
        pod={"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}},
        events=frozenset({("Warning", "ResizeRefused")}),
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "resize: the provider's API server refusing it (its ResourceQuota) is said as Infeasible",
        shadows=(provider_shadow(containers=[requesting({"cpu": "300m"})], status=CURRENT),),
        pods=(made_pod(provider_shadow(containers=[requesting({"cpu": "100m"})])),),
        before=api_refuses_resize(403, 'pods "web" is forbidden: exceeded quota: compute, requested: cpu=200m'),
        returns=300,
        shadow={"status": {"conditions": resize_refused("Infeasible")}},
        pod={"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}},
        events=frozenset({("Warning", "ResizeRefused")}),
        writes=[{"verb": "patch", "kind": "Pod", "subresource": "resize"}, {"verb": "patch", "kind": "ShadowPod"}],
    ),
    Case(
        "resize: once the pod has the ShadowPod's resources, the refusal is taken back",
        shadows=(provider_shadow(containers=[requesting({"cpu": "300m"})], status=refused_resize(CURRENT)),),
        pods=(made_pod(provider_shadow(containers=[requesting({"cpu": "300m"})])),),
        shadow={"status": {"conditions": lambda found: all(c["type"] != "PodResized" for c in found)}},
        pod=PRESENT,
        writes=[{"verb": "patch", "kind": "ShadowPod", "subresource": "status"}],
    ),
    Case(
        "ephemeral containers: kubectl debug's container joins the running pod",
        shadows=(provider_shadow(ephemeral_containers=[ephemeral("debugger", RESTRICTED_CONTAINER)], status=CURRENT),),
        pods=(POD,),
        pod={"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox:1.36"}]}},
        events=frozenset({("Normal", "EphemeralContainersAdded")}),
        writes=[{"verb": "patch", "kind": "Pod", "subresource": "ephemeralcontainers"}],
    ),
    Case(
        "ephemeral containers: a privileged one is refused, the pod left as it is",
        shadows=(provider_shadow(ephemeral_containers=[ephemeral("debugger", PRIVILEGED)], status=CURRENT),),
        pods=(POD,),
        pod={"spec": {"ephemeralContainers": ABSENT}},
        events=frozenset({("Warning", "EphemeralContainersRefused")}),
    ),
]


def writes(cluster, since: int) -> list[dict]:
    return [asdict(a) for a in cluster.actions[since:] if a.verb != "get" and a.kind != "Event"]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_reconcile(case: Case):
    async def scenario():
        world = Provider()
        for shadow in case.shadows:
            world.cluster.add(ShadowPod, shadow)
        for pod in case.pods:
            world.cluster.add(Pod, pod)
        await world.start()
        if case.before is not None:
            await case.before(world)
        since = len(world.cluster.actions)
        result = await world.reconcile()
        return world, result, writes(world.cluster, since)

    world, result, made = run(scenario)
    assert_matches(result, case.returns, "returned")
    assert_matches(world.shadow(), case.shadow, "ShadowPod")
    assert_matches(world.pod(), case.pod, "Pod")
    assert world.events() == case.events
    assert_matches(made, case.writes, "requests")


def test_a_refusal_is_said_once_however_often_it_is_looked_at():
    async def scenario():
        world = Provider()
        world.cluster.add(ShadowPod, provider_shadow(runtimeClassName="kata"))
        await world.start()
        return world, [await world.reconcile() for _ in range(3)]

    world, results = run(scenario)
    assert results == [300, 300, 300]
    assert len(world.cluster.requests("patch", ShadowPod)) == 1
    assert len(world.cluster.events(TWIN)) == 1


def test_a_pod_gone_is_made_again_stamped_with_its_recreations_and_its_shadowpod_counts_it():
    async def scenario():
        world = Provider()
        world.cluster.add(ShadowPod, SHADOW)
        await world.start()
        await world.reconcile()  # the pod
        first = world.run_pod()
        await world.settle()
        await world.reconcile()  # its status
        await world.cluster.client().delete(Pod, "web", namespace=TWIN, grace_period=0)  # a node lost, say
        await world.settle()
        await world.reconcile()  # a new pod
        second = world.run_pod()
        await world.settle()
        await world.reconcile()  # its status
        return world, first, second

    world, first, second = run(scenario)
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert ANNOTATION_RECREATIONS not in first["metadata"]["annotations"]
    assert second["metadata"]["annotations"][ANNOTATION_RECREATIONS] == "1"
    # Only the recreation is written: the virtual kubelet reads the running pod's status from the Pod.
    assert_matches(world.shadow(), {"status": {"phase": ABSENT, "podUID": second["metadata"]["uid"], "recreations": 1}})
    assert world.events() == {("Normal", "PodRecreated")}
    assert len(world.cluster.requests("patch", ShadowPod.Status)) == 1


def test_a_recreation_is_counted_after_the_manager_restarted_once_the_shadowpod_recorded_a_pod():
    """A pod gone while the manager was down: its successor counts one more than the ShadowPod recorded."""

    async def scenario():
        world = Provider()
        world.cluster.add(ShadowPod, provider_shadow(status={"podUID": "gone-uid", "recreations": 2}))
        await world.start()
        await world.reconcile()
        return world.pod()

    assert run(scenario)["metadata"]["annotations"][ANNOTATION_RECREATIONS] == "3"


# -- both hearts ------------------------------------------------------------------------------------------------------


def test_a_pod_goes_out_runs_there_comes_back_after_a_recreation_and_is_deleted_on_both_sides():
    """The consumer's virtual kubelet and the provider's manager on one provider cluster, each reconciling in turn
    as their work queues would; the provider's scheduler, kubelet and garbage collector played by the test."""

    async def scenario():
        provider = await Provider().start()
        consumer = await Consumer(provider=provider.cluster, provider_cidrs=[PROVIDER_POD_RANGE]).start()
        consumer.local.add(Pod, local_pod())
        await consumer.settle()

        async def both():
            await consumer.reconcile()
            await provider.reconcile()
            await consumer.reconcile()

        await both()  # out: a ShadowPod, then its Pod
        provider.run_pod(status=remote_running("10.245.0.9"))
        await consumer.settle()
        await provider.reconcile()
        await consumer.reconcile()
        running = consumer.pod()

        await provider.cluster.client().delete(Pod, "web", namespace=TWIN, grace_period=0)
        await consumer.settle()
        await provider.reconcile()  # made again
        provider.run_pod(status=remote_running("10.245.0.10"))
        await consumer.settle()
        await provider.reconcile()
        await consumer.reconcile()
        recreated = consumer.pod()

        await consumer.local.client().delete(Pod, "web", namespace=NAMESPACE)
        await consumer.settle()
        await both()
        provider.cluster.collect_garbage()  # the ShadowPod's Pod goes first (foreground), terminating
        provider.cluster.finish_pod("web", TWIN)  # its kubelet saw the containers end
        provider.cluster.collect_garbage()  # then the ShadowPod
        await consumer.settle()
        await consumer.reconcile()
        return consumer, provider, running, recreated

    consumer, provider, running, recreated = run(scenario)
    assert_matches(running, {"status": {"phase": "Running", "podIP": "10.245.0.9", "hostIP": PRESENT}})
    assert_matches(
        recreated, {"status": {"podIP": "10.245.0.10", "containerStatuses": [{"name": "app", "restartCount": 1}]}}
    )
    assert provider.events() == {("Normal", "PodRecreated")}
    assert (consumer.pod(), provider.shadow(), provider.pod()) == (None, None, None)


def test_a_pod_of_the_name_is_waited_out_only_when_the_manager_made_it_for_a_shadowpod():
    """The 409 on create: an earlier incarnation (the manager's pod view may lag its deletion) is waited out."""
    assert made_for_a_shadowpod(made_pod(provider_shadow(uid="shadow-uid-old"), deleting=True))
    assert not made_for_a_shadowpod({"metadata": {"name": "web", "labels": {LABEL_MANAGED_BY: "catamaran"}}})
    assert not made_for_a_shadowpod({"metadata": {"name": "web"}})


def test_a_cordoned_tenant_gets_no_new_pod_and_keeps_its_running_ones():
    """spec.cordon: the new ShadowPod is refused with the provider's reason; one whose pod runs is left as it is."""
    cordon = {"cordon": {"reason": "maintenance until Monday"}}

    async def scenario():
        fresh = Provider(offer_spec=cordon)
        fresh.cluster.add(ShadowPod, SHADOW)
        await fresh.start()
        refused_returns = await fresh.reconcile()
        running = Provider(offer_spec=cordon)
        running.cluster.add(ShadowPod, provider_shadow(status=CURRENT))
        running.cluster.add(Pod, POD)
        await running.start()
        since = len(running.cluster.actions)
        await running.reconcile()
        return fresh, refused_returns, running, writes(running.cluster, since)

    fresh, refused_returns, running, running_writes = run(scenario)
    assert refused_returns == 300
    (created,) = [c for c in fresh.shadow()["status"]["conditions"] if c["type"] == "PodCreated"]
    assert (created["status"], created["reason"]) == ("False", "TenantCordoned")
    assert created["message"] == "the provider lends this tenant nothing new: maintenance until Monday"
    assert fresh.pod() is None
    assert fresh.events() == frozenset({("Warning", "TenantCordoned")})
    assert running.pod() is not None
    assert running_writes == []


def test_a_resize_on_the_consumer_reaches_the_remote_pod_in_place_and_its_report_comes_back():
    """kubectl's `--subresource resize` on the local pod: its ShadowPod follows, the manager resizes the same remote
    pod (no recreation), and what the remote kubelet then reports of the container's resources reaches the local pod."""

    async def scenario():
        provider = await Provider().start()
        consumer = await Consumer(provider=provider.cluster, provider_cidrs=[PROVIDER_POD_RANGE]).start()
        consumer.local.add(Pod, local_pod(containers=[requesting({"cpu": "100m"})]))
        await consumer.settle()
        await consumer.reconcile()
        await provider.reconcile()
        provider.run_pod(status=remote_running("10.245.0.9"))
        await consumer.settle()
        await provider.reconcile()
        await consumer.reconcile()
        first_uid = provider.pod()["metadata"]["uid"]

        resize = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "300m"}}}]}}
        await consumer.local.client().patch(
            Pod.Resize, "web", resize, namespace=NAMESPACE, patch_type=PatchType.STRATEGIC
        )
        await consumer.settle()
        await consumer.reconcile()  # the ShadowPod asks for it
        await provider.reconcile()  # the pod is resized

        def kubelet_resized(pod: dict) -> None:
            entry = pod["status"]["containerStatuses"][0]
            entry["resources"] = pod["spec"]["containers"][0]["resources"]
            entry["allocatedResources"] = pod["spec"]["containers"][0]["resources"]["requests"]

        provider.cluster.update(Pod, "web", TWIN, kubelet_resized)
        await consumer.settle()
        await provider.reconcile()  # its status back
        await consumer.reconcile()
        return consumer, provider, first_uid

    consumer, provider, first_uid = run(scenario)
    assert_matches(
        provider.pod(),
        {"metadata": {"uid": first_uid}, "spec": {"containers": [{"resources": {"requests": {"cpu": "300m"}}}]}},
    )
    assert provider.shadow()["spec"]["pod"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "300m"}}
    shown = consumer.pod()["status"]["containerStatuses"][0]
    assert (shown["resources"]["requests"]["cpu"], shown["allocatedResources"]["cpu"]) == ("300m", "300m")
    assert provider.events() == set()


def test_neither_side_reconciles_its_own_writes_coming_back_and_each_reconciles_the_others():
    """Each side's work queue is told of the other side's writes and of the provider's scheduler and kubelet, never
    of the echo of its own creation or status write; a reconcile begun before an echo arrived has it told after all
    (kube/echoes.py). The virtual kubelet hears of the running pod from the Pod itself, not from its ShadowPod, and the
    manager, which has nothing to write for it, is not told of its reports."""

    async def scenario():
        provider = await Provider().start()
        consumer = await Consumer(provider=provider.cluster, provider_cidrs=[PROVIDER_POD_RANGE]).start()
        consumer.local.add(Pod, local_pod())
        await consumer.settle()
        told: list[tuple[str, str]] = []
        consumer.pods.queue.add = lambda key, delay=0: told.append(("consumer", key[1]))
        provider.shadowpods.queue.add = lambda key, delay=0: told.append(("provider", key[1]))

        async def step(what: str, action) -> list[tuple[str, str]]:
            told.clear()
            await action()
            await consumer.settle()
            return [what, *told]

        async def run_pod():
            provider.run_pod(status=remote_running("10.245.0.9"))

        steps = [
            await step("ShadowPod created", consumer.reconcile),
            await step("Pod created", provider.reconcile),
            await step("Pod running", run_pod),
            await step("the manager finds nothing to write", provider.reconcile),
            await step("local status written", consumer.reconcile),
        ]
        # The consumer writes the local status again, then reconciles before its echo arrives: that reconcile read a
        # cache without the write, so the echo is told.
        consumer.local.update(Pod, "web", NAMESPACE, lambda pod: pod["status"].update(phase="Pending"))
        await consumer.settle()
        told.clear()
        await outcome(consumer.pods.reconcile((NAMESPACE, "web")))
        await outcome(consumer.pods.reconcile((NAMESPACE, "web")))
        await consumer.settle()
        steps.append(["reconciled twice before the echo", *told])
        return consumer, steps

    consumer, steps = run(scenario)
    assert steps == [
        ["ShadowPod created", ("provider", "web")],
        ["Pod created"],
        ["Pod running", ("consumer", "web")],
        ["the manager finds nothing to write"],
        ["local status written"],
        ["reconciled twice before the echo", ("consumer", "web")],
    ]
    assert consumer.pod()["status"]["phase"] == "Running"


def test_the_pod_of_a_shadowpod_the_tenant_wrote_itself_is_never_the_virtual_kubelets():
    """A ShadowPod without the local namespace a virtual kubelet names has no local pod: its Pod running tells the
    virtual kubelet nothing, so its reconcile never takes the ShadowPod for an orphan and deletes it."""

    async def scenario():
        provider = await Provider().start()
        consumer = await Consumer(provider=provider.cluster, provider_cidrs=[PROVIDER_POD_RANGE]).start()
        written = provider_shadow()
        del written["metadata"]["annotations"]["catamaran.io/local-namespace"]
        provider.cluster.add(ShadowPod, written)
        await consumer.settle()
        told: list = []
        consumer.pods.queue.add = lambda key, delay=0: told.append(key)
        await provider.reconcile()  # its Pod
        provider.run_pod()
        await consumer.settle()
        return told, provider

    told, provider = run(scenario)
    assert provider.pod()["status"]["phase"] == "Running", "the control: the Pod ran"
    assert told == []
    assert provider.shadow() is not None


def test_the_manager_is_told_of_a_running_pods_reports_only_where_it_acts_on_them():
    """A running pod's reports reach the manager's queue when it has something to do with them: the pod ended (its
    final status is recorded) or was evicted, the virtual kubelet reads the status from its ShadowPod (an earlier
    one's: copied), a refusal is to be ended, a recreation to be recorded; and any change beyond the status always
    does (resources, a label or annotation changed or removed), but for labels and annotations others added (the
    binding's topology labels), which the manager keeps as they are."""

    def told_of(change, shadow: dict = SHADOW, recreations: int | None = None) -> list[str]:
        async def scenario():
            provider = await Provider().start()
            provider.cluster.add(ShadowPod, shadow)
            provider.cluster.add(Pod, made_pod(shadow, recreations=recreations))
            await provider.settle()
            told: list[str] = []
            provider.shadowpods.queue.add = lambda key, delay=0: told.append(key[1])
            provider.cluster.update(Pod, "web", TWIN, change)
            await provider.settle()
            return told

        return run(scenario)

    def status(**fields):
        return lambda pod: pod["status"].update(fields)

    refused = {**SHADOW, "status": refused_status("QuotaExceeded")}
    assert told_of(status(podIP="10.245.0.7")) == []
    assert told_of(status(phase="Succeeded")) == ["web"]
    assert told_of(status(phase="Failed", reason="Evicted")) == ["web"]

    def labels(change):
        return lambda pod: change(pod["metadata"]["labels"])

    ours = next(iter(POD["metadata"]["labels"]))
    assert told_of(labels(lambda have: have.update({"topology.kubernetes.io/zone": "a"}))) == []
    assert told_of(lambda pod: pod["metadata"]["annotations"].update(mesh="x")) == []
    assert told_of(labels(lambda have: have.update({"topology.kubernetes.io/zone": "a"})), shadow=refused) == ["web"]
    # A pod made again, its recreation not recorded yet (its creation's own echo told nothing): its first report is.
    assert told_of(status(podIP="10.245.0.7"), recreations=1) == ["web"]
    recorded = {**SHADOW, "status": {"recreations": 1}}
    assert told_of(status(podIP="10.245.0.7"), shadow=recorded, recreations=1) == []
    assert told_of(labels(lambda have: have.update({ours: "other"}))) == ["web"]
    assert told_of(labels(lambda have: have.pop(ours))) == ["web"]
    assert told_of(lambda pod: pod["spec"].update(activeDeadlineSeconds=5)) == ["web"]
    assert told_of(lambda pod: pod["spec"]["containers"][0]["resources"].update(requests={"cpu": "2"})) == ["web"]
    assert told_of(status(podIP="10.245.0.8"), shadow=COPYING) == ["web"]
    assert told_of(status(podIP="10.245.0.9"), shadow=refused) == ["web"]
