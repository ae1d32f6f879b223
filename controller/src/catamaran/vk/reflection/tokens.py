"""Service-account tokens of offloaded pods: issued by the consumer once per service account, kept fresh in the twin.

The pods of one service account on this virtual node share its tokens. For each (audience, lifetime) their volumes
project, the consumer is asked once (TokenRequest), the token bound to the account's *binding*: a Secret of type
catamaran.io/token-binding in the pod's namespace that holds nothing (`catamaran-token-binding.<provider>.<account>`).
The tokens live in one Secret per account in the twin (`catamaran-token.sa.<account>`); the remote pods' projected
volumes read them at the paths the kubelet would have used (forge.py). They are replaced before 80 % of the shortest
lifetime, as the kubelet does. When the account's last pod leaves this virtual node both Secrets go, and deleting
the binding revokes its tokens at once. A binding deleted by anyone else while the pods run (seen on the Secrets
reflector's watch of the namespace) has the account's Secret written again at once, bound to a new binding.

Shared, a pod waits for no credential of its own: the first pod of an account waits for one TokenRequest per
(audience, lifetime) and one Secret write, every later pod for nothing. What sharing costs is in design.md
("Service-account tokens"): the consumer sees the account, not the pod, and a token stays valid while any pod of
its account runs here. Lifetimes and audiences are the pods' own.

Per-pod token Secrets of earlier releases (`catamaran-token.<pod>`, bound to the pod) are kept fresh for the pods
whose ShadowPods read them and go with those pods.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret, ServiceAccount

from ... import metrics
from ...constants import (
    ANNOTATION_LOCAL_UID,
    ANNOTATION_TOKEN_FOR_POD,
    ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT,
    API_SERVER_ACCESS_HOME,
    LABEL_DESTINATION_CLUSTER_ID,
    LABEL_MANAGED_BY,
    MANAGED_BY_CATAMARAN,
)
from ...kube.informer import Informer
from ...kube.ops import delete_with_uid, tolerating
from ...kube.workqueue import WorkQueue
from ...logs import fields
from ...objects import reference
from ..context import PeeringContext
from ..forge import (
    TOKEN_NAMESPACE_KEY,
    api_server_access,
    request_order,
    token_key,
    token_projections,
    token_requests,
    volume_token_key,
)
from ..namespaces import TwinManager
from .kind import digest
from .policy import KindPolicy
from .reflector import OWNER_OTHER_CATAMARAN, Reflector, identity_labels
from .secrets import TOKEN_BINDING_TYPE
from .secrets import TOKEN_SECRET_PREFIX as SECRET_PREFIX

log = logging.getLogger(__name__)

ANNOTATION_REFRESH_AT = "catamaran.io/token-refresh-at"  # epoch seconds
ANNOTATION_CONTENT_DIGEST = "catamaran.io/content-digest"  # of what was written: tampering shows
ANNOTATION_TOKEN_KEYS = "catamaran.io/token-keys"  # the keys an account's token Secret holds, comma-separated
ACCOUNT_SECRET_PREFIX = f"{SECRET_PREFIX}sa."
BINDING_PREFIX = "catamaran-token-binding."
REFRESH_FRACTION = 0.8
MAX_NAME = 253


def _bounded(name: str, unique: str) -> str:
    """`name`, or its head and a digest of `unique` when it is longer than a Secret's name may be."""
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 11]}.{hashlib.sha256(unique.encode()).hexdigest()[:10]}"


def token_secret_name(pod_name: str) -> str:
    """A per-pod token Secret of earlier releases."""
    return _bounded(f"{SECRET_PREFIX}{pod_name}", pod_name)


def account_secret_name(account: str) -> str:
    """The twin's Secret holding the tokens of a service account's pods on this virtual node."""
    return _bounded(f"{ACCOUNT_SECRET_PREFIX}{account}", account)


def binding_name(provider_id: str, account: str) -> str:
    """The consumer's Secret the account's tokens for this provider are bound to: deleting it revokes them."""
    return _bounded(f"{BINDING_PREFIX}{provider_id}.{account}", f"{provider_id}/{account}")


def pod_account(pod: dict) -> str:
    return pod["spec"].get("serviceAccountName") or "default"


Requests = frozenset[tuple[str | None, int]]  # (audience, lifetime) of the tokens a pod's volumes project


def token_keys(pod: dict) -> frozenset[str]:
    """The keys the pod's remote volumes read from its account's token Secret."""
    return _keys(frozenset(token_requests(pod["spec"])))


def _keys(requests: Requests) -> frozenset[str]:
    return frozenset(token_key(audience, seconds) for audience, seconds in requests)


def refresh_delay(lifetimes: list[float]) -> float:
    """Seconds from issuing until the tokens must be replaced: 80 % of the shortest lifetime."""
    return REFRESH_FRACTION * min(lifetimes)


@dataclass(frozen=True)
class AccountTokens:
    """Work: the token Secret of a service account's pods on this virtual node, and its binding."""

    namespace: str
    account: str


@dataclass
class Written:
    """What this process last wrote (or found fresh) as an account's token Secret. The provider has it from the
    moment the write returns, before the copy informer shows it: pods need not wait for that, and the account
    is not written again meanwhile."""

    keys: frozenset[str]
    refresh_at: float  # epoch seconds
    version: str  # its resourceVersion
    echoed: bool = False  # the copy informer has shown this version: a later change is someone else's
    bound: str = ""  # the uid of the binding its tokens are bound to


@dataclass(frozen=True)
class PodTokens:
    """Work: a per-pod token Secret of an earlier release."""

    namespace: str
    pod: str


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
        self.written_listeners: list[Callable[[tuple], None]] = []  # told (namespace, pod) when its tokens are in
        # The account's pods that project tokens: name -> the (audience, lifetime) pairs its volumes ask for.
        self._users: dict[AccountTokens, dict[str, Requests]] = {}
        # How many of those pods ask for each (audience, lifetime): what the account's Secret must hold, kept as
        # pods come and go so a reconcile never walks an account's thousands of pods.
        self._requests: dict[AccountTokens, Counter] = {}
        self._account_of: dict[tuple[str, str], str] = {}  # (namespace, pod) -> its account, for those pods
        self._written: dict[AccountTokens, Written] = {}
        self._waiting: dict[AccountTokens, set[str]] = {}  # pods told their tokens are not there yet
        self._copies: dict[tuple[str, str], AccountTokens | PodTokens] = {}  # (origin, copy name) -> its work
        # Bindings deleted while their account's pods run here: the account -> that binding's uid. Kept until a
        # write binds the tokens to another, so a write begun before the deletion is done again after it.
        self._revoked: dict[AccountTokens, str] = {}
        secrets.copy_listeners.append(self._copy_changed)
        # The Secrets reflector watches each offloaded namespace's Secrets, the bindings among them: no second watch.
        secrets.local_listeners.append(self._local_secret_changed)

    def tasks(self):
        return [self._run()]

    async def _run(self) -> None:
        # Until every node's pods are listed, a pod not seen may still be there: its Secrets must not go (the copies'
        # informer, listed first at a restart, queues every token Secret at once).
        await self.local_pods.synced.wait()
        await self.queue.run()

    def pod_changed(self, key: tuple[str, str], pod: dict | None) -> None:
        """A local pod came, changed or went (`pod` as the local pods' informer now holds it, None: gone): its account
        is looked at when what it asks of it changed (a pod's status changes often, its token volumes and account
        never)."""
        namespace, name = key
        if (namespace, token_secret_name(name)) in self._copies:
            self.queue.add(PodTokens(namespace, name))
        after = None
        if pod is not None and self.projects_tokens(pod):
            after = (AccountTokens(namespace, pod_account(pod)), frozenset(token_requests(pod["spec"])))
        account = self._account_of.get(key)
        before = None
        if account is not None:
            before_key = AccountTokens(namespace, account)
            before = (before_key, self._users[before_key][name])
        if after == before:
            return
        if before is not None:
            del self._account_of[key]
            del self._users[before[0]][name]
            self._requests[before[0]].subtract(before[1])
            self.queue.add(before[0])
        if after is not None:
            self._account_of[key] = after[0].account
            self._users.setdefault(after[0], {})[name] = after[1]
            self._requests.setdefault(after[0], Counter()).update(after[1])
            self.queue.add(after[0])

    def requeue_namespace(self, origin: str) -> None:
        for key in self.local_pods.keys_in(origin):
            self.pod_changed(key, self.local_pods.get(*key))
        for account in [account for account in self._users if account.namespace == origin]:
            self.queue.add(account)
        twin = self.twins.twin_of(origin)
        informer = self.secrets.copies.get(twin) if twin else None
        for (_, copy_name), copy in list(informer.cache.items()) if informer else []:
            self._copy_changed(origin, copy_name, copy)

    def update(self, policy: KindPolicy) -> None:
        self.policy = policy
        self.queue.resize(max(1, policy.workers))
        for account in list(self._users):
            self.queue.add(account)
        for key in list(self.local_pods.cache):
            for listener in self.written_listeners:
                listener(key)  # a pod waiting for a token no longer needed goes out now

    def _copy_changed(self, origin: str, copy_name: str, copy: dict | None) -> None:
        if not copy_name.startswith(SECRET_PREFIX):
            return
        work = self._copies.get((origin, copy_name))
        if work is None and copy is not None:
            annotations = copy.get("annotations") or {}
            if account := annotations.get(ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT):
                work = AccountTokens(origin, account)
            elif pod := annotations.get(ANNOTATION_TOKEN_FOR_POD):
                work = PodTokens(origin, pod)
        if work is None:
            return
        self._copies[(origin, copy_name)] = work
        written = self._written.get(work) if isinstance(work, AccountTokens) else None
        if written is not None:
            if copy is not None and copy["resourceVersion"] == written.version:
                written.echoed = True
                return  # this process's own write
            if written.echoed:
                del self._written[work]  # changed or deleted by someone else since: look at it again
        self.queue.add(work)

    def _local_secret_changed(self, event, key, new, old) -> None:
        """Deleting a binding revokes its tokens at once, whoever deletes it. While the account's pods run here, its
        Secret is written again now, bound to a new binding, not at its refresh up to 80 % of a lifetime later."""
        if event != "DELETED" or old is None or old.get("type") != TOKEN_BINDING_TYPE:
            return
        namespace, name = key
        account = (old["metadata"].get("annotations") or {}).get(ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT)
        if not account or name != binding_name(self.peering.provider_id, account):
            return  # another peering's binding
        work = AccountTokens(namespace, account)
        if work in self._users:  # else its last pod left and this reflector unbound it
            self._revoked[work] = old["metadata"]["uid"]
            self.queue.add(work)

    @staticmethod
    def projects_tokens(pod: dict) -> bool:
        # Only a pod that keeps its home API server carries the consumer's tokens.
        return api_server_access(pod) == API_SERVER_ACCESS_HOME and bool(token_requests(pod["spec"]))

    def needed(self, pod: dict) -> bool:
        return self.policy.enabled and self.projects_tokens(pod)

    def ready_for(self, pod: dict) -> bool:
        """Does the twin hold the tokens this pod's volumes read? Its ShadowPod waits for them: the pod is
        requeued (written_listeners) once they are."""
        key = AccountTokens(pod["metadata"]["namespace"], pod_account(pod))
        written = self._written.get(key)
        if written is not None and token_keys(pod) <= written.keys:
            return True
        self._waiting.setdefault(key, set()).add(pod["metadata"]["name"])
        self.queue.add(key)
        return False

    def left_in(self, twin: str) -> int:
        return self.secrets.left_in(twin, OWNER_OTHER_CATAMARAN)

    async def reconcile(self, key: AccountTokens | PodTokens) -> float | None:
        if isinstance(key, PodTokens):
            return await self._reconcile_pod(key)
        return await self._reconcile_account(key)

    # -- the tokens of a service account --------------------------------------------------------------------------

    def _wanted(self, namespace: str, used: bool) -> bool:
        """Are tokens wanted in the namespace's twin, given that pods use them?"""
        return used and self.policy.enabled and self.twins.selected(namespace) and self.twins.twin_ready(namespace)

    async def _reconcile_account(self, key: AccountTokens) -> float | None:
        namespace = key.namespace
        twin = self.twins.twin_of(namespace)  # never a twin of another namespace, even one of the same name
        copies = self.secrets.copies.get(twin) if twin else None
        users = self._users.get(key) or {}
        if twin is None or copies is None:
            self._written.pop(key, None)
            self._forget_if_unused(key)
            return None  # no twin here: its readiness requeues the namespace
        if not copies.synced.is_set():
            return 0.5
        name = account_secret_name(key.account)
        self._copies[(namespace, name)] = key
        copy = copies.get(twin, name)
        if not self._wanted(namespace, bool(users)):
            self._written.pop(key, None)
            if copy is not None and copy["owner"] == OWNER_OTHER_CATAMARAN:
                with tolerating(404, 409):
                    await delete_with_uid(self.peering.provider, Secret, name, twin, copy["uid"])
            await self._unbind(key)
            if self._forget_if_unused(key):  # a pod of the account may have come meanwhile: it stays known
                self._copies.pop((namespace, name), None)
            return None
        if copy is not None and copy["owner"] != OWNER_OTHER_CATAMARAN:
            await self._conflict(
                key,
                f"Secret {twin}/{name} on {self.peering.provider_id} was not created by Catamaran; the service"
                f" account's tokens cannot be stored there",
            )
            return None
        asked = self._requests.get(key) or Counter()
        requests = sorted((request for request, pods in asked.items() if pods > 0), key=request_order)
        keys = frozenset(token_key(audience, seconds) for audience, seconds in requests)
        written = self._written.get(key)
        if written is not None and written.bound == self._revoked.get(key):
            del self._written[key]  # its tokens' binding is gone, and with it the tokens
            written = None
        bound: str | None = None  # the binding's uid, once looked up
        if written is None and copy is not None:
            # Written before this process started, or changed by someone since: good only if intact and fresh.
            annotations = copy.get("annotations") or {}
            refresh_at = float(annotations.get(ANNOTATION_REFRESH_AT) or 0)
            intact = annotations.get(ANNOTATION_CONTENT_DIGEST) == copy["digest"]
            held = frozenset(filter(None, (annotations.get(ANNOTATION_TOKEN_KEYS) or "").split(",")))
            if intact and refresh_at > time.time():
                if (bound := await self._binding(key)) is None:
                    return None
                if copy["localUID"] == bound:
                    written = Written(held, refresh_at, copy["resourceVersion"], echoed=True, bound=bound)
                    self._written[key] = written
        if written is not None and keys <= written.keys and written.refresh_at > time.time():
            self._release_waiting(key)
            return written.refresh_at - time.time()
        started = time.monotonic()
        try:
            if bound is None and (bound := await self._binding(key)) is None:
                return None
            body, lifetime = await self._account_secret(key, twin, name, bound, requests)
            if copy is None:
                stored = await self.peering.provider.create(Secret.from_dict(body))
                metrics.REFLECTED.labels("serviceAccountTokens", "created").inc()
            else:
                body["metadata"]["resourceVersion"] = copy["resourceVersion"]
                stored = await self.peering.provider.replace(Secret.from_dict(body), name, namespace=twin)
                metrics.REFLECTED.labels("serviceAccountTokens", "updated").inc()
        except ApiError as error:
            metrics.REFLECTION_ERRORS.labels("serviceAccountTokens").inc()
            if error.status.code != 409:
                await self._tell_waiting(
                    key,
                    "TokenReflectionFailed",
                    f"cannot give the pods of service account {key.account} on {self.peering.provider_id} their"
                    f" tokens: {error.status.message or error}",
                )
            raise
        metrics.REFLECTION_SECONDS.labels("serviceAccountTokens").observe(time.monotonic() - started)
        refresh_at = float(body["metadata"]["annotations"][ANNOTATION_REFRESH_AT])
        version = stored.metadata.resourceVersion
        # The copy informer may have shown this write before it returned: then no echo is still to come.
        seen = copies.get(twin, name)
        echoed = seen is not None and seen["resourceVersion"] == version
        self._written[key] = Written(keys, refresh_at, version, echoed, bound=bound)
        if self._revoked.get(key) != bound:
            self._revoked.pop(key, None)  # bound to a binding that stands (a write begun before a deletion is not)
        self._release_waiting(key)
        return lifetime

    def _release_waiting(self, key: AccountTokens) -> None:
        """Requeue the pods waiting for tokens the account's Secret now holds (only those: an account of thousands
        of pods must not requeue them all whenever one changes)."""
        waiting, written = self._waiting.get(key), self._written[key]
        users = self._users.get(key) or {}
        for name in list(waiting or ()):
            requests = users.get(name)
            if requests is None or _keys(requests) <= written.keys:
                waiting.discard(name)
                if requests is not None:
                    for listener in self.written_listeners:
                        listener((key.namespace, name))

    def _forget_if_unused(self, key: AccountTokens) -> bool:
        """Drop what is kept of an account no pod uses now (read live: the caller may have awaited since it looked)."""
        if self._users.get(key):
            return False
        self._users.pop(key, None)
        self._requests.pop(key, None)
        self._waiting.pop(key, None)
        self._revoked.pop(key, None)
        return True

    async def _binding(self, key: AccountTokens) -> str | None:
        """The uid of the account's binding Secret, made when missing; None when another object holds its name."""
        name = binding_name(self.peering.provider_id, key.account)
        try:
            found = await self.peering.local.get(Secret, name, namespace=key.namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
            found = await self.peering.local.create(Secret.from_dict(self._binding_body(key, name)))
        if found.type != TOKEN_BINDING_TYPE:
            await self._conflict(
                key,
                f"Secret {key.namespace}/{name} is not a {TOKEN_BINDING_TYPE} Secret, so the tokens of service"
                f" account {key.account} on {self.peering.provider_id} cannot be bound to it; rename or remove it",
            )
            return None
        return found.metadata.uid

    def _binding_body(self, key: AccountTokens, name: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": TOKEN_BINDING_TYPE,
            "metadata": {
                "name": name,
                "namespace": key.namespace,
                "labels": {
                    LABEL_MANAGED_BY: MANAGED_BY_CATAMARAN,
                    LABEL_DESTINATION_CLUSTER_ID: self.peering.provider_id,
                },
                "annotations": {ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT: key.account},
            },
        }

    async def _unbind(self, key: AccountTokens) -> None:
        """Delete the account's binding, which revokes every token bound to it."""
        name = binding_name(self.peering.provider_id, key.account)
        with tolerating(404, 409):
            found = await self.peering.local.get(Secret, name, namespace=key.namespace)
            if found.type == TOKEN_BINDING_TYPE:
                await delete_with_uid(self.peering.local, Secret, name, key.namespace, found.metadata.uid)

    async def _account_secret(
        self, key: AccountTokens, twin: str, name: str, bound: str, requests: list[tuple[str | None, int]]
    ) -> tuple[dict, float]:
        """The account's token Secret, a token per (audience, lifetime), and the seconds until it must be refreshed."""
        binding = BoundObjectReference(
            apiVersion="v1", kind="Secret", name=binding_name(self.peering.provider_id, key.account), uid=bound
        )
        data = {TOKEN_NAMESPACE_KEY: _b64(key.namespace)}
        lifetimes = []
        for audience, seconds in requests:
            token, lifetime = await self._request(key.namespace, key.account, audience, seconds, binding)
            data[token_key(audience, seconds)] = _b64(token)
            lifetimes.append(lifetime)
        keys = ",".join(sorted(data.keys() - {TOKEN_NAMESPACE_KEY}))
        annotations = {ANNOTATION_TOKEN_FOR_SERVICE_ACCOUNT: key.account, ANNOTATION_TOKEN_KEYS: keys}
        body, delay = self._token_secret_body(twin, name, bound, annotations, data, lifetimes)
        log.info(
            "issued service-account tokens",
            extra=fields(account=f"{key.namespace}/{key.account}", twin=twin, refresh_in=round(delay)),
        )
        return body, delay

    # -- the per-pod Secrets of earlier releases ------------------------------------------------------------------

    async def _reconcile_pod(self, key: PodTokens) -> float | None:
        namespace = key.namespace
        twin = self.twins.twin_of(namespace)
        copies = self.secrets.copies.get(twin) if twin else None
        if twin is None or copies is None:
            return None
        if not copies.synced.is_set():
            return 0.5
        name = token_secret_name(key.pod)
        copy = copies.get(twin, name)
        if copy is None or copy["owner"] != OWNER_OTHER_CATAMARAN:
            self._copies.pop((namespace, name), None)
            return None
        pod = self.local_pods.get(namespace, key.pod)
        if not (
            pod is not None
            and copy["localUID"] == pod["metadata"]["uid"]
            and self._wanted(namespace, True)
            and self.needed(pod)
        ):
            with tolerating(404, 409):
                await delete_with_uid(self.peering.provider, Secret, name, twin, copy["uid"])
            return None
        annotations = copy.get("annotations") or {}
        refresh_at = float(annotations.get(ANNOTATION_REFRESH_AT) or 0)
        if annotations.get(ANNOTATION_CONTENT_DIGEST) == copy["digest"] and refresh_at > time.time():
            return refresh_at - time.time()
        meta = pod["metadata"]
        binding = BoundObjectReference(apiVersion="v1", kind="Pod", name=meta["name"], uid=meta["uid"])
        data = {TOKEN_NAMESPACE_KEY: _b64(namespace)}
        lifetimes = []
        for volume, index, audience, seconds in token_projections(pod["spec"]):
            token, lifetime = await self._request(namespace, pod_account(pod), audience, seconds, binding)
            data[volume_token_key(volume, index)] = _b64(token)
            lifetimes.append(lifetime)
        annotations = {ANNOTATION_TOKEN_FOR_POD: meta["name"]}
        body, delay = self._token_secret_body(twin, name, meta["uid"], annotations, data, lifetimes)
        body["metadata"]["resourceVersion"] = copy["resourceVersion"]
        await self.peering.provider.replace(Secret.from_dict(body), name, namespace=twin)
        metrics.REFLECTED.labels("serviceAccountTokens", "updated").inc()
        return delay

    # -- shared -----------------------------------------------------------------------------------------------------

    async def _request(
        self, namespace: str, account: str, audience: str | None, seconds: int, binding: BoundObjectReference
    ) -> tuple[str, float]:
        """A token from the consumer and the seconds it is valid for (at most what was asked)."""
        request = ServiceAccount.Token(
            metadata=ObjectMeta(),
            spec=TokenRequestSpec(
                audiences=[audience] if audience else [], expirationSeconds=seconds, boundObjectRef=binding
            ),
        )
        issued = await self.peering.local.create(request, account, namespace=namespace)
        expires = issued.status.expirationTimestamp
        granted = (expires - datetime.datetime.now(datetime.UTC)).total_seconds() if expires else seconds
        return issued.status.token, max(1.0, min(float(seconds), granted))

    def _token_secret_body(
        self, twin: str, name: str, local_uid: str, annotations: dict, data: dict, lifetimes: list[float]
    ) -> tuple[dict, float]:
        delay = refresh_delay(lifetimes)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": twin,
                "labels": identity_labels(self.peering.consumer_id, self.peering.provider_id),
                "annotations": {
                    **annotations,
                    ANNOTATION_LOCAL_UID: local_uid,
                    ANNOTATION_REFRESH_AT: f"{time.time() + delay:.0f}",
                },
            },
            "data": data,
        }
        content = self.secrets.kind.content(body, self.secrets.context, local=False)
        body["metadata"]["annotations"][ANNOTATION_CONTENT_DIGEST] = digest(content)
        return body, delay

    async def _conflict(self, key: AccountTokens, message: str) -> None:
        """Another object holds the name of a Secret of the account's: counted as reflection's conflicts are."""
        metrics.REFLECTION_CONFLICTS.labels("serviceAccountTokens").inc()
        await self._tell_waiting(key, "ReflectionConflict", message)

    async def _tell_waiting(self, key: AccountTokens, reason: str, message: str) -> None:
        """A Warning on each of the account's pods still waiting for its tokens (the running ones have theirs)."""
        for name in sorted(self._waiting.get(key) or ()):
            pod = self.local_pods.get(key.namespace, name)
            if pod is not None:
                await self.peering.events.record(
                    reference({"apiVersion": "v1", "kind": "Pod", **pod}), "Warning", reason, message
                )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
