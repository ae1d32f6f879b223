"""The virtual kubelet's parts, built as vk/runner.py builds them: one peering context shared by all of them.

Nothing is run: the clients are never called while the parts are only built and wired.
"""

from __future__ import annotations

import asyncio
import logging
import types

from catamaran.constants import LABEL_VIRTUAL_VOLUME_NODE, tenant_namespace, virtual_node_name
from catamaran.kube.events import EventRecorder
from catamaran.vk.context import PeeringContext
from catamaran.vk.node import HealthSettings, NodeSettings, VirtualNode
from catamaran.vk.pods import PodController
from catamaran.vk.reflection.policy import settings_from_spec
from catamaran.vk.runner import VirtualKubelet


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


def wired() -> tuple[PeeringContext, VirtualNode, PodController]:
    context = peering()
    node = VirtualNode(context, NodeSettings(provider_id="provider", node_ip="10.0.0.1"), HealthSettings())
    return context, node, PodController(context, node, settings_from_spec(None), remap_cidr=None)


def test_the_names_of_a_peering_follow_from_the_cluster_ids():
    context = peering()
    assert context.node_name == virtual_node_name("provider")
    assert context.tenant_namespace == tenant_namespace("consumer")


def test_every_part_reads_the_one_peering_context():
    context, node, pods = wired()
    reflection = pods.reflection
    parts = [node, pods, pods.twins, pods.remote_events, reflection, reflection.tokens, reflection.volumes]
    assert all(part.peering is context for part in parts + list(reflection.reflectors.values()))
    assert node.name == context.node_name
    assert pods.local_pods.fields == {"spec.nodeName": context.node_name}
    assert pods.twins.requests.namespace == context.tenant_namespace
    assert reflection.volumes.volumes.labels == {LABEL_VIRTUAL_VOLUME_NODE: context.node_name}
    assert {r.context.node_name for r in reflection.reflectors.values()} == {context.node_name}


def test_the_pod_controller_wires_its_reflection_in():
    _, _, pods = wired()
    reflection = pods.reflection
    # Reflection hears of twins after the pods and their Events do, as it always has.
    assert pods.twins.ready_listeners == [pods._twin_ready, pods.remote_events.twin_ready, reflection.twin_ready]
    assert pods.twins.drainers == [reflection.drain]
    assert pods.remote_events.reflected == reflection.local_object
    assert pods.queue.add in reflection.tokens.written_listeners
    assert pods.ips.local_ranges.services is reflection.reflectors["services"].local_objects.informer
    assert pods.ips.local_ranges.endpoint_slices is reflection.reflectors["endpointSlices"].local_objects.informer


class RefusingClient:
    async def get(self, *args, **kwargs):
        raise RuntimeError("the API server is away")


def test_a_status_report_from_a_callback_is_kept_until_done_and_its_failure_logged(caplog):
    kubelet = VirtualKubelet(
        RefusingClient(), foreign_cluster="provider", namespace="catamaran-system", consumer_id="c", node_ip="10.0.0.1"
    )

    async def report() -> None:
        kubelet._report_soon("ProviderReachable", "virtual node is serving", ready=True)
        [task] = kubelet._reports
        await asyncio.gather(task, return_exceptions=True)
        assert not kubelet._reports

    with caplog.at_level(logging.ERROR, logger="catamaran.vk.runner"):
        asyncio.run(report())
    [record] = [r for r in caplog.records if r.name == "catamaran.vk.runner"]
    assert record.getMessage() == "cannot report the foreign cluster's status"
    assert "the API server is away" in str(record.exc_info[1])


def test_the_echo_of_a_copy_this_process_wrote_is_not_reconciled_again():
    _, _, pods = wired()
    reflector = pods.reflection.reflectors["configMaps"]
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
