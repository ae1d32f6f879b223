"""Approval of the virtual kubelets' serving certificate requests (consumer/csr.py)."""

from __future__ import annotations

import base64
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from catamaran.consumer.csr import requested_node, review
from tests.unit.vk.kubelet.kubelet_requests import NODE


def _csr(common_name: str, organizations: list[str], sans: list, usages=None, username="admin") -> dict:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(subject))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return {
        "metadata": {"name": "csr-1"},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": usages or ["digital signature", "server auth"],
            "username": username,
        },
    }


def _node(kind: str = "virtual-node") -> dict:
    return {
        "metadata": {
            "name": NODE,
            "labels": {"catamaran.io/type": kind, "catamaran.io/remote-cluster-id": "cluster-3"},
        },
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": NODE}]},
    }


LOOPBACK = [x509.IPAddress(ipaddress.ip_address("10.0.0.7"))]


def test_the_virtual_kubelets_own_request_is_approved():
    csr = _csr(f"system:node:{NODE}", ["system:nodes"], [*LOOPBACK, x509.DNSName(NODE)])
    assert requested_node(csr) == NODE
    assert review(csr, _node(), {"admin"}, "catamaran-system").verdict == "approve"
    account = _csr(
        f"system:node:{NODE}",
        ["system:nodes"],
        LOOPBACK,
        username="system:serviceaccount:catamaran-system:catamaran-vk-cluster-3",
    )
    assert review(account, _node(), set(), "catamaran-system").verdict == "approve"


@pytest.mark.parametrize(
    ("csr", "why"),
    [
        (
            _csr(
                f"system:node:{NODE}",
                ["system:nodes"],
                LOOPBACK,
                username="system:serviceaccount:x:catamaran-vk-cluster-3",
            ),
            "requested by",
        ),
        (
            _csr(
                f"system:node:{NODE}",
                ["system:nodes"],
                LOOPBACK,
                username="system:serviceaccount:catamaran-system:catamaran-vk-cluster-2",
            ),
            "requested by",
        ),
        (_csr(f"system:node:{NODE}", ["system:masters"], LOOPBACK), "subject"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], [x509.IPAddress(ipaddress.ip_address("10.9.9.9"))]), "10.9.9.9"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], [x509.DNSName("evil.example")]), "evil.example"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], [x509.RFC822Name("a@b.c")]), "not allowed"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], LOOPBACK, usages=["client auth"]), "usages"),
        (_csr(f"system:node:{NODE}", ["system:nodes"], []), "no subject alternative names"),
    ],
)
def test_a_request_for_a_virtual_node_failing_a_check_is_denied_with_the_reason(csr, why):
    decision = review(csr, _node(), {"admin"}, "catamaran-system")
    assert decision.verdict == "deny"
    assert why in decision.message


def test_requests_for_other_nodes_are_left_alone():
    physical = _csr("system:node:worker-1", ["system:nodes"], LOOPBACK)
    assert review(physical, _node(kind="physical"), {"admin"}, "catamaran-system").verdict == "ignore"
    assert review(physical, None, {"admin"}, "catamaran-system").verdict == "ignore"
    assert review(_csr("someone", ["system:nodes"], LOOPBACK), _node(), {"admin"}, "catamaran-system").verdict == (
        "ignore"
    )


def test_a_request_racing_its_nodes_first_status_waits():
    csr = _csr(f"system:node:{NODE}", ["system:nodes"], LOOPBACK)
    unpublished = _node()
    unpublished["status"] = {}
    assert review(csr, unpublished, {"admin"}, "catamaran-system").verdict == "wait"
