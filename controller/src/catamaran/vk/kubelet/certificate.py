"""The kubelet API's serving certificate: issued by the consumer's `kubernetes.io/kubelet-serving` signer.

The virtual kubelet asks through a CertificateSigningRequest (CN `system:node:<node>`, group
`system:nodes`, SANs = the addresses it publishes), which the consumer's manager approves only for
its own virtual kubelets (consumer/csr.py). The certificate is renewed once `renew_fraction` of its
life has passed; the TLS context is reloaded in place, so connections in flight keep theirs. A
self-signed certificate can be chosen where no approver runs, at the price of API servers that
verify kubelets refusing it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.certificates_v1 import CertificateSigningRequest
from lightkube.resources.core_v1 import ConfigMap

from ...certs import make_ca, make_serving_cert
from ...constants import KUBELET_SERVING_SIGNER, LABEL_MANAGED_BY, MANAGED_BY_CATAMARAN
from ...logs import fields
from ...objects import as_dict

log = logging.getLogger(__name__)

SERVING_USAGES = ["digital signature", "server auth"]
LABEL_SERVING_NODE = "catamaran.io/kubelet-serving-node"
# Where every API server publishes the CA it trusts for client certificates (readable with the
# built-in Role extension-apiserver-authentication-reader).
CLIENT_CA_NAMESPACE = "kube-system"
CLIENT_CA_CONFIGMAP = "extension-apiserver-authentication"
ISSUE_TIMEOUT_S = 60.0
RETRY_S = 15.0


class CertificateError(Exception):
    """The serving certificate could not be obtained; the message says why."""


def serving_request(node_name: str, addresses: list[str]) -> tuple[bytes, bytes]:
    """A fresh key and the PEM CSR the kubelet-serving signer accepts."""
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for address in addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                    x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
                ]
            )
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM)


def csr_manifest(node_name: str, request_pem: bytes, expiration_seconds: int | None) -> dict:
    spec = {
        "request": base64.b64encode(request_pem).decode(),
        "signerName": KUBELET_SERVING_SIGNER,
        "usages": SERVING_USAGES,
    }
    if expiration_seconds:
        spec["expirationSeconds"] = expiration_seconds
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {
            "generateName": f"{node_name}-serving-",
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN, LABEL_SERVING_NODE: node_name},
        },
        "spec": spec,
    }


def validity(cert_pem: bytes) -> tuple[datetime.datetime, datetime.datetime]:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def renewal_time(cert_pem: bytes, fraction: float, received: datetime.datetime) -> datetime.datetime:
    """`fraction` of the life left when the certificate arrived (signers backdate notBefore by minutes)."""
    start, end = validity(cert_pem)
    start = max(start, min(received, end))
    return start + (end - start) * fraction


class ServingCertificate:
    def __init__(
        self,
        local: AsyncClient,
        node_name: str,
        addresses: list[str],
        *,
        self_signed: bool = False,
        cert_dir: Path | None = None,
        expiration_seconds: int | None = None,
        renew_fraction: float = 0.8,
        client_ca_file: Path | None = None,
    ):
        self.local = local
        self.node_name = node_name
        self.addresses = addresses
        self.self_signed = self_signed
        self.cert_dir = cert_dir or Path(tempfile.mkdtemp(prefix=f"catamaran-kubelet-{node_name}-"))
        self.expiration_seconds = expiration_seconds
        self.renew_fraction = renew_fraction
        self.client_ca_file = client_ca_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        # Client certificates are optional: bearer tokens are the other way in.
        self.context.verify_mode = ssl.CERT_OPTIONAL
        self.cert_pem: bytes | None = None
        self.received = datetime.datetime.now(datetime.UTC)
        self.csr_names: list[str] = []
        self.ready = asyncio.Event()

    async def obtain(self) -> None:
        """Load the client CA and a valid serving certificate into the TLS context; retries until it has both."""
        while True:
            try:
                await self._load_client_ca()
                await self._issue()
                return
            except Exception as error:  # the node keeps working without its API; retried
                log.error("kubelet serving certificate", extra=fields(node=self.node_name, error=str(error)))
                await asyncio.sleep(RETRY_S)

    async def keep_renewed(self) -> None:
        while True:
            assert self.cert_pem is not None
            due = renewal_time(self.cert_pem, self.renew_fraction, self.received)
            delay = (due - datetime.datetime.now(datetime.UTC)).total_seconds()
            await asyncio.sleep(max(delay, 1.0))
            try:
                await self._load_client_ca()
                await self._issue()
                log.info("kubelet serving certificate renewed", extra=fields(node=self.node_name))
            except Exception as error:  # the current certificate stays in use; retried
                log.error("kubelet serving certificate renewal", extra=fields(node=self.node_name, error=str(error)))
                await asyncio.sleep(RETRY_S)

    async def _load_client_ca(self) -> None:
        if self.client_ca_file:
            self.context.load_verify_locations(cafile=str(self.client_ca_file))
            return
        try:
            config = as_dict(await self.local.get(ConfigMap, CLIENT_CA_CONFIGMAP, namespace=CLIENT_CA_NAMESPACE))
        except ApiError as error:
            raise CertificateError(
                f"cannot read {CLIENT_CA_NAMESPACE}/{CLIENT_CA_CONFIGMAP} for the client CA: {error.status.message}"
            ) from None
        bundle = (config.get("data") or {}).get("client-ca-file")
        if not bundle:
            raise CertificateError(f"{CLIENT_CA_NAMESPACE}/{CLIENT_CA_CONFIGMAP} has no client-ca-file")
        # Adds to the trusted set; a rotated CA is trusted alongside the old one until restart.
        self.context.load_verify_locations(cadata=bundle)

    async def _issue(self) -> None:
        if self.self_signed:
            ca_key, ca_cert = make_ca(f"catamaran-kubelet-{self.node_name}")
            key_pem, cert_pem = make_serving_cert(ca_key, ca_cert, self.addresses)
            cert_pem += ca_cert
        else:
            key_pem, request_pem = serving_request(self.node_name, self.addresses)
            cert_pem = await self._signed(request_pem)
        self._install(key_pem, cert_pem)

    async def _signed(self, request_pem: bytes) -> bytes:
        manifest = csr_manifest(self.node_name, request_pem, self.expiration_seconds)
        try:
            created = as_dict(await self.local.create(CertificateSigningRequest.from_dict(manifest)))
        except ApiError as error:
            raise CertificateError(f"creating the CertificateSigningRequest: {error.status.message}") from None
        name = created["metadata"]["name"]
        self.csr_names.append(name)
        log.info("kubelet serving certificate requested", extra=fields(node=self.node_name, csr=name))
        try:
            return await asyncio.wait_for(self._issued(name), ISSUE_TIMEOUT_S)
        except TimeoutError:
            raise CertificateError(
                f"CertificateSigningRequest {name} was not issued within {ISSUE_TIMEOUT_S:.0f}s "
                "(is the consumer's manager running, and does the controller manager sign kubelet-serving?)"
            ) from None

    async def _issued(self, name: str) -> bytes:
        async for _, obj in self.local.watch(CertificateSigningRequest, fields={"metadata.name": name}):
            csr = as_dict(obj)
            status = csr.get("status") or {}
            for condition in status.get("conditions") or []:
                if condition.get("type") in ("Denied", "Failed") and condition.get("status") == "True":
                    raise CertificateError(
                        f"CertificateSigningRequest {name} {condition['type'].lower()}: "
                        f"{condition.get('reason', '')} {condition.get('message', '')}".strip()
                    )
            if status.get("certificate"):
                return base64.b64decode(status["certificate"])
        raise CertificateError(f"the watch on CertificateSigningRequest {name} ended")

    def _install(self, key_pem: bytes, cert_pem: bytes) -> None:
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        key_path = self.cert_dir / "kubelet-serving.key"
        cert_path = self.cert_dir / "kubelet-serving.crt"
        descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key_pem)
        cert_path.write_bytes(cert_pem)
        self.context.load_cert_chain(str(cert_path), str(key_path))
        self.cert_pem = cert_pem
        self.received = datetime.datetime.now(datetime.UTC)
        self.ready.set()
        _, expires = validity(cert_pem)
        log.info(
            "kubelet serving certificate installed",
            extra=fields(node=self.node_name, expires=expires.isoformat(), self_signed=self.self_signed),
        )
