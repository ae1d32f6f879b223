"""Pure logic of the lab: its shape, kwokctl configuration, pins, cache checks and preflight messages."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import stat
from pathlib import Path

import pytest
import yaml

from catamaran_lab import binaries, config, dns, kwok, nodeconfig, pki, preflight
from catamaran_lab.errors import LabError
from catamaran_lab.lab import exited_components


@pytest.fixture
def lab_file(tmp_path):
    def write(text: str) -> Path:
        path = tmp_path / "lab.yaml"
        path.write_text(text)
        return path

    return write


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


def test_kwokctl_is_told_every_binary_and_never_to_manage_all_nodes(tmp_path):
    cluster = config.load().clusters[0]
    paths = {name: tmp_path / name for name in binaries.ALL_BINARIES}
    documents = kwok.kwokctl_documents(cluster, paths, tmp_path, tmp_path / "pki")
    options = documents[0]["options"]
    for option in ("kubeApiserver", "kubeControllerManager", "kubeScheduler", "kubectl", "etcd", "kwokController"):
        assert Path(options[f"{option}Binary"]).parent == tmp_path
    assert options["kubeApiserverPort"] == cluster.ports["kube-apiserver"]
    assert options["bindAddress"] == "127.0.0.1"
    assert options["heartbeatFactor"] == 1, "kwokctl would multiply the node monitor periods by 5"
    assert options["kubeControllerManagerNodeMonitorGracePeriodMilliseconds"] == kwok.NODE_MONITOR_GRACE_MS
    args = {a["key"]: a for a in documents[0]["componentsPatches"][0]["extraArgs"]}
    assert args["manage-all-nodes"] == {"key": "manage-all-nodes", "value": "false", "override": True}
    assert args["manage-nodes-with-label-selector"]["value"] == f"{config.MANAGED_NODE_LABEL}=true"
    kinds = [d["kind"] for d in documents]
    assert {"ClusterLogs", "ClusterExec"} <= set(kinds)


def test_kube_apiserver_verifies_kubelets_and_presents_its_own_client_certificate(tmp_path):
    cluster = config.load(real_nodes=True).clusters[0]
    paths = {name: tmp_path / name for name in binaries.ALL_BINARIES}
    documents = kwok.kwokctl_documents(cluster, paths, tmp_path, tmp_path / "pki")
    patches = {p["name"]: p for p in documents[0]["componentsPatches"]}
    args = {a["key"]: a["value"] for a in patches["kube-apiserver"]["extraArgs"]}
    assert args["kubelet-preferred-address-types"].startswith("InternalIP")
    assert args["kubelet-certificate-authority"] == str(tmp_path / "pki" / "ca.crt")
    assert args["kubelet-client-certificate"] == str(tmp_path / "pki" / "kube-apiserver-kubelet-client.crt")
    assert args["requestheader-allowed-names"] == pki.FRONT_PROXY_CLIENT
    # Pods and kubelets in the real node's namespace reach the API server at the host end of the link.
    assert args["advertise-address"] == cluster.real_node.host_ip
    assert args["bind-address"] == "0.0.0.0"
    kcm = {a["key"]: a["value"] for a in patches["kube-controller-manager"]["extraArgs"]}
    assert kcm["cluster-signing-cert-file"] == str(tmp_path / "pki" / "ca.crt")
    assert kcm["cluster-signing-key-file"] == str(tmp_path / "pki" / "ca.key")
    kwok_args = {a["key"]: a["value"] for a in patches["kwok-controller"]["extraArgs"]}
    assert kwok_args["tls-cert-file"] == str(tmp_path / "pki" / "kwok-kubelet-serving.crt")


def test_metrics_server_verifies_kubelets_with_its_own_identity(tmp_path):
    cluster = config.load().clusters[0]
    paths = {name: tmp_path / name for name in binaries.ALL_BINARIES}
    documents = kwok.kwokctl_documents(cluster, paths, tmp_path, tmp_path / "pki")
    options = documents[0]["options"]
    assert options["enableMetricsServer"] is True
    assert options["metricsServerBinary"] == str(tmp_path / "metrics-server")
    assert options["metricsServerPort"] == cluster.ports["metrics-server"]
    # A local kustomization: kwokctl would download the release manifest otherwise.
    assert options["metricsServerManifests"] == [str(tmp_path / kwok.METRICS_SERVER_MANIFEST_DIR)]
    patches = {p["name"]: p for p in documents[0]["componentsPatches"]}
    args = [(a["key"], a["value"]) for a in patches["metrics-server"]["extraArgs"]]
    # kwokctl passes a bare --kubelet-insecure-tls; only a later =false turns it off.
    assert ("kubelet-insecure-tls", "false") in args
    assert ("kubelet-certificate-authority", str(tmp_path / "pki" / "ca.crt")) in args
    assert ("kubelet-client-certificate", str(tmp_path / "pki" / "metrics-server-kubelet-client.crt")) in args
    # Its callers' CAs as flags: looking them up at start is fatal when the API server does not serve yet.
    assert ("client-ca-file", str(tmp_path / "pki" / "ca.crt")) in args
    apiserver = [(a["key"], a["value"]) for a in patches["kube-apiserver"]["extraArgs"]]
    front_proxy = [(key, value) for key, value in apiserver if key.startswith("requestheader-")]
    assert len(front_proxy) == 5
    assert set(front_proxy) <= set(args), "metrics-server trusts the headers the API server's aggregator sends"
    kinds = {d["kind"] for d in documents}
    assert {"Metric", "ClusterResourceUsage"} <= kinds


def test_metrics_server_manifests_survive_kwokctls_rewriting():
    manifests = kwok.metrics_server_manifests(b"CA")
    # kwokctl keeps only these kinds of a metrics-server manifest (and fails on any it does not know).
    assert {m["kind"] for m in manifests} == {"Service", "APIService"}
    service = next(m for m in manifests if m["kind"] == "APIService")["spec"]
    assert service["caBundle"] == "Q0E="
    assert "insecureSkipTLSVerify" not in service


def test_lab_rbac_grants_kubelet_access_without_system_masters():
    bindings = {o["metadata"]["name"]: o for o in kwok.lab_rbac() if o["kind"] == "ClusterRoleBinding"}
    apiserver = bindings["catamaran-lab:kube-apiserver-kubelet-client"]
    assert apiserver["roleRef"]["name"] == "system:kubelet-api-admin"
    assert apiserver["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.KUBE_APISERVER_KUBELET_CLIENT}
    ]
    assert bindings["system:metrics-server"]["subjects"][0]["name"] == pki.METRICS_SERVER_KUBELET_CLIENT


def test_fake_nodes_name_their_resource_metrics_path():
    node = config.load().clusters[0].nodes[0]
    annotations = node.manifest()["metadata"]["annotations"]
    assert annotations[config.RESOURCE_METRICS_PATH_ANNOTATION] == f"/metrics/nodes/{node.name}/metrics/resource"


def component_args(cluster, tmp_path) -> dict[str, dict[str, str]]:
    """Each kwokctl component's extra arguments for `cluster`, as flag -> value."""
    paths = {name: tmp_path / name for name in binaries.ALL_BINARIES}
    documents = kwok.kwokctl_documents(cluster, paths, tmp_path, tmp_path / "pki")
    return {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in documents[0]["componentsPatches"]}


def test_with_a_real_node_the_api_server_dials_endpoints_and_metrics_server_has_one(tmp_path):
    cluster = config.load(real_nodes=True).clusters[0]
    args = component_args(cluster, tmp_path)
    assert args["kube-apiserver"]["enable-aggregator-routing"] == "true"  # webhooks served by pods, through Services
    assert args["metrics-server"]["bind-address"] == "0.0.0.0"
    service, endpoints = kwok.metrics_server_endpoint(cluster)
    # The endpoint resolver finds the Service's port by the APIService's port (kwokctl sets metrics-server's own).
    assert service["spec"]["ports"][0]["port"] == cluster.ports["metrics-server"]
    assert "selector" not in service["spec"]
    assert service["spec"]["type"] == "ClusterIP"
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    assert endpoints["endpoints"][0]["addresses"] == [cluster.real_node.host_ip]
    assert endpoints["ports"][0]["name"] == service["spec"]["ports"][0]["name"]


def test_without_real_nodes_the_api_server_stays_on_loopback(tmp_path):
    cluster = config.load(real_nodes=False).clusters[0]
    assert cluster.real_node is None
    args = component_args(cluster, tmp_path)
    assert "bind-address" not in args["kube-apiserver"]
    assert "enable-aggregator-routing" not in args["kube-apiserver"]
    assert "bind-address" not in args["metrics-server"]
    assert cluster.node_facing_server == cluster.server


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


def test_pins_come_from_the_wrapper_module():
    pins = binaries.read_pins()
    assert pins.kubernetes.startswith("v1.")
    assert pins.etcd.startswith("v3.")
    assert pins.kubernetes in pins.cache_key
    assert pins.kwok in pins.cache_key
    assert pins.metrics_server.startswith("v0.")
    assert pins.metrics_server in pins.cache_key
    assert pins.companion_version("coredns").startswith("v1.")
    assert pins.companion_version("wireguard-go").startswith("v0.")
    cache = binaries.BinaryCache(pins, Path("/cache"))
    for name in ("coredns", "wireguard-go"):
        assert cache.companion_dirs[name].name.startswith(f"{name}-{pins.companion_version(name)}_")


@pytest.mark.parametrize("companion", ["coredns", "wireguard-go"])
def test_a_companion_is_cached_apart_so_its_pin_moves_alone(tmp_path, companion):
    cache = _fake_complete_cache(tmp_path)
    assert cache.path(companion).parent.parent == cache.companion_dirs[companion] != cache.dir
    cache.path(companion).unlink()
    assert f"{companion} is missing" in cache.problem()
    assert cache._problem(cache.dir, binaries.KUBE_BINARIES) is None


def test_pins_without_kubernetes_are_an_error(tmp_path):
    go_mod = tmp_path / "go.mod"
    go_mod.write_text("module x\n\ngo 1.26.0\n")
    with pytest.raises(LabError, match=r"does not require k8s\.io/kubernetes"):
        binaries.read_pins(go_mod)


def test_version_stamp_matches_upstream_release_builds():
    flags = binaries.kubernetes_ldflags("v1.36.3")
    assert "-X 'k8s.io/component-base/version.gitVersion=v1.36.3'" in flags
    assert "-X 'k8s.io/component-base/version.gitMinor=36'" in flags


def _fake_complete_cache(root: Path) -> binaries.BinaryCache:
    cache = binaries.BinaryCache(root=root)
    entries: dict[Path, dict] = {}
    for name in binaries.ALL_BINARIES:
        path = cache.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * 10)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        entry = {"size": path.stat().st_size, "sha256": binaries._sha256(path)}
        entries.setdefault(path.parent.parent, {})[name] = entry
    for directory, binaries_there in entries.items():
        (directory / binaries.MANIFEST).write_text(json.dumps({"binaries": binaries_there}))
    return cache


def test_complete_cache_is_used_as_is(tmp_path):
    assert _fake_complete_cache(tmp_path).problem() is None


def test_missing_cache_needs_a_build(tmp_path):
    assert binaries.BinaryCache(root=tmp_path).problem() == "not built yet"


def test_interrupted_build_is_detected(tmp_path):
    cache = _fake_complete_cache(tmp_path)
    (cache.dir / binaries.MANIFEST).unlink()
    assert "half-built" in cache.problem()


def test_truncated_binary_is_detected(tmp_path):
    cache = _fake_complete_cache(tmp_path)
    cache.path("kube-apiserver").write_bytes(b"x")
    assert "kube-apiserver does not match" in cache.problem()


def test_missing_binary_is_detected(tmp_path):
    cache = _fake_complete_cache(tmp_path)
    cache.path("kwokctl").unlink()
    assert "kwokctl is missing" in cache.problem()


def _fake_go(tmp_path: Path, version: str, monkeypatch) -> None:
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\necho go{version}\n")
    go.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_old_go_is_named_with_the_needed_version(tmp_path, monkeypatch):
    _fake_go(tmp_path, "1.24.2", monkeypatch)
    with pytest.raises(LabError, match=r"Go 1\.24\.2 found .* needs Go >= 1\.26\.0"):
        preflight.check_go("1.26.0")


def test_new_enough_go_passes(tmp_path, monkeypatch):
    _fake_go(tmp_path, "1.26.8", monkeypatch)
    assert preflight.check_go("1.26.0") == "1.26.8"


def test_missing_go_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabError, match="Go is not on PATH"):
        preflight.check_go("1.26.0")


def test_short_disk_is_reported(tmp_path):
    with pytest.raises(LabError, match="not enough disk for the test"):
        preflight.check_disk(tmp_path, 1 << 60, "the test")


def test_busy_port_names_its_holder():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LabError) as raised:
            preflight.check_ports_free({port: "cluster-9 kube-apiserver"})
    message = str(raised.value)
    assert f"127.0.0.1:{port} (cluster-9 kube-apiserver)" in message
    assert f"pid {os.getpid()}" in message


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


def test_the_controllers_client_rates_come_from_the_lab_file_and_reach_both_components(tmp_path):
    lab_file = tmp_path / "lab.yaml"
    lab_file.write_text("controlPlane: {clientQPS: 700, clientBurst: 1400, concurrentSyncs: 12}\nclusters: [{}]\n")
    lab = config.load(lab_file, real_nodes=False)
    assert lab.control_plane == config.ControlPlaneSettings(client_qps=700, client_burst=1400, concurrent_syncs=12)
    assert config.LabConfig.from_dict(json.loads(json.dumps(lab.to_dict()))) == lab
    paths = {name: tmp_path / name for name in binaries.ALL_BINARIES}
    documents = kwok.kwokctl_documents(lab.clusters[0], paths, tmp_path, tmp_path / "pki", lab.control_plane)
    patches = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in documents[0]["componentsPatches"]}
    for component in ("kube-controller-manager", "kube-scheduler"):
        assert (patches[component]["kube-api-qps"], patches[component]["kube-api-burst"]) == ("700", "1400")
    assert patches["kube-controller-manager"]["concurrent-replicaset-syncs"] == "12"
    assert "700 requests/s" in lab.control_plane.describe()


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


def test_a_real_node_that_stays_not_ready_names_its_components_last_errors(tmp_path):
    from catamaran_lab.realnode import last_error_lines

    log = tmp_path / "kubelet.log"
    log.write_text(
        "I1123 10:00:00.000 1 server.go:1] started\n"
        'E1123 10:00:01.000 1 kubelet.go:2] "Container runtime network not ready" err="cni config uninitialized"\n'
        'time="2026-11-23T10:00:02Z" level=error msg="failed to load cni"\n'
        "W1123 10:00:03.000 1 x.go:3] a warning\n"
    )
    assert last_error_lines(log) == [
        'E1123 10:00:01.000 1 kubelet.go:2] "Container runtime network not ready" err="cni config uninitialized"',
        'time="2026-11-23T10:00:02Z" level=error msg="failed to load cni"',
    ]
    assert last_error_lines(tmp_path / "missing.log") == []


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


def test_real_nodes_share_an_underlay_per_lab_that_never_collides():
    first = [c.real_node.underlay_ip for c in config.load().clusters]
    moved = [c.real_node.underlay_ip for c in config.load(base_port=28000).clusters]
    assert first == ["172.30.4.1", "172.30.4.2", "172.30.4.3"]
    assert not set(first) & set(moved)
    layout = nodeconfig.NodeLayout(root=Path("/x"), lab_id="abc123", cluster="cluster-1")
    names = [layout.underlay_host_link(9), layout.underlay_node_link(9), nodeconfig.underlay_bridge("abc123")]
    assert all(name.startswith("cmabc123") and len(name) <= 15 for name in names)
    assert len(layout.gateway_interface_prefix(9)) <= 11  # room for the gateway's 4+ characters per tunnel


def test_inotify_limits_are_raised_never_lowered_and_a_refusal_says_how(tmp_path):
    (tmp_path / "max_user_instances").write_text("128\n")
    (tmp_path / "max_user_watches").write_text("1048576\n")
    logged = []
    preflight.raise_inotify_limits(logged.append, tmp_path)
    assert (tmp_path / "max_user_instances").read_text() == str(preflight.INOTIFY_LIMITS["max_user_instances"])
    assert (tmp_path / "max_user_watches").read_text() == "1048576\n", "a higher limit is kept"
    assert len(logged) == 1
    assert "max_user_instances raised from 128" in logged[0]
    (tmp_path / "max_user_watches").unlink()
    (tmp_path / "max_user_watches").mkdir()  # unreadable as a number, as a setting this process may not touch
    with pytest.raises(LabError, match=r"sysctl -w fs.inotify.max_user_watches=524288"):
        preflight.raise_inotify_limits(logged.append, tmp_path)


def test_a_component_that_exited_during_the_start_is_started_again_as_kwokctl_started_it():
    config = {
        "components": [
            {"name": "kube-apiserver", "binary": "/lab/bin/kube-apiserver", "args": ["--a=1"], "workDir": "/lab/c1"},
            {"name": "kube-controller-manager", "binary": "/lab/bin/kcm", "args": ["--b=2"], "workDir": "/lab/c1"},
            {"name": "kube-scheduler", "binary": "/lab/bin/sched", "workDir": "/lab/c1"},
        ]
    }
    processes = {"kube-apiserver": True, "kube-controller-manager": False, "kube-scheduler": False}
    assert exited_components(processes, config) == [
        ("kube-controller-manager", ["/lab/bin/kcm", "--b=2"], "/lab/c1"),
        ("kube-scheduler", ["/lab/bin/sched"], "/lab/c1"),
    ]
    assert exited_components({"kube-apiserver": True}, config) == [], "no pid file: not kwokctl's to start"
