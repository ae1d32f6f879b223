"""Webhook TLS: a private CA and a serving certificate, generated and rotated with `cryptography`.

The CA bundle published to the API server holds the current CA and, after a CA rotation, the
previous one until it expires, so a rotation never breaks calls in flight.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 365
SERVING_DAYS = 90
# Renew once two thirds of a certificate's life have passed.
RENEW_FRACTION = 1 / 3


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str, days: int = CA_DAYS) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)


def make_serving_cert(ca_key_pem: bytes, ca_cert_pem: bytes, hosts: list[str], days: int = SERVING_DAYS):
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)


def needs_renewal(cert_pem: bytes, now: datetime.datetime | None = None) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    now = now or _now()
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - now < lifetime * RENEW_FRACTION


def expired(cert_pem: bytes) -> bool:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc <= _now()


@dataclass
class CertificateStore:
    """Files in one directory: ca.key, ca.crt, previous-ca.crt, tls.key, tls.crt."""

    directory: Path
    hosts: list[str]

    def _read(self, name: str) -> bytes | None:
        path = self.directory / name
        return path.read_bytes() if path.exists() else None

    def _write(self, name: str, data: bytes, secret: bool = False) -> None:
        path = self.directory / name
        path.write_bytes(data)
        if secret:
            path.chmod(0o600)

    def ensure(self) -> bool:
        """Create or rotate what is missing or due; True when anything changed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        changed = False
        ca_cert = self._read("ca.crt")
        if ca_cert is None or self._read("ca.key") is None or needs_renewal(ca_cert):
            if ca_cert is not None and not expired(ca_cert):
                self._write("previous-ca.crt", ca_cert)
            ca_key, ca_cert = make_ca("catamaran-webhook-ca")
            self._write("ca.key", ca_key, secret=True)
            self._write("ca.crt", ca_cert)
            (self.directory / "tls.crt").unlink(missing_ok=True)
            changed = True
        serving = self._read("tls.crt")
        if serving is None or self._read("tls.key") is None or needs_renewal(serving) or not self._covers(serving):
            key, cert = make_serving_cert(self._read("ca.key"), self._read("ca.crt"), self.hosts)
            self._write("tls.key", key, secret=True)
            self._write("tls.crt", cert)
            changed = True
        previous = self._read("previous-ca.crt")
        if previous is not None and expired(previous):
            (self.directory / "previous-ca.crt").unlink()
            changed = True
        return changed

    def _covers(self, cert_pem: bytes) -> bool:
        cert = x509.load_pem_x509_certificate(cert_pem)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        present = {str(n.value) for n in names}
        return all(host in present for host in self.hosts)

    def ca_bundle(self) -> bytes:
        return (self._read("ca.crt") or b"") + (self._read("previous-ca.crt") or b"")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.directory / "tls.crt", self.directory / "tls.key")
        return context
