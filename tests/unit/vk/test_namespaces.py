"""The twin manager (vk/namespaces.py) on issue 37's case (twin_cases.py): an intruder never gets, drains or
removes the victim's twin.
"""

from __future__ import annotations

import asyncio

from catamaran.constants import tenant_namespace
from catamaran.kube.events import EventRecorder
from catamaran.twin_claims import TWIN_TAKEN
from catamaran.vk.context import PeeringContext
from tests.unit.fakes.offloading import unserved_nodes
from tests.unit.twin_cases import (
    CONSUMER,
    EVIL,
    SAME_NAME,
    TWIN,
    VICTIM,
    Recorder,
    add_offloading,
    hold_twin,
    offloading,
)


def own_node(peering: PeeringContext) -> dict:
    """The peering's one virtual node, as vk/virtual_nodes.py hands it to the twin manager: its labels (none until
    stored) and whether a NamespaceOffloading selects it."""
    nodes = unserved_nodes(peering, "10.0.0.1")
    peering.node_names.add(peering.node_name)
    return {"nodes": nodes.informer, "selects": nodes.selects}


def twin_manager():
    from catamaran.vk.namespaces import TwinManager

    local, provider = Recorder(), Recorder()
    peering = PeeringContext(CONSUMER, "p1", local, provider, EventRecorder(local, "test"), ("catamaran-system", "p1"))
    manager = TwinManager(peering, pods_on_node=lambda namespace: [], shadows_left=lambda twin: 3, **own_node(peering))
    return manager, local, provider


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
        manager.nodes._store((None, manager.peering.node_name), {})
        asyncio.run(manager.reconcile(intruder))
        assert provider.calls == []  # no TwinNamespace asked for, none deleted
        assert {call[3] for call in local.calls} == {intruder}  # the victim's offloading is not written to
        [entry] = entries_written(local)
        assert (entry["phase"], entry["reason"], entry["remoteNamespace"]) == ("Failed", TWIN_TAKEN, TWIN)


def test_simultaneous_claims_the_older_offloading_asks_for_the_twin_the_younger_waits():
    manager, _, provider = twin_manager()
    add_offloading(manager, "victim", VICTIM)
    add_offloading(manager, "evil", EVIL)
    manager.nodes._store((None, manager.peering.node_name), {})
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


class SaidEvents:
    """The Events the twin manager records, as (type, reason, message)."""

    def __init__(self):
        self.said: list[tuple[str, str, str]] = []

    async def record(self, involved, event_type: str, reason: str, message: str) -> None:
        self.said.append((event_type, reason, message))


def draining_victim():
    """A twin manager whose namespace `victim`, holding the twin, is no longer offloaded; and the Events it says."""
    from catamaran.vk.namespaces import TwinManager

    local, provider, events = Recorder(), Recorder(), SaidEvents()
    peering = PeeringContext(CONSUMER, "p1", local, provider, events, ("catamaran-system", "p1"))
    manager = TwinManager(peering, pods_on_node=lambda namespace: [], shadows_left=lambda twin: 0, **own_node(peering))
    add_offloading(manager, "victim", offloading("victim", deleting=True, **VICTIM["spec"]))
    hold_twin(manager, "victim")
    manager.nodes._store((None, manager.peering.node_name), {})
    return manager, events


def test_a_drain_says_once_which_claims_and_data_it_deletes_before_deleting_them():
    from catamaran.vk.namespaces import TWIN_DATA_DELETED

    manager, events = draining_victim()
    drained = []
    manager.data_holders.append(lambda twin: ["data-db-0", "data-db-1"] if twin == TWIN else [])
    manager.drainers.append(lambda origin, twin: drained.append(len(events.said)) or 2)
    for _ in range(3):
        asyncio.run(manager.reconcile("victim"))
    [(kind, reason, message)] = events.said
    assert (kind, reason) == ("Warning", TWIN_DATA_DELETED)
    assert "claims data-db-0, data-db-1" in message
    assert "cluster p1" in message
    assert drained == [1, 1, 1], "said before the first copy is removed"


def test_a_drain_names_a_few_of_many_claims_and_says_the_rest():
    from catamaran.vk.namespaces import CLAIMS_NAMED

    manager, events = draining_victim()
    claims = [f"data-{i:04d}" for i in range(5000)]  # what a provider's twin may hold
    manager.data_holders.append(lambda twin: claims)
    manager.drainers.append(lambda origin, twin: 1)
    asyncio.run(manager.reconcile("victim"))
    [(_, _, message)] = events.said
    assert f"{', '.join(claims[:CLAIMS_NAMED])} and {5000 - CLAIMS_NAMED} more in" in message
    assert message.endswith("erases it)")
