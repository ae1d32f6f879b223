"""Service-account tokens of offloaded pods, issued by the consumer and kept fresh in the twin namespace.

For each pod bound to this virtual node whose volumes project a service-account token, the consumer
is asked for a token (TokenRequest, bound to the local pod, with the projection's audience and
lifetime). The tokens live in one Secret per pod in the twin namespace; the remote pod's projected
volume reads them at the paths the kubelet would have used (forge.py). A token is replaced before
80 % of its lifetime, as the kubelet does, so the remote pod speaks to the consumer's API server as
its own service account for as long as it runs.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import logging
import time
from collections.abc import Callable

from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret, ServiceAccount

from ... import metrics
from ...constants import (
    ANNOTATION_LOCAL_UID,
    ANNOTATION_TOKEN_FOR_POD,
    API_SERVER_ACCESS_HOME,
)
from ...kube.informer import Informer
from ...kube.ops import delete_with_uid, tolerating
from ...kube.workqueue import WorkQueue
from ...logs import fields
from ...objects import reference
from ..context import PeeringContext
from ..forge import TOKEN_NAMESPACE_KEY, api_server_access, token_requests
from ..namespaces import TwinManager
from .kind import digest
from .policy import KindPolicy
from .reflector import OWNER_OTHER_CATAMARAN, Reflector, identity_labels
from .secrets import TOKEN_SECRET_PREFIX as SECRET_PREFIX

log = logging.getLogger(__name__)

ANNOTATION_REFRESH_AT = "catamaran.io/token-refresh-at"  # epoch seconds
ANNOTATION_CONTENT_DIGEST = "catamaran.io/content-digest"  # of what was written: tampering shows
REFRESH_FRACTION = 0.8
MAX_NAME = 253


def token_secret_name(pod_name: str) -> str:
    name = f"{SECRET_PREFIX}{pod_name}"
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 11]}.{hashlib.sha256(pod_name.encode()).hexdigest()[:10]}"


def refresh_delay(lifetimes: list[float]) -> float:
    """Seconds from issuing until the tokens must be replaced: 80 % of the shortest lifetime."""
    return REFRESH_FRACTION * min(lifetimes)


class TokenReflector:
    name = "reflect-tokens"

    def __init__(
        self,
        peering: PeeringContext,
        twins: TwinManager,
        secrets: Reflector,
        local_pods: Informer,
        *,
        policy: KindPolicy,
    ):
        self.peering = peering
        self.twins = twins
        self.secrets = secrets  # its copy informers see the token Secrets too: no second watch per twin
        self.local_pods = local_pods
        self.policy = policy
        self.queue = WorkQueue(self.name, self.reconcile, workers=max(1, policy.workers))
        self.written_listeners: list[Callable[[tuple], None]] = []
        self._by_secret: dict[tuple[str, str], str] = {}  # (origin, secret name) -> pod name
        # (origin, pod name) -> local pod UID of the token Secret last written: the provider has it from the
        # moment the write returns, before the copy informer sees it, so the pod need not wait for that.
        self._written: dict[tuple[str, str], str] = {}
        secrets.copy_listeners.append(self._copy_changed)

    def tasks(self):
        return [self.queue.run()]

    def pod_changed(self, key) -> None:
        self.queue.add(key)

    def requeue_namespace(self, origin: str) -> None:
        for key in self.local_pods.keys_in(origin):
            self.queue.add(key)

    def update(self, policy: KindPolicy) -> None:
        self.policy = policy
        self.queue.resize(max(1, policy.workers))
        for key in list(self.local_pods.cache):
            self.queue.add(key)
            for listener in self.written_listeners:
                listener(key)  # a pod waiting for a token no longer needed goes out now

    def _copy_changed(self, origin: str, copy_name: str, copy: dict | None) -> None:
        if copy_name.startswith(SECRET_PREFIX):
            pod = self._by_secret.get((origin, copy_name)) or copy_name.removeprefix(SECRET_PREFIX)
            self.queue.add((origin, pod))
            if copy is not None:
                # A Secret this process did not write (an earlier process did) lets its pod go out once seen.
                for listener in self.written_listeners:
                    listener((origin, pod))

    def needed(self, pod: dict) -> bool:
        # Only a pod that keeps its home API server carries the consumer's tokens.
        home = api_server_access(pod) == API_SERVER_ACCESS_HOME
        return self.policy.enabled and home and bool(token_requests(pod["spec"]))

    def ready_for(self, pod: dict, twin: str) -> bool:
        """Is the pod's token Secret in the twin, for this very pod? Its ShadowPod waits for it."""
        meta = pod["metadata"]
        if self._written.get((meta["namespace"], meta["name"])) == meta["uid"]:
            return True
        copy = self.secrets.copy_of(twin, token_secret_name(meta["name"]))
        return copy is not None and copy.get("localUID") == meta["uid"]

    def left_in(self, twin: str) -> int:
        return self.secrets.left_in(twin, OWNER_OTHER_CATAMARAN)

    async def reconcile(self, key) -> float | None:
        namespace, pod_name = key
        twin = self.twins.twin_of(namespace)  # never a twin of another namespace, even one of the same name
        copies = self.secrets.copies.get(twin) if twin else None
        if twin is None or copies is None:
            if key not in self.local_pods.cache:
                self._written.pop(key, None)
            return None
        if not copies.synced.is_set():
            return 0.5
        secret_name = token_secret_name(pod_name)
        self._by_secret[(namespace, secret_name)] = pod_name
        copy = copies.get(twin, secret_name)
        pod = self.local_pods.get(namespace, pod_name)
        wanted = (
            pod is not None and self.needed(pod) and self.twins.selected(namespace) and self.twins.twin_ready(namespace)
        )
        if not wanted:
            self._by_secret.pop((namespace, secret_name), None)
            self._written.pop(key, None)
            if copy is not None and copy["owner"] == OWNER_OTHER_CATAMARAN:
                with tolerating(404, 409):
                    await delete_with_uid(self.peering.provider, Secret, secret_name, twin, copy["uid"])
            return None
        if copy is not None and copy["owner"] != OWNER_OTHER_CATAMARAN:
            await self._conflict(pod, twin, secret_name)
            return None
        if copy is not None:
            annotations = copy.get("annotations") or {}
            refresh_at = float(annotations.get(ANNOTATION_REFRESH_AT) or 0)
            intact = annotations.get(ANNOTATION_CONTENT_DIGEST) == copy["digest"]
            if copy["localUID"] == pod["metadata"]["uid"] and intact and refresh_at > time.time():
                return refresh_at - time.time()
        started = time.monotonic()
        try:
            body, lifetime = await self._issue(pod, twin, secret_name)
            if copy is None:
                await self.peering.provider.create(Secret.from_dict(body))
                metrics.REFLECTED.labels("serviceAccountTokens", "created").inc()
            else:
                body["metadata"]["resourceVersion"] = copy["resourceVersion"]
                await self.peering.provider.replace(Secret.from_dict(body), secret_name, namespace=twin)
                metrics.REFLECTED.labels("serviceAccountTokens", "updated").inc()
        except ApiError as error:
            metrics.REFLECTION_ERRORS.labels("serviceAccountTokens").inc()
            if error.status.code != 409:
                await self._event(
                    pod,
                    "Warning",
                    "TokenReflectionFailed",
                    f"cannot give the pod on {self.peering.provider_id} its service-account token: "
                    f"{error.status.message or error}",
                )
            raise
        metrics.REFLECTION_SECONDS.labels("serviceAccountTokens").observe(time.monotonic() - started)
        self._written[key] = pod["metadata"]["uid"]
        for listener in self.written_listeners:
            listener(key)
        return lifetime

    async def _issue(self, pod: dict, twin: str, secret_name: str) -> tuple[dict, float]:
        """The token Secret's body, with a token per projection, and the seconds until it must be refreshed."""
        meta, spec = pod["metadata"], pod["spec"]
        service_account = spec.get("serviceAccountName") or "default"
        now = time.time()
        data = {TOKEN_NAMESPACE_KEY: base64.b64encode(meta["namespace"].encode()).decode()}
        lifetimes = []
        for key, audience, seconds in token_requests(spec):
            request = ServiceAccount.Token(
                metadata=ObjectMeta(),
                spec=TokenRequestSpec(
                    audiences=[audience] if audience else [],
                    expirationSeconds=seconds,
                    boundObjectRef=BoundObjectReference(
                        apiVersion="v1", kind="Pod", name=meta["name"], uid=meta["uid"]
                    ),
                ),
            )
            issued = await self.peering.local.create(request, service_account, namespace=meta["namespace"])
            data[key] = base64.b64encode(issued.status.token.encode()).decode()
            expires = issued.status.expirationTimestamp
            granted = (expires - datetime.datetime.now(datetime.UTC)).total_seconds() if expires else seconds
            lifetimes.append(max(1.0, min(float(seconds), granted)))
        delay = refresh_delay(lifetimes)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": secret_name,
                "namespace": twin,
                "labels": identity_labels(self.peering.consumer_id, self.peering.provider_id),
                "annotations": {
                    ANNOTATION_TOKEN_FOR_POD: meta["name"],
                    ANNOTATION_LOCAL_UID: meta["uid"],
                    ANNOTATION_REFRESH_AT: f"{now + delay:.0f}",
                },
            },
            "data": data,
        }
        content = self.secrets.kind.content(body, self.secrets.context, local=False)
        body["metadata"]["annotations"][ANNOTATION_CONTENT_DIGEST] = digest(content)
        log.info(
            "issued service-account token",
            extra=fields(pod=f"{meta['namespace']}/{meta['name']}", twin=twin, refresh_in=round(delay)),
        )
        return body, delay

    async def _conflict(self, pod: dict, twin: str, secret_name: str) -> None:
        metrics.REFLECTION_CONFLICTS.labels("serviceAccountTokens").inc()
        await self._event(
            pod,
            "Warning",
            "ReflectionConflict",
            f"Secret {twin}/{secret_name} on {self.peering.provider_id} was not created by Catamaran; "
            "the pod's service-account token cannot be stored there",
        )

    async def _event(self, pod: dict, kind_type: str, reason: str, message: str) -> None:
        await self.peering.events.record(
            reference({"apiVersion": "v1", "kind": "Pod", **pod}), kind_type, reason, message
        )
