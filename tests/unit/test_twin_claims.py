"""A twin belongs to one origin namespace (issue 37): the pure rule, and the virtual kubelet acting on it.

The red team's case throughout: namespace `victim` of consumer `c1` holds twin `victim-c1`; namespace `evil` asks for
the same remote name (SelectedName naming it, or EnforceSameName in a namespace named `victim-c1`).
"""

from __future__ import annotations

import asyncio

from lightkube.resources.core_v1 import Pod

from catamaran.constants import tenant_namespace
from catamaran.kube.events import EventRecorder
from catamaran.twin_claims import TWIN_TAKEN, RemoteNames, claim_refusal, claimants, twin_holder
from catamaran.vk.context import PeeringContext

CONSUMER = "c1"
TWIN = "victim-c1"


def offloading(namespace: str, created: str = "2024-01-01T00:00:00Z", deleting: bool = False, **spec) -> dict:
    meta = {"name": "offloading", "namespace": namespace, "creationTimestamp": created, "uid": f"uid-{namespace}"}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-01T00:00:00Z"
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": meta,
        "spec": spec,
    }


def selected_name(namespace: str, remote: str = TWIN, created: str = "2024-02-01T00:00:00Z") -> dict:
    return offloading(namespace, created, namespaceMappingStrategy="SelectedName", remoteNamespaceName=remote)


VICTIM = offloading("victim", "2024-01-01T00:00:00Z")  # DefaultName: victim-c1
EVIL = selected_name("evil")  # younger, same remote name
SAME_NAME = offloading(TWIN, "2024-02-01T00:00:00Z", namespaceMappingStrategy="EnforceSameName")


# -- the rule ------------------------------------------------------------------------------------------------


def test_every_strategy_naming_the_same_twin_is_a_claimant_oldest_first():
    pairs = [("evil", EVIL), (TWIN, SAME_NAME), ("victim", VICTIM), ("other", offloading("other"))]
    assert claimants(TWIN, pairs, CONSUMER) == ["victim", "evil", TWIN]  # same second: by namespace name


def test_an_offloading_being_deleted_claims_nothing_any_more():
    assert claimants(TWIN, [("victim", offloading("victim", deleting=True)), ("evil", EVIL)], CONSUMER) == ["evil"]


def test_the_twins_holder_keeps_it_whatever_the_age_of_the_claimants():
    older_evil = selected_name("evil", created="2023-01-01T00:00:00Z")
    pairs = [("victim", VICTIM), ("evil", older_evil)]
    assert twin_holder(TWIN, "victim", pairs, CONSUMER) == "victim"
    assert twin_holder(TWIN, None, pairs, CONSUMER) == "evil"  # nobody holds it yet: the oldest claim
    assert twin_holder(TWIN, None, [], CONSUMER) is None


def test_only_the_holder_may_have_the_twin_and_the_refusal_does_not_name_it():
    assert claim_refusal("victim", TWIN, "victim") is None
    assert claim_refusal("victim", TWIN, None) is None
    refusal = claim_refusal("evil", TWIN, "victim")
    assert refusal is not None
    assert TWIN in refusal
    assert "victim " not in refusal.replace(TWIN, "")


def test_the_remote_names_index_follows_offloadings_coming_changing_and_going():
    names = RemoteNames(CONSUMER)
    assert names.changed("victim", VICTIM) == {TWIN}
    assert names.changed("evil", EVIL) == {TWIN}
    assert names.namespaces(TWIN) == {"victim", "evil"}
    assert names.changed("evil", None) == {TWIN}
    assert names.namespaces(TWIN) == {"victim"}
    assert names.changed("victim", None) == {TWIN}
    assert names.namespaces(TWIN) == set()


# -- the virtual kubelet -------------------------------------------------------------------------------------


class Recorder:
    """Both clusters as the twin manager and pod controller write to them."""

    def __init__(self):
        self.calls: list[tuple] = []

    async def create(self, obj, **kwargs):
        self.calls.append(("create", getattr(obj, "kind", None), obj))
        return obj

    async def patch(self, resource, name, body, **kwargs):
        self.calls.append(("patch", resource, name, kwargs.get("namespace"), body))

    async def delete(self, resource, name, **kwargs):
        self.calls.append(("delete", resource, name, kwargs.get("namespace")))

    async def apply(self, obj, **kwargs):
        self.calls.append(("apply", getattr(obj, "kind", None), obj))

    async def list(self, resource, **kwargs):
        for _ in ():
            yield


def twin_manager():
    from catamaran.vk.namespaces import TwinManager

    local, provider = Recorder(), Recorder()
    peering = PeeringContext(CONSUMER, "p1", local, provider, EventRecorder(local, "test"), ("catamaran-system", "p1"))
    manager = TwinManager(peering, pods_on_node=lambda namespace: [], shadows_left=lambda twin: 3)
    return manager, local, provider


def add_offloading(manager, namespace: str, body: dict) -> None:
    manager.offloadings._store((namespace, "offloading"), body)
    manager._offloading_changed("ADDED", (namespace, "offloading"), body, None)


def hold_twin(manager, origin: str, name: str = TWIN, phase: str = "Ready") -> None:
    request = {
        "metadata": {"name": name, "namespace": tenant_namespace(CONSUMER)},
        "spec": {"originNamespace": origin},
        "status": {"phase": phase},
    }
    manager.requests._store((tenant_namespace(CONSUMER), name), request)


def entries_written(local: Recorder) -> list[dict]:
    return [entry for call in local.calls if call[0] == "patch" for entry in call[4]["status"]["clusters"]]


def test_a_twin_of_another_namespace_is_no_twin_of_the_intruder():
    manager, _, _ = twin_manager()
    add_offloading(manager, "victim", VICTIM)
    add_offloading(manager, "evil", EVIL)
    hold_twin(manager, "victim")
    assert manager.twin_of("victim") == manager.ready_twin("victim") == TWIN
    assert manager.twin_of("evil") is None
    assert manager.ready_twin("evil") is None
    assert not manager.has_twin("evil")
    assert not manager.twin_ready("evil")
    assert manager.claim_refusal("victim") is None
    assert manager.claim_refusal("evil") is not None


def test_the_intruder_is_refused_on_its_own_entry_and_nothing_is_asked_of_the_provider():
    for intruder, body in (("evil", EVIL), (TWIN, SAME_NAME)):
        manager, local, provider = twin_manager()
        add_offloading(manager, "victim", VICTIM)
        add_offloading(manager, intruder, body)
        hold_twin(manager, "victim")
        manager.node._store((None, manager.peering.node_name), {})
        asyncio.run(manager.reconcile(intruder))
        assert provider.calls == []  # no TwinNamespace asked for, none deleted
        assert {call[3] for call in local.calls} == {intruder}  # the victim's offloading is not written to
        [entry] = entries_written(local)
        assert (entry["phase"], entry["reason"], entry["remoteNamespace"]) == ("Failed", TWIN_TAKEN, TWIN)


def test_simultaneous_claims_the_older_offloading_asks_for_the_twin_the_younger_waits():
    manager, _, provider = twin_manager()
    add_offloading(manager, "victim", VICTIM)
    add_offloading(manager, "evil", EVIL)
    manager.node._store((None, manager.peering.node_name), {})
    asyncio.run(manager.reconcile("evil"))
    assert provider.calls == []
    asyncio.run(manager.reconcile("victim"))
    [(verb, kind, body)] = provider.calls
    assert (verb, kind, body.metadata.name, body.spec["originNamespace"]) == ("create", "TwinNamespace", TWIN, "victim")


def test_the_intruder_leaving_never_drains_nor_removes_the_victims_twin():
    manager, _local, provider = twin_manager()
    add_offloading(manager, "victim", VICTIM)
    add_offloading(manager, "evil", offloading("evil", deleting=True, **EVIL["spec"]))
    hold_twin(manager, "victim")
    drained = []
    manager.drainers.append(lambda origin, twin: drained.append((origin, twin)) or 0)
    assert asyncio.run(manager.reconcile("evil")) is None
    assert provider.calls == []
    assert drained == []


def test_a_claimant_waiting_for_a_name_is_requeued_when_its_holder_lets_it_go():
    from catamaran.vk.namespaces import TwinManager

    manager, _, _ = twin_manager()
    add_offloading(manager, "victim", VICTIM)
    add_offloading(manager, "evil", EVIL)
    manager.queue = type(manager.queue)("twins", manager.reconcile)  # empty
    request = {"metadata": {"name": TWIN}, "spec": {"originNamespace": "victim"}}
    TwinManager._request_changed(manager, "DELETED", (tenant_namespace(CONSUMER), TWIN), None, request)
    assert manager.queue._queued == {"victim", "evil"}


def pod_controller():
    from catamaran.vk.node import HealthSettings, NodeSettings, VirtualNode
    from catamaran.vk.pods import PodController
    from catamaran.vk.reflection.policy import settings_from_spec

    local, provider = Recorder(), Recorder()
    peering = PeeringContext(CONSUMER, "p1", local, provider, EventRecorder(local, "test"), ("catamaran-system", "p1"))
    node = VirtualNode(peering, NodeSettings(provider_id="p1", node_ip="10.0.0.1"), HealthSettings())
    pods = PodController(peering, node, settings_from_spec(None), remap_cidr=None)
    pods.twins.node._store((None, peering.node_name), {})
    add_offloading(pods.twins, "victim", VICTIM)
    add_offloading(pods.twins, "evil", EVIL)
    hold_twin(pods.twins, "victim")
    return pods, local, provider


def local_pod(namespace: str, name: str = "web", deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": namespace, "uid": f"pod-{namespace}", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    return {"metadata": meta, "spec": {"containers": [{"name": "app", "image": "nginx"}]}, "status": {}}


def test_the_intruders_pods_wait_pending_and_never_reach_the_victims_twin():

    pods, local, provider = pod_controller()
    pods.local_pods._store(("evil", "web"), local_pod("evil"))
    assert asyncio.run(pods.reconcile(("evil", "web"))) is None
    assert provider.calls == []
    [status] = [call[4]["status"] for call in local.calls if call[0] == "patch"]
    assert status["phase"] == "Pending"
    assert any(c.get("reason") == TWIN_TAKEN for c in status["conditions"])
    assert pods.twin_for("evil") is None
    assert pods.twin_for("victim") == TWIN


def test_deleting_the_intruders_pod_releases_it_without_touching_the_victims_shadowpod():
    pods, local, provider = pod_controller()
    pods.local_pods._store(("evil", "web"), local_pod("evil", deleting=True))
    asyncio.run(pods.reconcile(("evil", "web")))
    assert provider.calls == []  # the victim's ShadowPod "web" is not deleted
    assert [call[:4] for call in local.calls if call[0] == "delete"] == [("delete", Pod, "web", "evil")]


def test_a_shadowpod_in_a_twin_is_judged_against_the_twins_origin_not_what_it_says_of_itself():
    pods, _, _ = pod_controller()
    shadow = {"metadata": {"name": "web", "namespace": TWIN, "annotations": {"catamaran.io/local-namespace": "evil"}}}
    pods._shadow_changed("ADDED", (TWIN, "web"), shadow, None)
    assert pods.queue._queued == {("victim", "web")}


def test_a_shadowpod_the_tenant_wrote_itself_is_left_to_the_providers_terms():
    """No local namespace named: no virtual kubelet made it, so it is no pod's and never deleted as an orphan."""
    pods, _, _ = pod_controller()
    shadow = {"metadata": {"name": "direct", "namespace": TWIN}}
    pods._shadow_changed("ADDED", (TWIN, "direct"), shadow, None)
    assert pods.queue._queued == set()


# -- the consumer's manager and pod webhook ------------------------------------------------------------------


def offloading_controller():
    from catamaran.consumer.offloading import NamespaceOffloadingController

    client = Recorder()
    controller = NamespaceOffloadingController(client, CONSUMER, EventRecorder(client, "test"))
    for namespace, body in (("victim", VICTIM), ("evil", EVIL)):
        controller.offloadings._store((namespace, "offloading"), body)
        controller._requeue_claimants("ADDED", (namespace, "offloading"), body, None)
    return controller, client


def test_a_conflicting_claim_is_its_own_phase_and_wins_over_the_clusters_entries():
    from catamaran.consumer.offloading import offloading_phase

    ready = {"a": {"phase": "Ready"}}
    assert offloading_phase(False, ["a"], ready, "taken") == ("Conflict", "taken")
    assert offloading_phase(True, ["a"], ready, "taken")[0] == "Terminating"
    assert offloading_phase(False, ["a"], ready, None)[0] == "Ready"


def test_the_manager_refuses_the_younger_claim_with_an_event_on_its_own_offloading_only():
    controller, client = offloading_controller()
    assert controller.twin_refusal("victim") is None
    assert controller.twin_refusal("evil") is not None
    asyncio.run(controller.reconcile(("evil", "offloading")))
    [status] = [call[4]["status"] for call in client.calls if call[0] == "patch" and "status" in call[4]]
    assert status["offloadingPhase"] == "Conflict"
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", TWIN_TAKEN)
    [event] = [call[2] for call in client.calls if call[1] == "Event"]
    assert (event.type, event.reason, event.involvedObject.namespace) == ("Warning", TWIN_TAKEN, "evil")
    assert all(call[3] != "victim" for call in client.calls if call[0] == "patch")


def test_the_younger_claim_is_reconsidered_when_the_older_one_is_let_go():
    controller, _ = offloading_controller()
    controller.queue = type(controller.queue)("namespaceoffloadings", controller.reconcile)  # empty
    controller._requeue_claimants("DELETED", ("victim", "offloading"), None, VICTIM)
    controller.offloadings._drop(("victim", "offloading"))
    assert controller.queue._queued == {("evil", "offloading")}
    assert controller.twin_refusal("evil") is None


def test_a_policys_namespace_without_its_offloading_yet_is_the_youngest_claim():
    controller, _ = offloading_controller()
    spec = {"namespaceMappingStrategy": "EnforceSameName"}
    assert controller.twin_refusal(TWIN, spec) is not None
    assert controller.twin_refusal("fresh", spec) is None


def test_the_webhook_keeps_a_refused_namespaces_pods_local_and_refuses_them_under_remote():
    import base64
    import json

    from catamaran.consumer.webhook import review_response

    def review() -> dict:
        return {"request": {"uid": "u", "object": {"metadata": {}, "spec": {"containers": [{"name": "a"}]}}}}

    refused = review_response(review(), {"podOffloadingStrategy": "Remote"}, "taken")["response"]
    assert refused["allowed"] is False
    assert refused["status"]["code"] == 403
    assert "taken" in refused["status"]["message"]
    local = review_response(review(), {"podOffloadingStrategy": "LocalAndRemote"}, "taken")["response"]
    assert local["allowed"] is True
    assert any("taken" in warning for warning in local["warnings"])
    operations = json.loads(base64.b64decode(local["patch"]))
    assert not any(op["path"] == "/spec/tolerations" for op in operations)  # never tolerates the virtual nodes


# -- the provider ---------------------------------------------------------------------------------------------

TENANT = tenant_namespace(CONSUMER)


def twin_namespace(origin: str | None) -> dict:
    annotations = {"catamaran.io/twin-of": f"{TENANT}/{TWIN}"}
    if origin is not None:
        annotations["catamaran.io/origin-namespace"] = origin
    return {"metadata": {"name": TWIN, "labels": {"catamaran.io/managed-by": "catamaran"}, "annotations": annotations}}


def test_a_twin_namespace_is_owned_by_the_twinnamespace_of_its_recorded_origin_only():
    from catamaran.provider.twins import owned_by

    twin_of = f"{TENANT}/{TWIN}"
    assert owned_by(twin_namespace("victim"), twin_of, "victim")
    assert not owned_by(twin_namespace("victim"), twin_of, "evil")
    assert owned_by(twin_namespace("victim"), twin_of)  # made for this TwinNamespace's name, whatever its origin
    assert owned_by(twin_namespace(None), twin_of, "evil")  # made before origins were recorded: adopted, recorded
    assert not owned_by(twin_namespace("victim"), f"catamaran-tenant-other/{TWIN}", "victim")


def twin_controller(existing: dict, origin: str, deleting: bool = False):
    from catamaran.kube.informer import Informer
    from catamaran.provider.twins import TwinNamespaceController

    client = Recorder()
    tenants = Informer(client, Pod, name="tenants")
    tenants._store((None, TENANT), CONSUMER)
    controller = TwinNamespaceController(client, "p1", tenants=tenants, events=EventRecorder(client, "test"))
    meta = {"name": TWIN, "namespace": TENANT, "uid": "twin-uid", "finalizers": ["catamaran.io/twin-namespace"]}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-01T00:00:00Z"
    controller.twins._store((TENANT, TWIN), {"metadata": meta, "spec": {"originNamespace": origin}})
    controller.namespaces._store((None, TWIN), existing)
    return controller, client


def test_the_provider_refuses_a_twinnamespace_of_another_origin_for_an_existing_twin():
    controller, client = twin_controller(twin_namespace("victim"), "evil")
    asyncio.run(controller.reconcile((TENANT, TWIN)))
    [event] = [call[2] for call in client.calls if call[1] == "Event"]
    assert (event.reason, event.involvedObject.name) == ("TwinNamespaceTaken", TWIN)
    statuses = [call[4]["status"] for call in client.calls if call[0] == "patch" and "status" in call[4]]
    assert statuses[-1]["phase"] == "Conflict"
    assert not [call for call in client.calls if call[0] in ("apply", "delete")]  # no rights granted, nothing removed


def test_deleting_a_twinnamespace_of_another_origin_never_removes_the_twin():
    controller, client = twin_controller(twin_namespace("victim"), "evil", deleting=True)
    asyncio.run(controller.reconcile((TENANT, TWIN)))
    assert not [call for call in client.calls if call[0] == "delete"]


def test_a_twin_made_before_origins_were_recorded_gets_its_origin_recorded():
    controller, client = twin_controller(twin_namespace(None), "victim")
    asyncio.run(controller.reconcile((TENANT, TWIN)))
    [patch] = [call[4] for call in client.calls if call[0] == "patch" and call[2] == TWIN and "metadata" in call[4]][
        -1:
    ]
    assert patch["metadata"]["annotations"]["catamaran.io/origin-namespace"] == "victim"


def test_the_provider_runs_no_pod_of_another_namespace_in_a_twin():
    from catamaran.provider.shadowpods import foreign_namespace

    def shadow(local: str | None) -> dict:
        annotations = {"catamaran.io/local-namespace": local} if local else {}
        return {"metadata": {"name": "web", "namespace": TWIN, "annotations": annotations}}

    recorded = twin_namespace("victim")["metadata"]["annotations"]
    assert foreign_namespace(shadow("victim"), recorded) is None
    assert foreign_namespace(shadow(None), recorded) is None
    assert foreign_namespace(shadow("evil"), {}) is None  # a twin made before origins were recorded
    refusal = foreign_namespace(shadow("evil"), recorded)
    assert refusal is not None
    assert "victim" not in refusal.replace(TWIN, "")
