"""The peering's virtual nodes (vk/virtual_nodes.py) against in-memory clusters: a node per pool the provider lends,
each with its pool's share, labels, taints and a kubelet port of its own; a pool removed is cordoned, its pods
evicted, its Node and Lease deleted once empty; the pool-less node goes once pools appear. The lab proves the same
with real API servers and nodes (tests/integration/test_node_pools.py).
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Node, Pod

from catamaran.constants import LABEL_POOL, LABEL_REMOTE_CLUSTER_ID, LABEL_TYPE, TYPE_VIRTUAL_NODE
from catamaran.kube.events import EventRecorder
from catamaran.vk import tenant_drain, virtual_nodes
from catamaran.vk.context import PeeringContext
from catamaran.vk.kubelet.server import listen
from catamaran.vk.node import CORDON_TAINT, HealthSettings, NodeSettings
from catamaran.vk.virtual_nodes import VirtualNodes, stopped
from tests.unit.fakes.kube import FakeCluster, settle
from tests.unit.fakes.offloading import NoKubelet, run

PROVIDER = "p1"
BASE = "catamaran-p1"
GENERAL, GPU = f"{BASE}.general", f"{BASE}.gpu"
GPU_TAINT = {"key": "example.com/gpu", "effect": "NoSchedule"}


@pytest.fixture(autouse=True)
def quick_drain(monkeypatch):
    monkeypatch.setattr(tenant_drain, "EVICTED_RECHECK_S", 0)


def offer(*pools: str, free: str = "8") -> dict:
    """The provider's offer: its pools (the gpu pool lends half of its nodes) and what each has free."""
    spec = {"pools": [{"name": p, **({"sharingPercentage": 50} if p == "gpu" else {})} for p in pools]}
    status_pools = [{"name": p, "free": {"cpu": free, "pods": "110"}, "allocatable": {"cpu": free}} for p in pools]
    return {"spec": spec, "status": {"free": {"cpu": "16", "pods": "220"}, "pools": status_pools}}


class Served:
    """A virtual kubelet's nodes for provider p1, the consumer in memory; the kubelet APIs built, not served."""

    def __init__(self, existing: list[str] = ()):
        self.local = FakeCluster("consumer")
        for namespace in ("kube-node-lease", "shop"):
            self.local.add(Namespace, {"metadata": {"name": namespace}})
        for name in existing:
            labels = {LABEL_TYPE: TYPE_VIRTUAL_NODE, LABEL_REMOTE_CLUSTER_ID: PROVIDER}
            self.local.add(Node, {"metadata": {"name": name, "labels": labels}})
        client = self.local.client()
        self.peering = PeeringContext("c1", PROVIDER, client, object(), EventRecorder(client, "vk"), ("ns", PROVIDER))
        self.kubelets: dict[str, int] = {}
        self.local_pod: dict = {}  # each node's kubelet API's pod lookup
        self.listener = listen("127.0.0.1", 0)
        # The consumer takes both pools the provider lends (the old one no longer).
        gpu = {"name": "gpu", "nodeLabels": {"accelerator": "yes"}, "nodeTaints": [GPU_TAINT]}
        foreign = {"pools": [{"name": "general"}, gpu]}
        self.nodes = VirtualNodes(
            self.peering,
            NodeSettings(provider_id=PROVIDER, node_ip="127.0.0.1", suggested_labels={"region": "a"}),
            HealthSettings(),
            listener=self.listener,
            bind_address="127.0.0.1",
            make_kubelet=self._kubelet,
        )
        self.nodes.foreign_spec = foreign
        self.tasks: list[asyncio.Task] = []

    def _kubelet(self, name, sock, node, pods_on_node, local_pod) -> NoKubelet:
        self.kubelets[name] = sock.getsockname()[1]
        self.local_pod[name] = local_pod
        return NoKubelet()

    async def start(self, offered: dict | None) -> Served:
        self.nodes.offer = offered
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self.nodes.informer.run()), loop.create_task(self.nodes.local_pods.run())]
        await self.settle()
        await self.converge()
        return self

    async def converge(self) -> None:
        await self.nodes._converge()
        await self.settle()

    async def settle(self) -> None:
        await settle(self.local)

    def node(self, name: str) -> dict | None:
        return self.local.read(Node, name)

    async def stop(self) -> None:
        for unit in self.nodes.units.values():
            self.tasks += unit.tasks
            unit.sock.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.listener.close()


def bound_pod(name: str, node: str) -> dict:
    meta = {"name": name, "namespace": "shop", "uid": f"uid-{name}"}
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "app", "image": "a"}]}}


def test_each_pool_is_a_node_with_its_share_labels_taints_and_kubelet_port():
    async def scenario():
        served = await Served().start(offer("general", "gpu"))
        assert served.peering.node_names == {GENERAL, GPU}
        gpu, general = served.node(GPU), served.node(GENERAL)
        assert gpu["metadata"]["labels"][LABEL_POOL] == "gpu"
        assert gpu["metadata"]["labels"]["accelerator"] == "yes"
        assert gpu["metadata"]["labels"]["region"] == "a"
        assert gpu["metadata"]["labels"]["kubernetes.io/hostname"] == GPU
        assert "accelerator" not in general["metadata"]["labels"]
        assert GPU_TAINT in [{k: t[k] for k in ("key", "effect")} for t in gpu["spec"]["taints"]]
        assert not any(t["key"] == GPU_TAINT["key"] for t in general["spec"]["taints"])
        # Each sized from its pool's entry: 90 % (the peering's share) and the gpu pool's own 50 %.
        assert general["status"]["capacity"]["cpu"] == "7200m"
        assert gpu["status"]["capacity"]["cpu"] == "4"
        ports = {name: node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] for name, node in
                 ((GENERAL, general), (GPU, gpu))}  # fmt: skip
        assert ports == served.kubelets
        assert len(set(ports.values())) == 2
        assert served.listener.getsockname()[1] not in ports.values(), "the process's own port is the poolless node's"
        assert served.local.read(Lease, GPU, "kube-node-lease") is not None
        await served.stop()

    run(scenario)


def test_a_pool_removed_is_cordoned_its_pods_evicted_then_its_node_and_lease_deleted():
    async def scenario():
        served = await Served().start(offer("general", "gpu"))
        served.local.add(Pod, bound_pod("trainer", GPU))
        served.local.add(Pod, bound_pod("web", GENERAL))
        await served.settle()
        # Each node's kubelet API finds its own pods only.
        assert served.local_pod[GENERAL]("shop", "web") is not None
        assert served.local_pod[GPU]("shop", "web") is None
        assert served.local_pod[GPU]("shop", "trainer") is not None
        served.nodes.update_offer(offer("general"))
        await served.converge()
        await asyncio.sleep(0.05)
        await served.settle()
        evictions = [a.name for a in served.local.actions if a.subresource == "eviction"]
        assert evictions == ["trainer"], "only the removed pool's pod is evicted"
        assert served.node(GPU) is not None, "its pod is still terminating"
        served.local.finish_pod("trainer", "shop")  # the remote pod gone, the virtual kubelet releases it
        await served.settle()
        await served.converge()
        assert served.node(GPU) is None
        assert served.local.read(Lease, GPU, "kube-node-lease") is None
        assert served.peering.node_names == {GENERAL}
        assert served.nodes.local_pods.source(GPU) is None
        assert served.local.read(Pod, "web", "shop") is not None
        await served.stop()

    run(scenario)


def test_a_pool_removed_keeps_its_node_cordoned_while_a_pod_is_still_bound_to_it():
    async def scenario():
        served = await Served().start(offer("gpu"))
        pod = bound_pod("trainer", GPU)
        pod["metadata"]["finalizers"] = ["example.com/keep"]  # it outlives its eviction for now
        served.local.add(Pod, pod)
        await served.settle()
        served.nodes.update_offer(offer("general"))
        await served.converge()
        await served.converge()
        node = served.node(GPU)
        assert node is not None, "a pod is still bound to it"
        assert CORDON_TAINT["key"] in [t["key"] for t in node["spec"]["taints"]]
        cordoned = next(c for c in node["status"]["conditions"] if c["type"] == "catamaran.io/ProviderCordoned")
        assert (cordoned["status"], cordoned["reason"]) == ("True", "Drained")
        assert "pool gpu is no longer lent" in cordoned["message"]
        await served.stop()

    run(scenario)


def test_the_poolless_node_goes_once_pools_appear_and_a_stale_pool_node_found_at_start_goes_too():
    async def scenario():
        served = await Served(existing=[BASE, f"{BASE}.old"]).start(offer("general"))
        await served.converge()
        assert served.node(BASE) is None
        assert served.node(f"{BASE}.old") is None
        assert served.peering.node_names == {GENERAL}
        await served.stop()

    run(scenario)


def test_without_pools_the_peering_serves_its_one_node_on_the_process_port():
    async def scenario():
        served = await Served().start({"spec": {}, "status": {"free": {"cpu": "10", "pods": "110"}}})
        assert served.peering.node_names == {BASE}
        assert served.kubelets == {BASE: served.listener.getsockname()[1]}
        assert served.node(BASE)["status"]["capacity"]["cpu"] == "9"
        assert LABEL_POOL not in served.node(BASE)["metadata"]["labels"]
        await served.stop()

    run(scenario)


def test_a_nodes_loop_that_lost_its_cancellation_is_cancelled_again_until_it_ends(monkeypatch):
    async def scenario():
        cancels = []

        async def loses_the_first_cancel():
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancels.append(1)
                    if len(cancels) > 1:
                        raise  # as a loop whose request swallowed one cancellation, then met another

        task = asyncio.get_running_loop().create_task(loses_the_first_cancel())
        await asyncio.sleep(0)
        await asyncio.wait_for(stopped([task]), 10)
        assert task.cancelled()
        assert len(cancels) == 2

    monkeypatch.setattr(virtual_nodes, "CANCEL_AGAIN_S", 0.01)
    run(scenario)
