"""The pod mutating webhook: TLS server, certificate rotation, and its MutatingWebhookConfiguration.

Failure policy is Fail with a 5 s timeout: in a namespace with offloading enabled, a pod that the
webhook could not steer is refused (its controller retries) rather than admitted unsteered, which
could break a Remote or Local strategy. Namespaces without offloading never reach the webhook
(namespaceSelector), so an outage does not affect them.

Each NamespaceOffloadingPolicy adds a webhook of its own, selecting the namespaces it selects that are not yet
offloaded: a pod created an instant after its namespace is steered at admission, before the manager has given
the namespace its NamespaceOffloading. Exactly one webhook steers a pod: the offloaded namespaces' one, or the
policy deciding the namespace (the first by name) when several policies select it.

A namespace whose remote name is another namespace's (twin_claims.py) is not offloaded: its pods are steered as
`Local` with a warning, and refused outright under `Remote`, which has nowhere else for them to go.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path

from aiohttp import web
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Namespace

from ..certs import CertificateStore
from ..constants import MANAGER_COMPONENT
from ..kube.informer import call
from ..kube.resources import NamespaceOffloading
from ..logs import fields
from ..objects import as_dict
from ..steering import ENABLED_LABEL, OFFLOADING_NAME, is_daemonset_pod, never_offloaded_by_policy, steer
from .offloading import NamespaceOffloadingController
from .policies import NamespaceOffloadingPolicyController

log = logging.getLogger(__name__)

WEBHOOK_CONFIGURATION = "catamaran-pod-offloading"
WEBHOOK_NAME = "pods.offloading.catamaran.io"
MUTATE_PATH = "/mutate-pods"
POLICY_PATH = MUTATE_PATH + "/policies/"  # + the policy's name
TIMEOUT_SECONDS = 5
ROTATION_CHECK_S = 3600


def namespace_selectors(policies: list[dict], controller_namespace: str) -> list[tuple[str, str, dict]]:
    """(webhook name, path, namespaceSelector) of each webhook: the offloaded namespaces', then one per policy
    for the namespaces it selects that are not offloaded yet."""
    selectors = [(WEBHOOK_NAME, MUTATE_PATH, {"matchLabels": {ENABLED_LABEL: "true"}})]
    for policy in sorted(policies, key=lambda p: p["metadata"]["name"]):
        selector = policy["spec"]["namespaceSelector"]
        expressions = [
            *(selector.get("matchExpressions") or []),
            *never_offloaded_by_policy(controller_namespace),
            {"key": ENABLED_LABEL, "operator": "NotIn", "values": ["true"]},
        ]
        name = policy["metadata"]["name"]
        selectors.append(
            (
                f"{name}.policies.{WEBHOOK_NAME}",
                POLICY_PATH + name,
                {
                    **({"matchLabels": selector["matchLabels"]} if selector.get("matchLabels") else {}),
                    "matchExpressions": expressions,
                },
            )
        )
    return selectors


def webhook_configuration(
    ca_bundle: bytes, url: str | None, service: dict | None, selectors: list[tuple[str, str, dict]]
) -> dict:
    """`url` is the offloaded namespaces' webhook's; the policies' add their path after its host."""
    base = url[: -len(MUTATE_PATH)] if url and url.endswith(MUTATE_PATH) else url

    def client_config(path: str) -> dict:
        config: dict = {"caBundle": base64.b64encode(ca_bundle).decode()}
        if url:
            config["url"] = base + path
        else:
            config["service"] = {**(service or {}), "path": path}
        return config

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"catamaran.io/managed-by": "catamaran"}},
        "webhooks": [
            {
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "reinvocationPolicy": "Never",
                "namespaceSelector": selector,
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "clientConfig": client_config(path),
            }
            for name, path, selector in selectors
        ],
    }


def review_response(review: dict, offloading_spec: dict | None, twin_refusal: str | None = None) -> dict:
    """`twin_refusal`: why the namespace's remote name is another namespace's (its pods are then not offloaded)."""
    request = review.get("request") or {}
    response: dict = {"uid": request.get("uid", ""), "allowed": True}
    pod = request.get("object")
    if offloading_spec is not None and pod:
        pod.setdefault("metadata", {})
        warnings = []
        if twin_refusal:
            if offloading_spec.get("podOffloadingStrategy") == "Remote" and not is_daemonset_pod(pod):
                message = f"this namespace is not offloaded: {twin_refusal}"
                response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": message})
                return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
            offloading_spec = {**offloading_spec, "podOffloadingStrategy": "Local"}
            warnings.append(f"steered to local nodes only: {twin_refusal}")
        operations, summary = steer(pod, offloading_spec)
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode()).decode()
        if "DaemonSet" in summary:
            warnings.append("DaemonSet pods are never steered remotely")
        response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def policy_selectors_changed(event: str, key, new: dict | None, old: dict | None) -> bool:
    """A policy came, went, or changed the namespaces it selects (its webhook's namespaceSelector)."""

    def selector(policy):
        return None if policy is None else policy["spec"]["namespaceSelector"]

    return selector(new) != selector(old)


class PodWebhook:
    def __init__(
        self,
        client: AsyncClient,
        offloadings: NamespaceOffloadingController,
        policies: NamespaceOffloadingPolicyController,
        *,
        cert_dir: Path,
        hosts: list[str],
        port: int,
        url: str | None,
        service: dict | None,
    ):
        self.client = client
        self.offloadings = offloadings
        self.policies = policies
        self.store = CertificateStore(cert_dir, hosts)
        self.port = port
        self.url = url
        self.service = service
        self._site: web.TCPSite | None = None
        self._selectors_changed = asyncio.Event()
        policies.policies.on_change(call(self._selectors_changed.set, when=policy_selectors_changed))

    async def _offloading(self, namespace: str) -> dict | None:
        cached = self.offloadings.offloadings.get(namespace, OFFLOADING_NAME)
        if cached is None:
            try:  # created an instant ago: the watch may not have delivered it yet
                cached = as_dict(await self.client.get(NamespaceOffloading, OFFLOADING_NAME, namespace=namespace))
            except ApiError:
                return None
        return cached

    async def _spec_for(self, namespace: str) -> dict | None:
        offloading = await self._offloading(namespace)
        if offloading is None:
            return None
        if offloading["metadata"].get("deletionTimestamp"):
            return {**offloading["spec"], "podOffloadingStrategy": "Local"}
        return offloading["spec"]

    async def _policy_spec_for(self, namespace: str, policy_name: str) -> dict | None:
        """The spec a policy's webhook steers with: only the deciding policy's webhook steers (several may be
        called for one pod), with the namespace's NamespaceOffloading if it has one by now."""
        cached = self.policies.namespaces.get(None, namespace)
        if cached is not None:
            labels = cached["labels"]
        else:  # created an instant ago
            try:
                labels = (await self.client.get(Namespace, namespace)).metadata.labels or {}
            except ApiError:
                return None
        deciding = self.policies.deciding(labels)
        if deciding is None or deciding["metadata"]["name"] != policy_name:
            return None
        return await self._spec_for(namespace) or deciding["spec"]["offloading"]

    async def handle(self, request: web.Request) -> web.Response:
        try:
            review = await request.json()
        except (json.JSONDecodeError, ValueError):
            return web.json_response({"error": "body is not an AdmissionReview"}, status=400)
        namespace = (review.get("request") or {}).get("namespace", "")
        policy_name = request.match_info.get("policy")
        spec = await (
            self._spec_for(namespace) if policy_name is None else self._policy_spec_for(namespace, policy_name)
        )
        refusal = self.offloadings.twin_refusal(namespace, spec) if spec is not None else None
        answer = review_response(review, spec, refusal)
        log.debug(
            "pod steered",
            extra=fields(namespace=namespace, policy=policy_name, strategy=(spec or {}).get("podOffloadingStrategy")),
        )
        return web.json_response(answer)

    async def run(self) -> None:
        self.store.ensure()
        app = web.Application()
        app.router.add_post(MUTATE_PATH, self.handle)
        app.router.add_post(POLICY_PATH + "{policy}", self.handle)
        app.router.add_get("/healthz", lambda request: web.Response(text="ok"))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await self._serve(runner)
            await self.policies.policies.synced.wait()  # the first registration already holds every policy's webhook
            await self._register()
            await asyncio.gather(self._follow_policies(), self._rotate(runner))
        finally:
            await runner.cleanup()

    async def _follow_policies(self) -> None:
        while True:
            await self._selectors_changed.wait()
            self._selectors_changed.clear()
            await self._register()

    async def _rotate(self, runner: web.AppRunner) -> None:
        while True:
            await asyncio.sleep(ROTATION_CHECK_S)
            if self.store.ensure():
                log.info("webhook certificates rotated")
                await self._register()  # the new CA is trusted before the new certificate is served
                await self._site.stop()
                await self._serve(runner)

    async def _serve(self, runner: web.AppRunner) -> None:
        self._site = web.TCPSite(runner, "0.0.0.0", self.port, ssl_context=self.store.ssl_context())
        await self._site.start()
        log.info("pod webhook serving", extra=fields(port=self.port))

    async def _register(self) -> None:
        selectors = namespace_selectors(list(self.policies.policies.cache.values()), self.policies.controller_namespace)
        body = webhook_configuration(self.store.ca_bundle(), self.url, self.service, selectors)
        await self.client.apply(
            MutatingWebhookConfiguration.from_dict(body), field_manager=MANAGER_COMPONENT, force=True
        )
