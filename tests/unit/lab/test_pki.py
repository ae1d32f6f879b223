"""The lab's certificates (catamaran_lab/pki.py)."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from catamaran_lab import pki


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
