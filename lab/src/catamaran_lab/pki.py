"""The lab's certificates: one CA per cluster, made by the lab before kwokctl starts, and what it signs.

kwokctl generates a cluster's PKI only when its `pki` directory does not exist yet, so the lab writes
that directory first, in the layout kwokctl expects (`ca.*` and `admin.*`), plus the certificates
kwokctl would not make: the kube-apiserver's kubelet client and front-proxy client, the serving
certificates of kwok's kubelet server and of metrics-server, and metrics-server's kubelet client.
Every kubelet endpoint (kwok's, the real node's, Catamaran's virtual kubelets') is verified by the
kube-apiserver and metrics-server against this one CA, and kube-controller-manager signs CSRs with it.
The lab's registry has a CA of its own (registry.py, `create_ca`).
"""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
CA_VALIDITY = datetime.timedelta(days=3650)

# Identities (certificate CN, and O where it matters) the lab gives its components.
ADMIN_USER = "kwok-admin"  # kwokctl's admin: kubectl, kwok, the control plane's own clients
ADMIN_GROUP = "system:masters"
KUBE_APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # bound to system:kubelet-api-admin
FRONT_PROXY_CLIENT = "front-proxy-client"  # the aggregator's identity towards metrics-server
METRICS_SERVER_KUBELET_CLIENT = "system:metrics-server"  # metrics-server scraping kubelets
KWOK_KUBELET_SERVING = "kwok-kubelet-serving"
KUBE_ROUTER_USER = "catamaran-lab:kube-router"  # the real nodes' NetworkPolicy engine (kwok.lab_rbac binds it)
COREDNS_USER = "system:coredns"  # CoreDNS watching Services and EndpointSlices (lab.dns binds its role)

# The `kubernetes` Service's address: the first of kube-apiserver's default range (kwokctl sets none).
KUBERNETES_SERVICE_IP = "10.0.0.1"
# The names kwokctl gives its admin certificate, which also serves the kube-apiserver.
APISERVER_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)
METRICS_SERVER_NAMES = ("metrics-server.kube-system.svc", "metrics-server.kube-system.svc.cluster.local", "localhost")


@dataclass(frozen=True)
class ClusterPKI:
    """File names in a cluster's `pki` directory (kwokctl's, `.lab/kwok/clusters/<name>/pki`)."""

    dir: Path

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def ca_cert(self) -> Path:
        return self.cert("ca")

    @property
    def ca_key(self) -> Path:
        return self.key("ca")

    def create(self, cluster_name: str, apiserver_ips: tuple[str, ...]) -> None:
        """The CA and every certificate the lab's control plane, kwok and metrics-server start with."""
        self.dir.mkdir(parents=True, exist_ok=True)
        create_ca(self.ca_cert, self.ca_key, f"catamaran-lab {cluster_name} CA")
        # kwokctl's one certificate for everything: kube-apiserver's serving certificate, the admin
        # client, and (its key) the service account signing key, so RSA like kwokctl's own.
        self.issue(
            "admin",
            common_name=ADMIN_USER,
            organizations=(ADMIN_GROUP,),
            server_names=APISERVER_NAMES,
            server_ips=tuple(dict.fromkeys(("127.0.0.1", "::1", KUBERNETES_SERVICE_IP, *apiserver_ips))),
            client=True,
            rsa_key=True,
        )
        self.issue("kube-apiserver-kubelet-client", common_name=KUBE_APISERVER_KUBELET_CLIENT)
        self.issue("front-proxy-client", common_name=FRONT_PROXY_CLIENT)
        self.issue(
            "kwok-kubelet-serving",
            common_name=KWOK_KUBELET_SERVING,
            server_names=("localhost",),
            server_ips=("127.0.0.1",),
        )
        self.issue(
            "metrics-server", common_name="metrics-server", server_names=METRICS_SERVER_NAMES, server_ips=("127.0.0.1",)
        )
        self.issue("metrics-server-kubelet-client", common_name=METRICS_SERVER_KUBELET_CLIENT)
        self.issue("coredns", common_name=COREDNS_USER)

    def issue(self, name: str, **identity) -> tuple[Path, Path]:
        """`<name>.crt` and `<name>.key` in this directory, signed by its CA (see `issue`)."""
        return issue(self.ca_cert, self.ca_key, self.dir / name, **identity)


def issue(
    ca_cert_path: Path,
    ca_key_path: Path,
    out_prefix: Path,
    *,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
    client: bool | None = None,
    rsa_key: bool = False,
) -> tuple[Path, Path]:
    """Write `<prefix>.crt` and `<prefix>.key`: a client certificate, and a serving one when names are given.

    `client=True` makes a serving certificate a client one as well.
    """
    with warnings.catch_warnings():
        # A CA made by kwokctl carries a serial number RFC 5280 forbids; it still signs what we need.
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    key = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if rsa_key
        else ec.generate_private_key(ec.SECP256R1())
    )
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    serving = bool(server_names or server_ips)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if serving else []
    if client or not serving:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        _builder(
            x509.Name(subject), ca_cert.subject, key, VALIDITY, ca=False, key_encipherment=rsa_key, ends_by=ca_cert
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if serving:
        names = [x509.DNSName(name) for name in server_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = out_prefix.with_suffix(".crt"), out_prefix.with_suffix(".key")
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    write_key(key, key_path)
    return cert_path, key_path


def create_ca(cert_path: Path, key_path: Path, common_name: str) -> None:
    """A new self-signed CA (RSA, CA_VALIDITY): its certificate and its key (0600)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key(key, key_path)
    cert_path.write_bytes(_ca_certificate(key, common_name))


def write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _ca_certificate(key: rsa.RSAPrivateKey, common_name: str) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        _builder(name, name, key, CA_VALIDITY, ca=True, key_encipherment=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key,
    validity: datetime.timedelta,
    *,
    ca: bool,
    key_encipherment: bool,
    ends_by: x509.Certificate | None = None,
) -> x509.CertificateBuilder:
    """What the CA and every certificate it signs share: valid from five minutes ago (clock skew) for `validity`,
    never past the issuer's end (`ends_by`), and used for digital signatures; key encipherment for RSA TLS keys,
    certificate signing for the CA alone."""
    now = datetime.datetime.now(datetime.UTC)
    not_after = now + validity
    if ends_by is not None:
        not_after = min(not_after, ends_by.not_valid_after_utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=key_encipherment,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
