"""The pod mutating webhook: TLS server, certificate rotation, and its MutatingWebhookConfiguration.

Failure policy is Fail with a 5 s timeout: in a namespace with offloading enabled, a pod that the
webhook could not steer is refused (its controller retries) rather than admitted unsteered, which
could break a Remote or Local strategy. Namespaces without offloading never reach the webhook
(namespaceSelector), so an outage does not affect them.
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

from ..certs import CertificateStore
from ..kube.resources import NamespaceOffloading
from ..logs import fields
from ..objects import as_dict
from ..steering import ENABLED_LABEL, OFFLOADING_NAME, steer
from .offloading import NamespaceOffloadingController

log = logging.getLogger(__name__)

WEBHOOK_CONFIGURATION = "catamaran-pod-offloading"
WEBHOOK_NAME = "pods.offloading.catamaran.io"
MUTATE_PATH = "/mutate-pods"
TIMEOUT_SECONDS = 5
ROTATION_CHECK_S = 3600


def webhook_configuration(ca_bundle: bytes, url: str | None, service: dict | None) -> dict:
    client_config: dict = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url:
        client_config["url"] = url
    else:
        client_config["service"] = {**(service or {}), "path": MUTATE_PATH}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"catamaran.io/managed-by": "catamaran"}},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "reinvocationPolicy": "Never",
                "namespaceSelector": {"matchLabels": {ENABLED_LABEL: "true"}},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "clientConfig": client_config,
            }
        ],
    }


def review_response(review: dict, offloading_spec: dict | None) -> dict:
    request = review.get("request") or {}
    response: dict = {"uid": request.get("uid", ""), "allowed": True}
    pod = request.get("object")
    if offloading_spec is not None and pod:
        pod.setdefault("metadata", {})
        operations, summary = steer(pod, offloading_spec)
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode()).decode()
        response["warnings"] = [] if "DaemonSet" not in summary else ["DaemonSet pods are never steered remotely"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class PodWebhook:
    def __init__(
        self,
        client: AsyncClient,
        offloadings: NamespaceOffloadingController,
        *,
        cert_dir: Path,
        hosts: list[str],
        port: int,
        url: str | None,
        service: dict | None,
    ):
        self.client = client
        self.offloadings = offloadings
        self.store = CertificateStore(cert_dir, hosts)
        self.port = port
        self.url = url
        self.service = service
        self._site: web.TCPSite | None = None

    async def _spec_for(self, namespace: str) -> dict | None:
        cached = self.offloadings.offloadings.get(namespace, OFFLOADING_NAME)
        if cached is None:
            try:  # created an instant ago: the watch may not have delivered it yet
                cached = as_dict(await self.client.get(NamespaceOffloading, OFFLOADING_NAME, namespace=namespace))
            except ApiError:
                return None
        if cached["metadata"].get("deletionTimestamp"):
            return {**cached["spec"], "podOffloadingStrategy": "Local"}
        return cached["spec"]

    async def handle(self, request: web.Request) -> web.Response:
        try:
            review = await request.json()
        except (json.JSONDecodeError, ValueError):
            return web.json_response({"error": "body is not an AdmissionReview"}, status=400)
        namespace = (review.get("request") or {}).get("namespace", "")
        spec = await self._spec_for(namespace)
        answer = review_response(review, spec)
        log.debug("pod steered", extra=fields(namespace=namespace, strategy=(spec or {}).get("podOffloadingStrategy")))
        return web.json_response(answer)

    async def run(self) -> None:
        self.store.ensure()
        app = web.Application()
        app.router.add_post(MUTATE_PATH, self.handle)
        app.router.add_get("/healthz", lambda request: web.Response(text="ok"))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await self._serve(runner)
            await self._register()
            while True:
                await asyncio.sleep(ROTATION_CHECK_S)
                if self.store.ensure():
                    log.info("webhook certificates rotated")
                    await self._register()  # the new CA is trusted before the new certificate is served
                    await self._site.stop()
                    await self._serve(runner)
        finally:
            await runner.cleanup()

    async def _serve(self, runner: web.AppRunner) -> None:
        self._site = web.TCPSite(runner, "0.0.0.0", self.port, ssl_context=self.store.ssl_context())
        await self._site.start()
        log.info("pod webhook serving", extra=fields(port=self.port))

    async def _register(self) -> None:
        body = webhook_configuration(self.store.ca_bundle(), self.url, self.service)
        await self.client.apply(
            MutatingWebhookConfiguration.from_dict(body), field_manager="catamaran-manager", force=True
        )
