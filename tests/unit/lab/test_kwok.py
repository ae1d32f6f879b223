"""kwokctl's configuration (catamaran_lab/kwok.py)."""

from __future__ import annotations

import json
from pathlib import Path

from catamaran_lab import binaries, config, kwok, pki


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


def test_lab_rbac_lets_kube_router_read_what_it_watches_and_nothing_more():
    objects = {(o["kind"], o["metadata"]["name"]): o for o in kwok.lab_rbac()}
    binding = objects[("ClusterRoleBinding", pki.KUBE_ROUTER_USER)]
    assert binding["roleRef"]["name"] == pki.KUBE_ROUTER_USER
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.KUBE_ROUTER_USER}
    ]
    rules = objects[("ClusterRole", pki.KUBE_ROUTER_USER)]["rules"]
    granted = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted == {
        ("", "namespaces"),
        ("", "pods"),
        ("", "services"),
        ("", "nodes"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
        ("networking.k8s.io", "networkpolicies"),
    }
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in rules)


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
