"""The lab's registry (catamaran_lab/registry.py) and how real nodes trust it (nodeconfig, config): pure parts."""

from __future__ import annotations

import base64
import ipaddress
import json
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from catamaran_lab import config, nodeconfig, registry
from catamaran_lab.errors import LabError


def node_layout(tmp_path: Path) -> nodeconfig.NodeLayout:
    return nodeconfig.NodeLayout(root=tmp_path / "cluster-1" / "node", lab_id="abc123", cluster="cluster-1")


def test_the_registry_port_is_the_labs_own_and_checked_free_with_the_others():
    lab = config.load(base_port=26900, real_nodes=True)
    assert lab.registry_port == 26901
    cluster_ports = {port for cluster in lab.clusters for port in cluster.ports.values()}
    assert lab.registry_port not in cluster_ports
    assert lab.all_ports()[26901] == "lab registry"


def test_a_lab_without_real_nodes_runs_no_registry():
    lab = config.load(base_port=26900, real_nodes=False)
    assert lab.registry_port is None
    assert lab.registry_addresses() == ()
    assert 26901 not in lab.all_ports()
    with pytest.raises(LabError, match="no real node"):
        lab.registry_address(lab.clusters[0].name)


def test_each_cluster_reaches_the_registry_at_its_own_links_host_end():
    lab = config.load(base_port=26900, real_nodes=True)
    addresses = lab.registry_addresses()
    assert addresses == tuple(f"{c.real_node.host_ip}:26901" for c in lab.clusters)
    assert len(set(addresses)) == len(lab.clusters)
    assert lab.registry_address(lab.clusters[1].name) == addresses[1]


def test_registry_config_serves_tls_with_htpasswd_auth_and_no_debug_listener(tmp_path):
    layout = registry.RegistryLayout(tmp_path)
    rendered = yaml.safe_dump(registry.registry_config(layout, 26901, "s3cret"))
    parsed = yaml.safe_load(rendered)
    http = parsed["http"]
    assert http["addr"] == ":26901"
    assert http["secret"] == "s3cret"
    assert http["tls"] == {
        "certificate": str(layout.serving_cert),
        "key": str(layout.serving_key),
        "minimumtls": "tls1.2",
    }
    assert "debug" not in http
    assert parsed["auth"] == {"htpasswd": {"realm": registry.REALM, "path": str(layout.htpasswd)}}
    assert parsed["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "registry" / "storage")
    # skopeo's --dest-cert-dir reads every *.key there as a client key: the CA certificate's directory holds it alone.
    assert layout.ca_cert.parent not in (layout.serving_key.parent, layout.ca_key.parent)


def test_cluster_facts_name_the_address_ca_and_credentials(tmp_path):
    facts = registry.cluster_facts("172.31.0.1:26901", tmp_path / "ca.crt", "pw")
    assert facts == {
        "address": "172.31.0.1:26901",
        "ca": str(tmp_path / "ca.crt"),
        "username": "catamaran",
        "password": "pw",
    }


def test_pull_secret_and_auth_file_carry_basic_credentials():
    secret = json.loads(registry.dockerconfigjson("172.31.0.1:26901", "catamaran", "pw"))
    entry = secret["auths"]["172.31.0.1:26901"]
    assert base64.b64decode(entry["auth"]) == b"catamaran:pw"
    assert (entry["username"], entry["password"]) == ("catamaran", "pw")
    auth = registry.auth_file("127.0.0.1:26901", "pw")["auths"]["127.0.0.1:26901"]["auth"]
    assert base64.b64decode(auth) == b"catamaran:pw"


def test_containerd_trusts_the_registry_through_one_hosts_file_per_address(tmp_path):
    node = node_layout(tmp_path)
    ca = tmp_path / "registry" / "trust" / "ca.crt"
    trust = nodeconfig.RegistryTrust(("172.31.0.1:26901", "172.31.0.5:26901"), ca)
    cri = tomllib.loads(nodeconfig.containerd_config(node, "p:1", trust))["plugins"]["io.containerd.grpc.v1.cri"]
    config_path = Path(cri["registry"]["config_path"])
    assert config_path.is_relative_to(node.root)
    hosts = nodeconfig.registry_hosts(node, trust)
    assert sorted(hosts) == [config_path / address / "hosts.toml" for address in trust.addresses]
    parsed = tomllib.loads(hosts[config_path / "172.31.0.5:26901" / "hosts.toml"])
    assert parsed == {"server": "https://172.31.0.5:26901", "ca": str(ca), "host": {}}, "a CA, never credentials"


def test_without_a_registry_containerd_has_no_registry_settings(tmp_path):
    cri = tomllib.loads(nodeconfig.containerd_config(node_layout(tmp_path), "p:1"))["plugins"]
    assert "registry" not in cri["io.containerd.grpc.v1.cri"]


@pytest.fixture
def created(tmp_path, monkeypatch) -> registry.Registry:
    monkeypatch.setattr(registry, "bcrypt_htpasswd_line", lambda user, password: f"{user}:$2y$10$fake-{password}")
    lab_registry = registry.Registry(tmp_path, tmp_path / "bin" / "registry", 26901)
    lab_registry.create(("172.31.0.1", "172.31.0.5"))
    return lab_registry


def test_created_state_is_private_and_the_serving_certificate_names_every_node_link(created):
    layout = created.layout
    password = created.password()
    assert len(password) >= 24
    assert layout.htpasswd.read_text() == f"catamaran:$2y$10$fake-{password}\n"
    auth = json.loads(layout.auth_file.read_text())["auths"]["127.0.0.1:26901"]["auth"]
    assert base64.b64decode(auth).decode() == f"catamaran:{password}"
    for secret in (layout.password_file, layout.htpasswd, layout.auth_file, layout.config, layout.ca_key):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert [path.name for path in layout.trust_dir.iterdir()] == ["ca.crt"]
    certificate = x509.load_pem_x509_certificate(layout.serving_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(layout.ca_cert.read_bytes())
    certificate.verify_directly_issued_by(ca)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address(ip) for ip in ("127.0.0.1", "172.31.0.1", "172.31.0.5")
    ]
    settings = yaml.safe_load(layout.config.read_text())
    assert len(settings["http"]["secret"]) == 64


def test_a_registry_that_does_not_start_is_named_with_its_log(created):
    created.layout.log.write_text("starting\nfatal: configuration error: bad storage\n")
    process = subprocess.Popen(["sh", "-c", "exit 3"])
    with pytest.raises(LabError) as raised:
        created.wait_ready(process, timeout=10)
    assert "exited with status 3" in str(raised.value)
    assert "fatal: configuration error: bad storage" in str(raised.value)


def test_facts_of_a_lab_that_is_not_up_are_an_error(tmp_path):
    from catamaran_lab.lab import Lab

    with pytest.raises(LabError, match="no registry facts"):
        Lab(root=tmp_path, cache=_NoCache()).registry_facts("cluster-1")


class _NoCache:
    def path(self, name: str) -> Path:
        return Path("/nonexistent") / name
