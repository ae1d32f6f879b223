"""The virtual kubelet's serving certificate (vk/kubelet/certificate.py): the request, renewal, the fallback."""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.x509.oid import NameOID

from catamaran.vk.kubelet.certificate import csr_manifest, serving_request
from tests.unit.vk.kubelet.kubelet_requests import NODE


def test_the_serving_request_is_what_the_kubelet_serving_signer_accepts():
    key_pem, request_pem = serving_request(NODE, ["127.0.0.1"])
    parsed = x509.load_pem_x509_csr(request_pem)
    assert parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
    assert parsed.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    sans = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    manifest = csr_manifest(NODE, request_pem, 600)
    assert manifest["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert manifest["spec"]["usages"] == ["digital signature", "server auth"]
    assert manifest["spec"]["expirationSeconds"] == 600
    assert b"PRIVATE KEY" in key_pem


def test_renewal_counts_from_when_the_certificate_arrived():
    import datetime

    from catamaran.certs import make_ca
    from catamaran.vk.kubelet.certificate import renewal_time

    _, cert = make_ca("x", days=1)  # notBefore backdated by five minutes, as signers do
    start, end = datetime.datetime.now(datetime.UTC), x509.load_pem_x509_certificate(cert).not_valid_after_utc
    due = renewal_time(cert, 0.5, start)
    assert abs((due - (start + (end - start) / 2)).total_seconds()) < 1


def test_the_self_signed_fallback_serves_the_published_address(tmp_path):
    import asyncio
    import ssl as ssl_module

    from catamaran.vk.kubelet.certificate import ServingCertificate

    certificate = ServingCertificate(None, NODE, ["10.0.0.7"], self_signed=True, cert_dir=tmp_path)
    asyncio.run(certificate._issue())
    served = x509.load_pem_x509_certificate(certificate.cert_pem)
    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    assert (tmp_path / "kubelet-serving.key").stat().st_mode & 0o777 == 0o600
    assert certificate.context.verify_mode == ssl_module.CERT_OPTIONAL
    assert certificate.ready.is_set()
