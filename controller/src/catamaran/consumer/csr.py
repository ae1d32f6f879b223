"""Approve the kubelet-serving CertificateSigningRequests of this cluster's own virtual kubelets.

kube-controller-manager signs `kubernetes.io/kubelet-serving` requests but approves none. This
approver looks only at requests naming a virtual node (`system:node:<virtual node>`) and approves
one when all of these hold: it comes from that node's virtual kubelet (its service account, or in
local mode the manager's own identity, which the virtual kubelets share), the subject is exactly
the node's, every SAN is an address or the name the node publishes, and it asks for nothing but
server use. A request for a virtual node that fails a check is denied with the reason; requests for
other nodes are left to whoever approves them.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import logging
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.authentication_v1 import SelfSubjectReview
from lightkube.resources.certificates_v1 import CertificateSigningRequest
from lightkube.resources.core_v1 import Node

from ..constants import (
    KUBELET_SERVING_SIGNER,
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TYPE,
    TYPE_VIRTUAL_NODE,
    VK_SERVICE_ACCOUNT_PREFIX,
)
from ..kube.events import EventRecorder
from ..kube.informer import Informer, enqueue, present
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, now_iso, reference

log = logging.getLogger(__name__)

NODE_PREFIX = "system:node:"
ALLOWED_USAGES = {"digital signature", "key encipherment", "server auth"}
APPROVED_REASON = "CatamaranVirtualKubelet"
DENIED_REASON = "CatamaranCheckFailed"
# How long a request naming a node that does not exist (yet) is looked at again, and how often.
NODE_GRACE_S = 60.0
WAIT_FOR_NODE_S = 2.0


@dataclass(frozen=True)
class Decision:
    verdict: str  # "approve", "deny", "ignore", or "wait" (for the node to publish its addresses)
    message: str = ""


def decided(csr: dict) -> bool:
    return any(
        c.get("type") in ("Approved", "Denied") and c.get("status", "True") == "True"
        for c in (csr.get("status") or {}).get("conditions") or []
    )


def requested_node(csr: dict) -> str | None:
    """The node a kubelet-serving request names (CN system:node:<name>), None if it names none."""
    try:
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
    except (KeyError, ValueError):
        return None
    names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1 or not str(names[0].value).startswith(NODE_PREFIX):
        return None
    return str(names[0].value)[len(NODE_PREFIX) :]


def review(csr: dict, node: dict | None, requesters: set[str], controller_namespace: str) -> Decision:
    """What to do with one kubelet-serving request, given the node it names (None: no such node)."""
    name = requested_node(csr)
    if name is None or node is None:
        return Decision("ignore")
    labels = node["metadata"].get("labels") or {}
    if labels.get(LABEL_TYPE) != TYPE_VIRTUAL_NODE:
        return Decision("ignore")
    spec = csr["spec"]
    provider = labels.get(LABEL_REMOTE_CLUSTER_ID, "")
    own_account = f"system:serviceaccount:{controller_namespace}:{VK_SERVICE_ACCOUNT_PREFIX}{provider}"
    requester = spec.get("username", "")
    if requester not in requesters | {own_account}:
        return Decision("deny", f"requested by {requester!r}, not by the virtual kubelet of node {name}")
    request = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
    organizations = [str(a.value) for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if organizations != ["system:nodes"] or len(request.subject) != 2:
        return Decision("deny", "the subject must be exactly CN=system:node:<node>, O=system:nodes")
    usages = set(spec.get("usages") or [])
    if "server auth" not in usages or not usages <= ALLOWED_USAGES:
        return Decision("deny", f"usages {sorted(usages)} are not a serving certificate's")
    addresses = {a["address"] for a in (node.get("status") or {}).get("addresses") or []}
    if not addresses:
        return Decision("wait", f"node {name} publishes no address yet")
    try:
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return Decision("deny", "no subject alternative names")
    published_ips = set()
    for address in addresses:
        with contextlib.suppress(ValueError):
            published_ips.add(ipaddress.ip_address(address))
    for san in sans:
        if isinstance(san, x509.IPAddress):
            if san.value not in published_ips:
                return Decision("deny", f"IP {san.value} is not an address of node {name}")
        elif isinstance(san, x509.DNSName):
            if san.value not in addresses and san.value != name:
                return Decision("deny", f"DNS name {san.value} is not a name of node {name}")
        else:
            return Decision("deny", f"{type(san).__name__} names are not allowed")
    return Decision("approve", f"virtual kubelet of node {name} serving at {', '.join(sorted(addresses))}")


def _recent(csr: dict) -> bool:
    created = csr["metadata"].get("creationTimestamp")
    if not created:
        return False
    age = datetime.datetime.now(datetime.UTC) - datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    return age.total_seconds() < NODE_GRACE_S


class KubeletServingApprover:
    def __init__(self, client: AsyncClient, events: EventRecorder, controller_namespace: str):
        self.client = client
        self.events = events
        self.controller_namespace = controller_namespace
        self.requesters: set[str] = set()
        self.requests = Informer(
            client,
            CertificateSigningRequest,
            name="kubelet-serving-requests",
            fields={"spec.signerName": KUBELET_SERVING_SIGNER},
            transform=as_dict,
        )
        self.queue = WorkQueue("kubelet-serving-approver", self.reconcile, workers=2)
        self.requests.on_change(enqueue(self.queue, key=lambda key: key[1], when=present))

    def tasks(self):
        return [self.requests.run(), self._run()]

    async def _run(self) -> None:
        # Local mode: the virtual kubelets run with the manager's own credential.
        review_result = as_dict(await self.client.create(SelfSubjectReview.from_dict({"spec": {}})))
        self.requesters = {((review_result.get("status") or {}).get("userInfo") or {}).get("username", "")} - {""}
        await self.requests.synced.wait()
        await self.queue.run()

    async def reconcile(self, name: str) -> float | None:
        csr = self.requests.get(None, name)
        if csr is None or decided(csr):
            return None
        node_name = requested_node(csr)
        if node_name is None:
            return None
        try:
            node = as_dict(await self.client.get(Node, node_name))
        except ApiError as error:
            if error.status.code != 404:
                raise
            node = None
        decision = review(csr, node, self.requesters, self.controller_namespace)
        if decision.verdict == "wait" or (node is None and _recent(csr)):
            # A virtual kubelet asks once its node is published; a request racing that is looked at again.
            return WAIT_FOR_NODE_S
        if decision.verdict == "ignore":
            return None
        approved = decision.verdict == "approve"
        condition = {
            "type": "Approved" if approved else "Denied",
            "status": "True",
            "reason": APPROVED_REASON if approved else DENIED_REASON,
            "message": decision.message,
            "lastUpdateTime": now_iso(),
        }
        body = {**csr, "status": {**(csr.get("status") or {}), "conditions": [condition]}}
        await self.client.replace(CertificateSigningRequest.Approval.from_dict(body))
        log.info(
            "kubelet serving request decided",
            extra=fields(csr=name, node=node_name, verdict=decision.verdict, reason=decision.message),
        )
        if node is not None:
            await self.events.record(
                reference({**node, "apiVersion": "v1", "kind": "Node"}),
                "Normal" if approved else "Warning",
                "KubeletServingApproved" if approved else "KubeletServingDenied",
                f"CertificateSigningRequest {name}: {decision.message}",
            )
        return None
