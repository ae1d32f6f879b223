"""ShadowPods of node pools (provider/shadowpods.py): a ShadowPod labelled catamaran.io/pool gets its pool's placement,
label, quota and feasibility, is refused when the pool is not lent (PoolNotOffered) or cordoned (PoolCordoned), and
a running pod keeps the pool it was made for. Against the in-memory provider of tests/unit/provider/pools.py: tenant
c1's own pods on the worker (4 CPUs, quota 3200m), pool gpu on gpu-1 (8 CPUs, 2 GPUs) and gpu-2 (3 CPUs, 1 GPU),
quota 5500m and 1 GPU, pool small on small-1 (2500m, quota 2 CPUs)."""

from __future__ import annotations

from lightkube.resources.core_v1 import Pod

from catamaran.constants import LABEL_POOL, RESOURCE_OFFER_NAME
from catamaran.kube.resources import ResourceOffer, ShadowPod
from tests.unit.fakes.kube import assert_matches
from tests.unit.fakes.offloading import CONSUMER, TENANT, TWIN, run, shadow_status
from tests.unit.provider.pools import (
    GPU_POOL,
    GPU_TOLERATION,
    OFFER,
    OWN_PLACEMENT,
    SMALL_POOL,
    pool_world,
    requesting,
    running_pod,
    shadow_of_pool,
)

GPU_JOB = [requesting({"cpu": "5", "example.com/gpu": "1"})]  # beyond the worker and the tenant's own quota


def outcome(shadows=(), pods=(), offer=None, *, after=None) -> dict:
    """Reconcile ShadowPod web once in a pool world holding `shadows` and `pods` (`after`: a step before it)."""

    async def scenario():
        world = pool_world(offer)
        for shadow in shadows:
            world.cluster.add(ShadowPod, shadow)
        for pod in pods:
            world.cluster.add(Pod, pod)
        await world.start()
        if after is not None:
            await after(world)
        since = len(world.cluster.actions)
        returned = await world.reconcile()
        made = [
            (a.verb, a.kind, a.subresource)
            for a in world.cluster.actions[since:]
            if a.verb != "get" and a.kind != "Event"
        ]
        return {
            "returned": returned,
            "shadow": world.shadow(),
            "pod": world.pod(),
            "events": world.events(),
            "writes": made,
        }

    return run(scenario)


def created(found: dict) -> dict:
    """The PodCreated condition a reconcile left on ShadowPod web."""
    (condition,) = [
        c for c in (found["shadow"].get("status") or {}).get("conditions") or [] if c["type"] == "PodCreated"
    ]
    return condition


def assert_refused(found: dict, reason: str) -> str:
    """No pod, PodCreated=False for `reason`, one Warning Event of it, nothing written but the ShadowPod's status;
    the refusal's message."""
    assert found["pod"] is None
    assert found["returned"] == 300
    assert (created(found)["status"], created(found)["reason"]) == ("False", reason)
    assert found["events"] == {("Warning", reason)}
    assert found["writes"] == [("patch", "ShadowPod", "status")]
    return created(found)["message"]


def test_a_pod_of_a_pool_gets_the_pools_placement_not_the_tenants_and_carries_the_pool():
    found = outcome([shadow_of_pool("gpu", containers=GPU_JOB)])
    assert found["writes"] == [("create", "Pod", None)]
    pod = found["pod"]
    assert pod["metadata"]["labels"][LABEL_POOL] == "gpu"
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}, "the tenant's own selector is not added"
    assert GPU_TOLERATION in pod["spec"]["tolerations"]
    assert found["events"] == set()


def test_a_pod_of_no_pool_keeps_the_tenants_placement_and_no_pool_label_whatever_its_pods_labels_say():
    """The consumer's pod template cannot put a pod in a pool: only the ShadowPod's own label does."""
    shadow = shadow_of_pool(None, containers=[requesting({"cpu": "1"})])
    shadow["spec"]["pod"]["metadata"]["labels"] = {**shadow["spec"]["pod"]["metadata"]["labels"], LABEL_POOL: "gpu"}
    pod = outcome([shadow])["pod"]
    assert LABEL_POOL not in pod["metadata"]["labels"]
    assert pod["spec"]["nodeSelector"] == OWN_PLACEMENT
    assert not pod["spec"].get("tolerations")


def test_a_pool_not_lent_is_refused_before_any_pod_naming_the_pools_lent():
    message = assert_refused(outcome([shadow_of_pool("tpu")]), "PoolNotOffered")
    assert message == "the provider lends this tenant no pool tpu (pools lent: gpu, small)"
    no_pools = outcome([shadow_of_pool("gpu")], offer={"clusterID": "p1"})
    assert assert_refused(no_pools, "PoolNotOffered").endswith("(pools lent: none)")


def test_a_cordoned_pool_lends_nothing_new_and_the_tenants_cordon_holds_for_every_pool():
    cordoned = {**OFFER, "pools": [{**GPU_POOL, "cordon": {"reason": "driver upgrade"}}, SMALL_POOL]}
    message = assert_refused(outcome([shadow_of_pool("gpu", containers=GPU_JOB)], offer=cordoned), "PoolCordoned")
    assert message == "the provider lends pool gpu nothing new: driver upgrade"
    # The pool's cordon is its own: the tenant's other pools and its own pods go on.
    assert outcome([shadow_of_pool("small")], offer=cordoned)["pod"] is not None
    assert outcome([shadow_of_pool(None)], offer=cordoned)["pod"] is not None
    tenant_cordoned = {**OFFER, "cordon": {"reason": "audit"}}
    assert_refused(outcome([shadow_of_pool("small")], offer=tenant_cordoned), "TenantCordoned")


def test_a_running_pod_stays_when_its_pool_is_cordoned():
    shadow = shadow_of_pool("gpu", containers=GPU_JOB, status=shadow_status({"phase": "Running"}))
    cordoned = {**OFFER, "pools": [{**GPU_POOL, "cordon": {}}, SMALL_POOL]}
    found = outcome([shadow], [running_pod(shadow, "gpu", "gpu-1")], offer=cordoned)
    assert found["pod"] is not None
    assert ("delete", "Pod", None) not in found["writes"]
    assert all(c["reason"] != "PoolCordoned" for c in found["shadow"]["status"]["conditions"])


def test_a_pools_quota_is_its_own_apart_from_the_tenants():
    # The tenant's own pods hold 3 of its 3200m; the pool gpu's pod train holds its one GPU and 2 CPUs.
    db = shadow_of_pool(None, "db", containers=[requesting({"cpu": "3"})])
    train = shadow_of_pool("gpu", "train", containers=[requesting({"cpu": "2", "example.com/gpu": "1"})])
    running = [running_pod(db, None, "provider-worker"), running_pod(train, "gpu", "gpu-1")]

    gpu_full = outcome([shadow_of_pool("gpu", containers=[requesting({"cpu": "1", "example.com/gpu": "1"})])], running)
    assert assert_refused(gpu_full, "QuotaExceeded") == (
        "exceeds the quota of pool gpu of tenant c1 on this provider: example.com/gpu (requested 1, in use 1, quota 1)"
    )
    # 1 CPU more than the tenant's own 3200m allow, well within the pool's: admitted in the pool.
    assert outcome([shadow_of_pool("gpu", containers=[requesting({"cpu": "1"})])], running)["pod"] is not None
    assert outcome([shadow_of_pool("small", containers=[requesting({"cpu": "1"})])], running)["pod"] is not None
    # The pool's pods do not count in the tenant's own bucket: 3 + 200m fits its 3200m, the train's 2 CPUs aside.
    assert outcome([shadow_of_pool(None, containers=[requesting({"cpu": "200m"})])], running)["pod"] is not None
    own_full = outcome([shadow_of_pool(None, containers=[requesting({"cpu": "300m"})])], running)
    assert "of tenant c1 on this provider: cpu (requested 300m, in use 3, quota 3200m)" in assert_refused(
        own_full, "QuotaExceeded"
    )


def test_feasibility_is_judged_on_the_nodes_of_the_pods_pool():
    assert outcome([shadow_of_pool("gpu", containers=GPU_JOB)])["pod"] is not None
    own = assert_refused(outcome([shadow_of_pool(None, containers=GPU_JOB)]), "Infeasible")
    assert "example.com/gpu (requested 1, the most one node has 0)" in own
    small = assert_refused(outcome([shadow_of_pool("small", containers=[requesting({"cpu": "3"})])]), "Infeasible")
    assert small == (
        "no node of this provider the pods of pool small may use can hold it: cpu (requested 3, the most one node has"
        " 2500m)"
    )
    # The worker holds 3 CPUs for the tenant's own pods.
    assert outcome([shadow_of_pool(None, containers=[requesting({"cpu": "3"})])])["pod"] is not None
    big = assert_refused(outcome([shadow_of_pool("gpu", containers=[requesting({"cpu": "9"})])]), "Infeasible")
    assert "cpu (requested 9, the most one node has 8)" in big


def _resized(pool: str | None, cpu: str, node: str) -> dict:
    """Reconcile a running pod of `pool` (1 CPU) whose ShadowPod now asks for `cpu`."""
    before = shadow_of_pool(pool, containers=[requesting({"cpu": "1"})])
    shadow = shadow_of_pool(pool, containers=[requesting({"cpu": cpu})], status=shadow_status({"phase": "Running"}))
    return outcome([shadow], [running_pod(before, pool, node)])


def test_a_pod_of_a_pool_is_resized_within_the_pools_quota_and_nodes():
    grown = _resized("gpu", "5", "gpu-1")
    assert ("patch", "Pod", "resize") in grown["writes"]
    assert grown["pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "5"
    # The same on the tenant's own pod: beyond its worker.
    own = _resized(None, "5", "provider-worker")
    assert ("patch", "Pod", "resize") not in own["writes"]
    assert_matches(own["shadow"], {"status": {"conditions": lambda c: any(x.get("reason") == "Infeasible" for x in c)}})
    # Past the pool's whole quota (5500m), though gpu-1 could hold it.
    past = _resized("gpu", "6", "gpu-1")
    assert ("patch", "Pod", "resize") not in past["writes"]
    (refusal,) = [c for c in past["shadow"]["status"]["conditions"] if c["type"] == "PodResized"]
    assert (refusal["reason"], refusal["message"]) == (
        "Infeasible",
        "exceeds the whole quota of pool gpu of tenant c1 on this provider: cpu (requested 6, in use 0, quota 5500m)",
    )


def test_a_running_pod_keeps_the_pool_it_was_made_for():
    """Its pool is its label, by which it is accounted: a ShadowPod relabelled does not move it (it runs where its
    pool's placement put it); it changes when the pod is made again."""
    made = shadow_of_pool(None, containers=[requesting({"cpu": "1"})])
    relabelled = shadow_of_pool(
        "gpu", containers=[requesting({"cpu": "1"})], status=shadow_status({"phase": "Running"})
    )
    found = outcome([relabelled], [running_pod(made, None, "provider-worker")])
    assert LABEL_POOL not in found["pod"]["metadata"]["labels"]
    assert ("patch", "Pod", None) not in found["writes"]
    moved = shadow_of_pool("small", containers=[requesting({"cpu": "1"})], status=shadow_status({"phase": "Running"}))
    found = outcome([moved], [running_pod(shadow_of_pool("gpu"), "gpu", "gpu-1")])
    assert found["pod"]["metadata"]["labels"][LABEL_POOL] == "gpu"


def test_a_pod_refused_for_its_pools_quota_is_admitted_once_the_pool_frees_it():
    train = shadow_of_pool("gpu", "train", containers=[requesting({"cpu": "1", "example.com/gpu": "1"})])
    web = shadow_of_pool("gpu", containers=[requesting({"cpu": "1", "example.com/gpu": "1"})])

    async def scenario():
        world = pool_world()
        world.cluster.add(ShadowPod, web)
        world.cluster.add(Pod, running_pod(train, "gpu", "gpu-1"))
        await world.start()
        first = await world.reconcile()
        await world.cluster.client().delete(Pod, "train", namespace=TWIN, grace_period=0)
        await world.settle()
        retried = (TWIN, "web") not in world.shadowpods._refused.get(CONSUMER, set())
        await world.reconcile()
        return first, retried, world.pod()

    first, retried, pod = run(scenario)
    assert first == 300
    assert retried, "the pool's usage fell: its tenant's refused ShadowPods are queued again"
    assert_matches(pod, {"metadata": {"labels": {LABEL_POOL: "gpu"}}, "spec": {"nodeSelector": {"pool": "gpu"}}})


def test_a_pod_refused_as_its_pool_is_not_lent_is_made_once_the_provider_lends_it():
    async def scenario():
        world = pool_world({**OFFER, "pools": [SMALL_POOL]})
        world.cluster.add(ShadowPod, shadow_of_pool("gpu", containers=GPU_JOB))
        await world.start()
        first = await world.reconcile()
        world.cluster.update(ResourceOffer, RESOURCE_OFFER_NAME, TENANT, lambda o: o.update(spec=OFFER))
        await world.settle()
        retried = (TWIN, "web") not in world.shadowpods._refused.get(CONSUMER, set())
        await world.reconcile()
        return first, retried, world.pod()

    first, retried, pod = run(scenario)
    assert (first, retried) == (300, True)
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
