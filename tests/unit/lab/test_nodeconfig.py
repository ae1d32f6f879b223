"""The real nodes' configuration files (catamaran_lab/nodeconfig.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml

from catamaran_lab import config, nodeconfig


def layout(tmp_path: Path, cluster: str = "cluster-1") -> nodeconfig.NodeLayout:
    return nodeconfig.NodeLayout(root=tmp_path / cluster / "node", lab_id="abc123", cluster=cluster)


def test_every_host_name_of_a_node_carries_the_lab_and_cluster(tmp_path):
    one, two = layout(tmp_path, "cluster-1"), layout(tmp_path, "cluster-2")
    assert one.netns == "catamaran-abc123-cluster-1" != two.netns
    assert one.cgroup_root == "/catamaran-abc123-cluster-1"
    assert max(len(one.host_link(9)), len(one.node_link(9))) <= 15, "Linux interface names"
    assert one.containerd_socket != two.containerd_socket


def test_containerd_config_is_isolated_and_has_the_settings_this_machine_needs(tmp_path):
    node = layout(tmp_path)
    parsed = tomllib.loads(nodeconfig.containerd_config(node, "catamaran.lab/pause:3.10.2"))
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == "catamaran.lab/pause:3.10.2"
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False
    for path in (parsed["root"], parsed["state"], parsed["grpc"]["address"], runc["Root"], cri["cni"]["conf_dir"]):
        assert path.startswith(str(node.root)), path


def test_cni_bridge_serves_the_node_range_and_keeps_its_state_in_the_lab(tmp_path):
    spec = config.load(real_nodes=True).clusters[0].real_node
    conflist = json.loads(nodeconfig.cni_config(layout(tmp_path), spec))
    bridge = conflist["plugins"][0]
    assert conflist["name"] == "catamaran-abc123-cluster-1"
    assert bridge["ipam"]["ranges"] == [[{"subnet": spec.pod_cidr}]]
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    assert bridge["hairpinMode"]
    assert bridge["ipMasq"]


def test_kubelet_config_carries_the_required_settings(tmp_path):
    spec = config.load(real_nodes=True).clusters[0].real_node
    kubelet = yaml.safe_load(nodeconfig.kubelet_config(layout(tmp_path), spec, tmp_path / "ca.crt"))
    assert kubelet["failCgroupV1"] is False
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["oomScoreAdj"] == 0
    assert kubelet["cgroupRoot"] == "/catamaran-abc123-cluster-1"
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["authorization"]["mode"] == "Webhook"
    assert kubelet["readOnlyPort"] == 0
    assert kubelet["imageGCHighThresholdPercent"] == 100, "lab images cannot be pulled again"
    # An imported image stays usable after a test pulls the same image ID from the registry with credentials.
    assert kubelet["imagePullCredentialsVerificationPolicy"] == "NeverVerify"
    assert kubelet["podLogsDir"].startswith(str(tmp_path))


def test_kube_proxy_leaves_host_conntrack_settings_alone(tmp_path):
    cluster = config.load(real_nodes=True).clusters[0]
    proxy = yaml.safe_load(nodeconfig.kube_proxy_config(layout(tmp_path), cluster.real_node, cluster))
    assert proxy["mode"] == "iptables"
    assert proxy["conntrack"]["maxPerCore"] == 0
    assert proxy["clusterCIDR"] == cluster.pod_cidr
    assert proxy["hostnameOverride"] == cluster.real_node.name


def test_toml_writer_quotes_dotted_table_names():
    text = nodeconfig._toml({"plugins": {"a.b.c": {"x": [1, "y"], "flag": True}}})
    assert tomllib.loads(text) == {"plugins": {"a.b.c": {"x": [1, "y"], "flag": True}}}
