"""Certificates (certs.py): issued for the hosts, renewed in time, the CA rotated."""

from __future__ import annotations

import datetime

from cryptography import x509

from catamaran import certs


def test_certificates_are_issued_for_the_hosts_and_renewed_in_time(tmp_path):
    store = certs.CertificateStore(tmp_path, ["127.0.0.1", "catamaran-webhook.catamaran-system.svc"])
    assert store.ensure() is True
    assert store.ensure() is False  # nothing due: nothing changes
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "catamaran-webhook.catamaran-system.svc" in names.get_values_for_type(x509.DNSName)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    assert cert.issuer == ca.subject
    late = cert.not_valid_after_utc - datetime.timedelta(days=1)
    assert certs.needs_renewal((tmp_path / "tls.crt").read_bytes(), now=late)
    assert not certs.needs_renewal((tmp_path / "tls.crt").read_bytes())
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    store.ssl_context()  # loads


def test_ca_rotation_keeps_the_previous_ca_in_the_bundle(tmp_path, monkeypatch):
    store = certs.CertificateStore(tmp_path, ["127.0.0.1"])
    store.ensure()
    old_ca = (tmp_path / "ca.crt").read_bytes()
    key, near_expiry = certs.make_ca("old", days=3)
    (tmp_path / "ca.crt").write_bytes(near_expiry)
    (tmp_path / "ca.key").write_bytes(key)
    assert old_ca != near_expiry
    two_days_later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=2, hours=12)
    monkeypatch.setattr(certs, "_now", lambda: two_days_later)
    assert store.ensure() is True
    bundle = store.ca_bundle()
    assert near_expiry in bundle
    assert (tmp_path / "ca.crt").read_bytes() in bundle
