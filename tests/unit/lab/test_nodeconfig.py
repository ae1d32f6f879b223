"""Pure logic of the lab's real nodes: their configuration files, images and certificates."""

from __future__ import annotations

import datetime
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from catamaran_lab import config, images, nodeconfig, packages, pki
from catamaran_lab.errors import LabError


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


def test_image_layers_are_reproducible_and_complete():
    files = {"bin/tool": b"#!/bin/sh\n"}
    first = images._layer(files, {"usr/bin/alias": "/bin/tool"}, {"tmp": 0o1777})
    second = images._layer(files, {"usr/bin/alias": "/bin/tool"}, {"tmp": 0o1777})
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        members = {m.name: m for m in archive.getmembers()}
    assert {"bin", "bin/tool", "usr", "usr/bin", "usr/bin/alias", "tmp"} <= set(members)
    assert members["tmp"].mode == 0o1777
    assert members["usr/bin/alias"].issym()


def test_oci_archive_names_the_image_and_points_at_its_blobs(tmp_path):
    image = images._write(
        images.Image("catamaran.lab/test:1.0", tmp_path / "t.tar"), images._layer({"a": b"x"}, {}, {}), {"Cmd": ["a"]}
    )
    with tarfile.open(image.archive) as archive:
        index = json.load(archive.extractfile("index.json"))
        descriptor = index["manifests"][0]
        assert descriptor["annotations"]["io.containerd.image.name"] == "catamaran.lab/test:1.0"
        manifest = json.load(archive.extractfile(f"blobs/sha256/{descriptor['digest'].split(':')[1]}"))
        for blob in (manifest["config"], *manifest["layers"]):
            assert archive.getmember(f"blobs/sha256/{blob['digest'].split(':')[1]}").size == blob["size"]


def test_node_certificates_carry_identity_and_addresses(tmp_path):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "ca.key").write_bytes(
        ca_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path, key_path = pki.issue(
        tmp_path / "ca.crt",
        tmp_path / "ca.key",
        tmp_path / "serving",
        common_name="system:node:n1",
        organizations=("system:nodes",),
        server_names=("n1",),
        server_ips=("172.31.0.2",),
    )
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["172.31.0.2"]
    assert cert.issuer == ca.subject
    assert oct(key_path.stat().st_mode & 0o777) == "0o600"


def test_cluster_pki_is_what_kwokctl_expects_plus_the_lab_identities(tmp_path):
    cluster_pki = pki.ClusterPKI(tmp_path / "pki")
    cluster_pki.create("cluster-9", ("172.31.0.1",))
    ca = x509.load_pem_x509_certificate(cluster_pki.ca_cert.read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    def load(name):
        cert = x509.load_pem_x509_certificate(cluster_pki.cert(name).read_bytes())
        cert.verify_directly_issued_by(ca)
        usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        return cert, cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value, usages

    admin, cn, usages = load("admin")
    assert cn == "kwok-admin"
    assert usages == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    ips = {
        str(ip)
        for ip in admin.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.IPAddress
        )
    }
    assert {"127.0.0.1", "172.31.0.1", pki.KUBERNETES_SERVICE_IP} <= ips
    _, cn, usages = load("kube-apiserver-kubelet-client")
    assert cn == pki.KUBE_APISERVER_KUBELET_CLIENT
    assert usages == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not load("kube-apiserver-kubelet-client")[0].subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    kwok_serving, _, usages = load("kwok-kubelet-serving")
    assert usages == {ExtendedKeyUsageOID.SERVER_AUTH}
    sans = kwok_serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert load("metrics-server-kubelet-client")[1] == pki.METRICS_SERVER_KUBELET_CLIENT
    assert load("front-proxy-client")[1] == pki.FRONT_PROXY_CLIENT
    metrics_serving = load("metrics-server")[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "metrics-server.kube-system.svc" in metrics_serving.get_values_for_type(x509.DNSName)


def test_missing_packages_are_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(packages.os.path, "exists", lambda path: path != "/usr/bin/containerd")
    monkeypatch.setattr(packages.shutil, "which", lambda tool: None)
    with pytest.raises(LabError) as error:
        packages.ensure_packages(log=lambda message: None)
    message = str(error.value)
    assert "containerd" in message
    assert "apt-get install -y -qq --no-install-recommends containerd" in message
    assert "CATAMARAN_LAB_REAL_NODES=0" in message


def test_nothing_is_installed_when_every_package_is_there(monkeypatch):
    monkeypatch.setattr(packages.os.path, "exists", lambda path: True)
    monkeypatch.setattr(packages.subprocess, "run", lambda *a, **k: pytest.fail("apt-get must not run"))
    packages.ensure_packages(log=lambda message: None)
