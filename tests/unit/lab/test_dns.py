"""The lab's cluster DNS (catamaran_lab/dns.py)."""

from __future__ import annotations

import yaml

from catamaran_lab import binaries, config, dns, kwok, nodeconfig


def test_every_cluster_with_a_real_node_gets_coredns_and_its_service_and_kubelets_use_it(tmp_path):
    lab = config.load()
    cluster = lab.clusters[0]
    paths = {name: tmp_path / name for name in binaries.ALL_BINARIES}
    (coredns,) = kwok.kwokctl_documents(cluster, paths, tmp_path, tmp_path / "pki")[0]["components"]
    assert coredns["binary"] == str(paths["coredns"])
    assert coredns["args"] == ["-conf", str(tmp_path / "dns" / "Corefile")]
    manifests = {m["kind"]: m for m in dns.manifests(cluster)}
    assert manifests["Service"]["spec"]["clusterIP"] == config.CLUSTER_DNS_IP
    assert manifests["EndpointSlice"]["endpoints"][0]["addresses"] == [cluster.real_node.host_ip]
    assert manifests["ClusterRole"]["rules"][0]["verbs"] == ["list", "watch"]  # reads, never writes
    corefile = dns.corefile(cluster, tmp_path / "kubeconfig")
    assert f"bind {cluster.real_node.host_ip}" in corefile
    assert "forward" not in corefile  # no upstream in the lab: other names fail fast
    layout = nodeconfig.NodeLayout(root=tmp_path, lab_id="abc123", cluster=cluster.name)
    kubelet = yaml.safe_load(nodeconfig.kubelet_config(layout, cluster.real_node, tmp_path / "ca.crt"))
    assert kubelet["clusterDNS"] == [config.CLUSTER_DNS_IP]
    without = config.load(real_nodes=False).clusters[0]
    assert kwok.kwokctl_documents(without, paths, tmp_path, tmp_path / "pki")[0]["components"] == []
