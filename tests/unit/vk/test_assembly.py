"""The virtual kubelet's parts, built by its composition root (vk/assembly.py): one peering context shared by all,
and the node settings taken from the spec.

Nothing is run: the clients are never called while the parts are only built and wired.
"""

from __future__ import annotations

import asyncio
import types

from catamaran.constants import (
    LABEL_VIRTUAL_VOLUME_NODE,
    NETWORK_POLICY_CONDITION,
    tenant_namespace,
    virtual_node_name,
)
from catamaran.kube.events import EventRecorder
from catamaran.vk import assembly
from catamaran.vk.assembly import KubeletOptions, OffloadingParts, ServedPeering, settings_from
from catamaran.vk.context import PeeringContext
from catamaran.vk.kubelet.server import KubeletServer, listen
from catamaran.vk.node import NodeSettings, VirtualNode
from catamaran.vk.peering import PeeringWatch
from catamaran.vk.reflection.policy import settings_from_spec
from catamaran.vk.virtual_nodes import VirtualNodes, node_pods_informer
from tests.unit.fakes.offloading import KubeletPort, unserved_nodes
from tests.unit.vk.offloading_scope import COSTLY


def test_the_node_settings_take_the_taints_of_the_spec():
    spec = {"clusterID": "cluster-2", "nodeTaints": [COSTLY]}
    settings, _ = settings_from({"spec": spec}, "10.0.0.1", 10250)
    assert settings.taints == [COSTLY]
    assert settings_from({"spec": {"clusterID": "cluster-2"}}, "10.0.0.1", 10250)[0].taints == []


def peering() -> PeeringContext:
    local = object()
    return PeeringContext(
        consumer_id="consumer",
        provider_id="provider",
        local=local,
        provider=object(),
        events=EventRecorder(local, "test"),
        foreign_cluster=("catamaran-system", "provider"),
    )


def wired() -> tuple[PeeringContext, VirtualNodes, OffloadingParts]:
    context = peering()
    nodes = unserved_nodes(context, "10.0.0.1")
    return context, nodes, OffloadingParts(context, nodes, settings_from_spec(None), remap_cidr=None)


def test_the_names_of_a_peering_follow_from_the_cluster_ids():
    context = peering()
    assert context.node_name == virtual_node_name("provider")
    assert context.tenant_namespace == tenant_namespace("consumer")


def test_every_part_reads_the_one_peering_context():
    context, nodes, parts = wired()
    reflection = parts.reflection
    built = [nodes, nodes.health, parts.pods, parts.twins, parts.remote_events, parts.ips, parts.status, reflection]
    built += [reflection.tokens, reflection.volumes, *reflection.reflectors]
    assert all(part.peering is context for part in built)
    assert node_pods_informer(context, context.node_name).fields == {"spec.nodeName": context.node_name}
    assert nodes.informer.labels == {"catamaran.io/remote-cluster-id": "provider", "catamaran.io/type": "virtual-node"}
    assert parts.twins.requests.namespace == context.tenant_namespace
    assert reflection.volumes.volumes.labels == {LABEL_VIRTUAL_VOLUME_NODE: context.node_name}
    context.node_names.add(context.node_name)
    reflection.nodes_changed()
    assert {r.context.own_nodes for r in reflection.reflectors} == {frozenset({context.node_name})}


def test_each_part_is_built_once_and_handed_to_those_that_use_it():
    _, nodes, parts = wired()
    pods, reflection = parts.pods, parts.reflection
    assert nodes.local_pods is pods.local_pods is parts.local_pods is parts.remote_events.local_pods
    assert parts.local_pods is reflection.tokens.local_pods
    assert pods.twins is parts.twins is reflection.tokens.twins is reflection.config_maps.twins
    assert pods.shadow_informers is parts.shadows
    assert pods.status is parts.status
    assert parts.status.ips is parts.ips
    assert parts.status.health is nodes.health
    assert parts.twins.nodes is parts.ips.nodes is nodes.informer
    assert pods.tokens is reflection.tokens
    assert reflection.tokens.secrets is reflection.secrets
    assert pods.config_maps is reflection.config_maps
    assert reflection.volumes.claims is reflection.claims
    assert [r.kind.setting for r in reflection.reflectors] == [
        "configMaps",
        "secrets",
        "services",
        "endpointSlices",
        "ingresses",
        "persistentVolumeClaims",
    ]


def test_the_pod_controller_and_its_reflection_are_wired_in_order():
    _, nodes, parts = wired()
    pods, twins, reflection, events = parts.pods, parts.twins, parts.reflection, parts.remote_events
    # Reflection hears of twins after the pods and their Events do, as it always has.
    assert twins.ready_listeners == [pods.twin_ready, events.twin_ready, reflection.twin_ready]
    assert twins.removed_listeners == [
        parts.shadows.unwatch,
        parts.remote_pods.unwatch,
        events.twin_removed,
        reflection.twin_removed,
    ]
    assert twins.drainers == [reflection.drain]
    assert twins.data_holders == [reflection.claims.copies_in]
    assert nodes.health.health_listeners == [pods.health_changed]
    assert nodes.changed_listeners == [reflection.nodes_changed]
    assert events.reflected == reflection.local_object
    assert reflection.tokens.written_listeners == [pods.queue.add]
    assert parts.ips.local_ranges.services is reflection.services.local_objects.informer
    assert parts.ips.local_ranges.endpoint_slices is reflection.endpoint_slices.local_objects.informer


def served(tmp_path, monkeypatch, reports: list, conditions: list | None = None) -> ServedPeering:
    """The whole virtual kubelet as the runner builds it for ForeignCluster catamaran-system/provider; a token-less
    provider client, so no credential is followed."""
    monkeypatch.setattr(assembly, "bearer_token", lambda client: None)
    local = object()
    listener = listen("127.0.0.1", 0)
    foreign = {
        "metadata": {"name": "provider"},
        "spec": {"clusterID": "provider", "networking": {"podCIDRRemap": "10.250.0.0/16", "podCIDRs": ["10.1.0.0/16"]}},
    }
    parts = ServedPeering(
        local,
        object(),
        PeeringWatch(local, "catamaran-system", "provider"),
        foreign,
        consumer_id="consumer",
        events=EventRecorder(local, "test"),
        node_ip="10.0.0.1",
        listener=listener,
        channel=object(),
        options=KubeletOptions(cert_dir=tmp_path),
        report=lambda reason, message, ready: reports.append((reason, ready)),
        set_condition=lambda *condition: (conditions if conditions is not None else []).append(condition),
    )
    listener.close()
    return parts


def test_the_served_peering_builds_its_parts_from_the_foreign_cluster(tmp_path, monkeypatch):
    parts = served(tmp_path, monkeypatch, [])
    peering, offloading = parts.peering, parts.offloading
    assert peering.foreign_cluster == ("catamaran-system", "provider")
    assert (peering.consumer_id, peering.provider_id) == ("consumer", "provider")
    assert parts.nodes.settings.kubelet_port == parts.kubelet_port != 0  # the listener's port, published
    assert offloading.ips.remap_cidr == "10.250.0.0/16"
    assert offloading.ips.consented == ["10.1.0.0/16"]
    assert parts.credential is None
    # Each virtual node's kubelet API: its own name, certificate and pods; the namespaces' own twins only.
    settings = NodeSettings(provider_id="provider", node_ip="10.0.0.1", pool="gpu")
    node = VirtualNode(peering, settings, parts.nodes.health)
    pods, local_pod = (lambda: []), (lambda namespace, name: None)
    kubelet = parts._kubelet_server(settings.node_name, KubeletPort(), node, pods, local_pod)
    assert isinstance(kubelet, KubeletServer)
    assert (kubelet.node_name, kubelet.certificate.node_name) == ("catamaran-provider.gpu", "catamaran-provider.gpu")
    assert kubelet.certificate.cert_dir == tmp_path / "catamaran-provider.gpu"
    assert (kubelet.local_pod, kubelet.pods_on_node) == (local_pod, pods)
    assert kubelet.twin_of == offloading.twins.ready_twin
    node.offer = {"allocatable": {"cpu": "2"}}
    assert kubelet.stats.allocatable() == {"cpu": "2"}
    loops, of_parts = parts.tasks(), [*parts.nodes.tasks(), *offloading.tasks()]
    try:
        own = [loop.cr_code.co_qualname for loop in loops[:4]]
        assert own == ["Informer.run", "ServedPeering.until_removed", "Informer.run", "ServedPeering.follow_gateway"]
        assert [loop.cr_code for loop in loops[4:]] == [loop.cr_code for loop in of_parts]
    finally:
        for loop in loops + of_parts:
            loop.close()  # built, never run


def test_the_served_peering_listens_by_named_methods(tmp_path, monkeypatch):
    reports: list = []
    parts = served(tmp_path, monkeypatch, reports)
    # The status report hears of the provider's health after the pods are requeued.
    assert parts.nodes.health.health_listeners == [parts.offloading.pods.health_changed, parts.health_changed]
    assert parts.offers._handlers == [parts.offer_changed]
    assert parts.foreigns._handlers[-1] == parts.foreign_changed
    assert parts.nodes.offer_synced is parts.offers.synced
    # A node joining or leaving is told to the reflection (endpoints), then to the ForeignCluster's status.
    assert parts.nodes.changed_listeners == [parts.offloading.reflection.nodes_changed, parts.report_nodes]
    parts.health_changed(False)
    invalid = {"spec": {"clusterID": "provider", "nodeTaints": [{"key": "a", "effect": "Sometimes"}]}}
    parts.foreign_changed("MODIFIED", ("catamaran-system", "provider"), invalid, None)
    assert reports == [("ProviderUnreachable", False), ("InvalidSpec", False)]
    offer = {"spec": {"services": {"allowedTypes": ["ClusterIP"]}}, "status": {"allocatable": {"cpu": "2"}}}
    parts.offer_changed("ADDED", ("tenant", "offer"), offer, None)
    assert parts.nodes.offer == offer  # which nodes there are, their share and cordons: vk/virtual_nodes.py
    assert parts.offloading.reflection.terms["endpoint_ranges"] is None
    parts.foreign_changed("DELETED", ("catamaran-system", "provider"), None, None)
    assert parts.removed.is_set()


def test_the_providers_network_policy_verdict_is_copied_onto_the_foreign_cluster_while_they_differ(
    tmp_path, monkeypatch
):
    conditions: list = []
    parts = served(tmp_path, monkeypatch, [], conditions)
    foreign_key = ("catamaran-system", "provider")
    foreign = {"metadata": {"name": "provider"}, "spec": {"clusterID": "provider"}, "status": {"conditions": []}}
    parts.foreigns.cache[foreign_key] = foreign
    verdict = {"type": NETWORK_POLICY_CONDITION, "status": "False", "reason": "NotEnforced", "message": "open"}
    offer = {"status": {"allocatable": {"cpu": "2"}, "conditions": [verdict]}}
    parts.offer_changed("ADDED", ("tenant", "offer"), offer, None)
    copied = (NETWORK_POLICY_CONDITION, "False", "NotEnforced", "provider provider: open")
    assert conditions == [copied]
    # Written: the ForeignCluster says the same, and an offer event that changes nothing else writes nothing.
    foreign["status"]["conditions"] = [dict(zip(("type", "status", "reason", "message"), copied, strict=True))]
    parts.offer_changed("MODIFIED", ("tenant", "offer"), {**offer, "status": {**offer["status"], "nodes": 1}}, offer)
    assert len(conditions) == 1
    # Undone by another writer: the ForeignCluster's next event writes it again.
    foreign["status"]["conditions"] = []
    parts.offers.cache[(parts.peering.tenant_namespace, "resources")] = offer
    parts.foreign_changed("MODIFIED", foreign_key, foreign, foreign)
    assert conditions[-1] == copied
    enforced = {**verdict, "status": "True", "reason": "Enforced", "message": "refused"}
    parts.offer_changed("MODIFIED", ("tenant", "offer"), {"status": {"conditions": [enforced]}}, offer)
    assert conditions[-1] == (NETWORK_POLICY_CONDITION, "True", "Enforced", "provider provider: refused")
    count = len(conditions)
    parts.offer_changed("MODIFIED", ("tenant", "offer"), {"status": {}}, offer)  # a provider that says nothing
    assert len(conditions) == count
    # What the provider writes is bounded before it reaches the consumer's ForeignCluster.
    forged = {"type": NETWORK_POLICY_CONDITION, "status": "Maybe", "reason": "Enforced", "message": "x" * 100_000}
    parts.offer_changed("MODIFIED", ("tenant", "offer"), {"status": {"conditions": [forged]}}, offer)
    kind, status, reason, message = conditions[-1]
    assert (kind, status, reason) == (NETWORK_POLICY_CONDITION, "Unknown", "Enforced")
    assert len(message) < 2000


def test_the_echo_of_a_copy_this_process_wrote_is_not_reconciled_again():
    _, _, parts = wired()
    reflector = parts.reflection.config_maps
    reflector.origins["twin"] = "shop"
    written = types.SimpleNamespace(metadata=types.SimpleNamespace(resourceVersion="7"))

    async def changes() -> None:
        reflector._remember_write("twin", "settings", written)
        reflector._copy_changed("twin", "settings", {"resourceVersion": "7"})
        assert len(reflector.queue) == 0  # our own write coming back
        reflector._copy_changed("twin", "settings", {"resourceVersion": "8"})
        assert len(reflector.queue) == 1  # somebody else changed the copy: compare again
        reflector._remember_write("twin", "settings", written)
        reflector.twin_removed("twin")
        assert reflector._own_writes == {}

    asyncio.run(changes())
