"""The lab's shape (catamaran_lab/config.py): clusters, nodes, ranges, links, overrides."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from catamaran_lab import config, nodeconfig
from catamaran_lab.errors import LabError


def test_default_lab_has_three_distinct_clusters():
    lab = config.load()
    assert [c.name for c in lab.clusters] == ["cluster-1", "cluster-2", "cluster-3"]
    assert len({c.region for c in lab.clusters}) == 3
    ranges = [ipaddress.ip_network(c.pod_cidr) for c in lab.clusters]
    assert not any(a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
    ports = [port for c in lab.clusters for port in c.ports.values()]
    assert len(ports) == len(set(ports)) == 3 * len(config.PORT_OFFSETS)


def test_overlapping_pod_ranges_are_identical_across_clusters():
    lab = config.load(overlapping_pod_cidrs=True)
    assert len({c.pod_cidr for c in lab.clusters}) == 1


def test_each_node_gets_its_own_slice_of_the_cluster_range():
    for cluster in config.load(clusters=2).clusters:
        node_ranges = [ipaddress.ip_network(n.pod_cidr) for n in cluster.nodes]
        assert len(set(node_ranges)) == len(node_ranges)
        assert all(r.subnet_of(ipaddress.ip_network(cluster.pod_cidr)) for r in node_ranges)


def test_nodes_carry_the_kwok_selector_and_topology_labels():
    cluster = config.load().cluster("cluster-2")
    for node in cluster.nodes:
        labels = node.manifest()["metadata"]["labels"]
        assert labels[config.MANAGED_NODE_LABEL] == "true"
        assert labels[config.REGION_LABEL] == cluster.region
        assert labels[config.PROVIDER_LABEL] == cluster.provider


def test_extra_resources_go_to_the_first_nodes_only(lab_file):
    path = lab_file(
        "defaults: {nodes: 3, allocatable: {cpu: '4'}}\n"
        "clusters:\n  - {name: gpu-lab, extraResources: [{nvidia.com/gpu: '1'}]}\n"
    )
    nodes = config.load(path).clusters[0].nodes
    assert nodes[0].manifest()["status"]["allocatable"] == {"cpu": "4", "nvidia.com/gpu": "1"}
    assert "nvidia.com/gpu" not in nodes[1].allocatable


def test_more_clusters_than_declared_are_generated():
    lab = config.load(clusters=5)
    assert lab.clusters[4].name == "cluster-5"
    assert lab.clusters[4].region == "region-e"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [{name: Bad_Name}]", "not a DNS-1123 label"),
        ("clusters: [{name: a}, {name: a}]", "must be unique"),
        ("clusters: [{name: a, nodes: 1, extraResources: [{x: '1'}, {x: '1'}]}]", "only 1 nodes"),
        ("basePort: 80\nclusters: [{name: a}]", "out of range"),
        ("clusters: [{name: a, nodes: 0}]", "between 1 and 200"),
    ],
)
def test_invalid_lab_files_are_rejected_with_the_reason(lab_file, text, message):
    with pytest.raises(LabError, match=message):
        config.load(lab_file(text))


def test_cluster_count_is_bounded():
    with pytest.raises(LabError, match="1 to 9 clusters"):
        config.load(clusters=0)


def test_config_round_trips_through_the_state_file():
    lab = config.load(overlapping_pod_cidrs=True)
    assert config.LabConfig.from_dict(json.loads(json.dumps(lab.to_dict()))) == lab


def test_fake_nodes_name_their_resource_metrics_path():
    node = config.load().clusters[0].nodes[0]
    annotations = node.manifest()["metadata"]["annotations"]
    assert annotations[config.RESOURCE_METRICS_PATH_ANNOTATION] == f"/metrics/nodes/{node.name}/metrics/resource"


def test_real_nodes_have_their_own_pod_range_link_and_taint():
    lab = config.load(real_nodes=True)
    links = set()
    for cluster in lab.clusters:
        node = cluster.real_node
        pods = ipaddress.ip_network(node.pod_cidr)
        assert pods.subnet_of(ipaddress.ip_network(cluster.pod_cidr))
        assert not any(pods.overlaps(ipaddress.ip_network(fake.pod_cidr)) for fake in cluster.nodes)
        link = ipaddress.ip_network(f"{node.host_ip}/{node.link_prefix}", strict=False)
        assert ipaddress.ip_address(node.node_ip) in link
        assert link.subnet_of(config.NODE_LINK_RANGE)
        links.add(link)
        manifest = node.manifest()
        assert manifest["metadata"]["labels"][config.NODE_KIND_LABEL] == "real"
        assert manifest["spec"]["taints"] == [config.REAL_NODE_TAINT]
        assert config.MANAGED_NODE_LABEL not in manifest["metadata"]["labels"], "kwok must leave it alone"
        assert cluster.node_facing_server == f"https://{node.host_ip}:{cluster.ports['kube-apiserver']}"
    assert len(links) == len(lab.clusters)
    assert all(n.labels[config.NODE_KIND_LABEL] == "fake" for c in lab.clusters for n in c.nodes)


def test_another_port_block_gets_other_links():
    first = {c.real_node.host_ip for c in config.load(real_nodes=True).clusters}
    second = {c.real_node.host_ip for c in config.load(real_nodes=True, base_port=31000).clusters}
    assert not first & second


def test_labs_side_by_side_never_share_a_pod_range_a_link_or_an_underlay():
    """make test's labs: one per worker, a port block of 100 apart, and the overlap run's (tests/parallel.py)."""
    labs = [config.load(base_port=26000 + 100 * block, overlapping_pod_cidrs=block == 9) for block in range(10)]
    ranges = [ipaddress.ip_network(c.pod_cidr) for lab in labs for c in lab.clusters]
    distinct = {str(r) for r in ranges}
    assert len(distinct) == 9 * 3 + 1, "every cluster of a lab apart, and one shared range for the overlap lab"
    networks = [ipaddress.ip_network(r) for r in distinct]
    assert not any(a.overlaps(b) for a in networks for b in networks if a != b)
    assert all(r.prefixlen == 16 and 100 <= r.network_address.packed[1] <= 199 for r in networks)
    assert config.load().clusters[0].pod_cidr == "10.101.0.0/16", "the default lab keeps its ranges"
    for attribute in ("host_ip", "node_ip", "underlay_ip"):
        addresses = [getattr(c.real_node, attribute) for lab in labs for c in lab.clusters]
        assert len(addresses) == len(set(addresses)), attribute


def test_real_nodes_are_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("CATAMARAN_LAB_REAL_NODES", "0")
    lab = config.load()
    assert not lab.real_nodes
    assert all(c.real_node is None for c in lab.clusters)
    monkeypatch.setenv("CATAMARAN_LAB_REAL_NODES", "yes")
    with pytest.raises(LabError, match="CATAMARAN_LAB_REAL_NODES='yes' must be 0 or 1"):
        config.load()


def test_lab_id_tells_state_directories_apart():
    assert config.lab_id(Path("/a/.lab")) != config.lab_id(Path("/a/.lab-bench"))
    assert config.lab_id(Path("/a/.lab")) == config.lab_id(Path("/a/.lab"))


def test_environment_overrides_apply_to_every_caller(monkeypatch):
    monkeypatch.setenv("CATAMARAN_LAB_BASE_PORT", "30000")
    monkeypatch.setenv("CATAMARAN_LAB_CLUSTERS", "2")
    monkeypatch.setenv("CATAMARAN_LAB_OVERLAP", "1")
    lab = config.load()
    assert lab.base_port == 30000
    assert lab.clusters[0].ports["kube-apiserver"] == 30010
    assert len(lab.clusters) == 2
    assert lab.overlapping_pod_cidrs


def test_malformed_environment_override_is_named(monkeypatch):
    monkeypatch.setenv("CATAMARAN_LAB_BASE_PORT", "lots")
    with pytest.raises(LabError, match="CATAMARAN_LAB_BASE_PORT='lots' is not a whole number"):
        config.load()


def test_the_default_lab_does_not_throttle_its_controllers_at_upstream_rates():
    settings = config.load(real_nodes=False).control_plane
    assert settings.client_qps >= 1000
    assert settings.client_burst >= settings.client_qps


def test_a_wrong_control_plane_setting_is_named(tmp_path):
    lab_file = tmp_path / "lab.yaml"
    lab_file.write_text("controlPlane: {clientQPS: 0}\nclusters: [{}]\n")
    with pytest.raises(LabError, match=r"controlPlane\.clientQPS"):
        config.load(lab_file)
    lab_file.write_text("controlPlane: {qps: 5}\nclusters: [{}]\n")
    with pytest.raises(LabError, match=r"unknown keys \['qps'\]"):
        config.load(lab_file)


def test_real_nodes_share_an_underlay_per_lab_that_never_collides():
    first = [c.real_node.underlay_ip for c in config.load().clusters]
    moved = [c.real_node.underlay_ip for c in config.load(base_port=28000).clusters]
    assert first == ["172.30.4.1", "172.30.4.2", "172.30.4.3"]
    assert not set(first) & set(moved)
    layout = nodeconfig.NodeLayout(root=Path("/x"), lab_id="abc123", cluster="cluster-1")
    names = [layout.underlay_host_link(9), layout.underlay_node_link(9), nodeconfig.underlay_bridge("abc123")]
    assert all(name.startswith("cmabc123") and len(name) <= 15 for name in names)
    assert len(layout.gateway_interface_prefix(9)) <= 11  # room for the gateway's 4+ characters per tunnel


def test_nodes_holding_thousands_of_pods_get_ranges_that_hold_their_addresses():
    """kwok hands out pod IPs past its node's range once that is used up; a provider's announced ranges (the nodes')
    then refuse them. The bench's nodes of 10 000 pods each get a /18; ordinary nodes keep their /24."""
    bench = config.load(Path(__file__).resolve().parents[3] / "bench" / "lab.yaml", real_nodes=False)
    ranges = [ipaddress.IPv4Network(node.pod_cidr) for node in bench.clusters[1].nodes]
    assert [r.prefixlen for r in ranges] == [18, 18, 18]
    assert all(r.num_addresses - 2 >= 10_000 for r in ranges)
    assert all(r.subnet_of(ipaddress.IPv4Network(bench.clusters[1].pod_cidr)) for r in ranges)
    assert not any(a.overlaps(b) for a in ranges for b in ranges if a != b)
    assert {ipaddress.IPv4Network(n.pod_cidr).prefixlen for n in config.load().clusters[0].nodes} == {24}
    assert config.fake_node_pod_prefix(254) == 24
    assert config.fake_node_pod_prefix(255) == 23


def test_nodes_whose_pods_the_cluster_range_cannot_hold_are_refused():
    with pytest.raises(LabError, match=r"3 nodes of 10000 pods each need more pod addresses .* beside its real nodes"):
        config.load(Path(__file__).resolve().parents[3] / "bench" / "lab.yaml", real_nodes=True)
