"""Which virtual nodes a peering has (vk/pools.py): one without pools, one per pool the provider lends, each with the
consumer's labels and taints for it, its share, and the cordon it shows."""

from __future__ import annotations

from catamaran.vk.pools import Cordon, PeeringNode, node_cordon, peering_nodes, pool_offer

GPU_TAINT = {"key": "example.com/gpu", "effect": "NoSchedule"}


def offer(*pools: dict, cordon: dict | None = None) -> dict:
    spec: dict = {"pools": list(pools)} if pools else {}
    if cordon is not None:
        spec["cordon"] = cordon
    return {"spec": spec}


def test_without_pools_the_peering_has_its_one_node():
    assert peering_nodes("cluster-2", None, {}) == {"catamaran-cluster-2": PeeringNode("catamaran-cluster-2")}
    assert list(peering_nodes("cluster-2", offer(), {"pools": [{"name": "gpu"}]})) == ["catamaran-cluster-2"]


def test_each_pool_lent_and_taken_is_a_node_with_the_consumers_labels_and_taints_for_it():
    foreign = {
        "pools": [
            {"name": "gpu", "nodeLabels": {"accelerator": "yes"}, "nodeTaints": [GPU_TAINT]},
            {"name": "general"},
            {"name": "not-lent", "nodeLabels": {"x": "y"}},
        ]
    }
    nodes = peering_nodes("cluster-2", offer({"name": "general"}, {"name": "gpu", "sharingPercentage": 50}), foreign)
    assert sorted(nodes) == ["catamaran-cluster-2.general", "catamaran-cluster-2.gpu"]
    gpu = nodes["catamaran-cluster-2.gpu"]
    assert (gpu.pool, gpu.sharing_percentage, gpu.taints) == ("gpu", 50, (GPU_TAINT,))
    assert dict(gpu.labels) == {"accelerator": "yes"}  # the node adds LABEL_POOL (node.node_labels)
    general = nodes["catamaran-cluster-2.general"]
    assert (general.sharing_percentage, general.labels, general.taints) == (None, (), ())


def test_the_providers_offer_alone_makes_no_node_on_the_consumer():
    """A provider lending pools the consumer does not take (thousands, say) gets no node for them: the consumer's
    ForeignCluster (its own CRD bounds it to 16) says which pools it takes."""
    lent = offer(*({"name": f"pool-{i}"} for i in range(1000)))
    assert list(peering_nodes("p", lent, {})) == ["catamaran-p"]
    assert list(peering_nodes("p", lent, {"pools": [{"name": "pool-7"}, {"name": "tpu"}]})) == ["catamaran-p.pool-7"]


def test_a_pool_name_that_could_leave_its_node_name_is_no_pool():
    taken = {"pools": [{"name": name} for name in ("a.b", "x/y", "")]}
    nodes = peering_nodes("p", offer({"name": "a.b"}, {"name": "x/y"}, {"name": ""}, {"nameless": 1}), taken)
    assert list(nodes) == ["catamaran-p"]


def test_a_pool_node_sizes_itself_from_its_pools_entry_of_the_offers_status():
    status = {"free": {"cpu": "8"}, "pools": [{"name": "gpu", "free": {"cpu": "2", "example.com/gpu": "4"}}]}
    assert pool_offer(status, None) is status
    assert pool_offer(status, "gpu") == {"name": "gpu", "free": {"cpu": "2", "example.com/gpu": "4"}}
    assert pool_offer(status, "general") is None  # not published yet: the node says so
    assert pool_offer(None, "gpu") is None


def test_the_cordon_a_node_shows_the_going_drain_then_the_stronger_of_the_tenants_and_its_pools():
    pool = PeeringNode("catamaran-p.gpu", pool="gpu", cordon=Cordon(drain=True, reason="gpus serviced"))
    plain = PeeringNode("catamaran-p.general", pool="general")
    tenant = Cordon(reason="budget spent")
    assert node_cordon(None, plain, going=False) is None
    assert node_cordon(tenant, plain, going=False) == tenant
    assert node_cordon(tenant, pool, going=False) == pool.cordon  # the pool drains: stronger than a cordon
    assert node_cordon(Cordon(drain=True), pool, going=False) == Cordon(drain=True)
    assert node_cordon(None, pool, going=False) == pool.cordon
    going = node_cordon(None, plain, going=True)
    assert going == Cordon(drain=True, reason="pool general is no longer lent")
    assert node_cordon(None, PeeringNode("catamaran-p"), going=True).reason == (
        "the provider lends this tenant node pools now"
    )


def test_a_pools_cordon_reason_is_bounded_as_the_providers_text():
    lent = offer({"name": "gpu", "cordon": {"reason": "x" * 100_000, "drain": "yes"}})
    nodes = peering_nodes("p", lent, {"pools": [{"name": "gpu"}]})
    cordon = nodes["catamaran-p.gpu"].cordon
    assert cordon is not None
    assert not cordon.drain
    assert len(cordon.reason) < 2000
