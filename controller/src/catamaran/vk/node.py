"""The virtual nodes: each one's object, capacity, conditions and Lease, and the peering's provider health check.

Besides the health check, other parts may hold the nodes NotReady with a reason of their own
(`set_problem`): informers that keep failing (WatchesFailing, watched here), a rejected credential
(CredentialRejected). The most specific reason is shown; listeners hear every change of the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from dataclasses import dataclass, field

from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from .. import __version__, quantities
from .. import health as process_health
from ..constants import (
    ANNOTATION_OWNED_TAINTS,
    DEFAULT_SHARING_PERCENTAGE,
    LABEL_POOL,
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TYPE,
    NODE_LEASE_DURATION_SECONDS,
    NODE_LEASE_NAMESPACE,
    NODE_LEASE_RENEW_SECONDS,
    TYPE_VIRTUAL_NODE,
    VIRTUAL_NODE_TAINT,
    VIRTUAL_NODE_TAINT_KEY,
    virtual_node_name,
)
from ..kube import informer as informers
from ..kube.clients import get_raw
from ..kube.ops import tolerating
from ..logs import fields
from ..objects import now_iso, set_condition
from .context import PeeringContext
from .pools import Cordon

log = logging.getLogger(__name__)

ROUNDED_TO_ZERO = "catamaran.io/ResourcesRoundedToZero"
PROVIDER_CORDONED = "catamaran.io/ProviderCordoned"
# While the provider lends nothing new: the scheduler sends no pod here (kubectl cordon's spec.unschedulable stays the
# consumer's own to set).
CORDON_TAINT = {"key": "catamaran.io/provider-cordoned", "effect": "NoSchedule"}
PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")
KUBELET_VERSION = f"catamaran-v{__version__}"  # the node's nodeInfo.kubeletVersion
WATCHES_FAILING = "WatchesFailing"
# NotReady reasons other than the health check's ProviderUnreachable (which beats them all), most specific
# first; a reason not listed here comes after these.
PROBLEM_PRIORITY = ("CredentialRejected", WATCHES_FAILING)


@dataclass
class HealthSettings:
    period: float = 10
    timeout: float = 5
    failure_threshold: int = 3


@dataclass
class NodeSettings:
    provider_id: str
    node_ip: str
    sharing_percentage: int = DEFAULT_SHARING_PERCENTAGE
    suggested_labels: dict = field(default_factory=dict)
    taints: list = field(default_factory=list)  # spec.nodeTaints, besides VIRTUAL_NODE_TAINT
    kubelet_port: int = 0
    pool: str | None = None  # the node pool this node is (None: the peering's one node)

    @property
    def node_name(self) -> str:
        return virtual_node_name(self.provider_id, self.pool)


def cordon_condition(provider_id: str, cordon: Cordon | None) -> tuple[str, str, str]:
    if cordon is None:
        return "False", "NotCordoned", ""
    state = "drains this tenant (its pods here are evicted)" if cordon.drain else "lends this tenant nothing new"
    why = f": {cordon.reason}" if cordon.reason else ""
    return "True", "Drained" if cordon.drain else "Cordoned", f"provider {provider_id} {state}{why}"


def node_labels(settings: NodeSettings) -> dict:
    return {
        **settings.suggested_labels,
        **({LABEL_POOL: settings.pool} if settings.pool else {}),
        LABEL_TYPE: TYPE_VIRTUAL_NODE,
        LABEL_REMOTE_CLUSTER_ID: settings.provider_id,
        "kubernetes.io/role": "agent",
        "kubernetes.io/hostname": settings.node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def node_taints(taints: list[dict]) -> list[dict]:
    """spec.nodeTaints as a Node carries them: key, value unless empty, effect."""
    return [
        {"key": t["key"], **({"value": t["value"]} if t.get("value") else {}), "effect": t["effect"]} for t in taints
    ]


def owned_taints(annotation: str | None) -> set[tuple[str, str]]:
    """The (key, effect) pairs of the ANNOTATION_OWNED_TAINTS value; never the virtual kubelet's registration
    taint, which is set once when the node is created (as a kubelet's --register-with-taints) and not put back."""
    owned = set()
    for item in (annotation or "").split(","):
        key, colon, effect = item.strip().rpartition(":")
        if colon and key and key != VIRTUAL_NODE_TAINT_KEY:
            owned.add((key, effect))
    return owned


def owned_taints_annotation(taints: list[dict]) -> str | None:
    """The ANNOTATION_OWNED_TAINTS value for spec.nodeTaints; None (no annotation) when there are none."""
    return ",".join(sorted({f"{t['key']}:{t['effect']}" for t in taints})) or None


def merged_taints(current: list[dict], owned: set[tuple[str, str]], wanted: list[dict]) -> list[dict] | None:
    """The node's taints once `wanted` (spec.nodeTaints) are in place, or None when it carries them already.

    A taint of the node with the key and effect of a wanted one takes its value; one the virtual kubelet set
    (`owned`, from the node's annotation) that is no longer wanted goes; every other taint stays as it is (the
    registration taint, kube-controller-manager's node.kubernetes.io/unreachable, an admin's kubectl taint).
    """
    wanted_by_pair = {(t["key"], t["effect"]): t for t in node_taints(wanted)}
    taints, present = [], set()
    for taint in current:
        pair = (taint.get("key"), taint.get("effect"))
        if pair in wanted_by_pair:
            if (taint.get("value") or "") == wanted_by_pair[pair].get("value", ""):
                taints.append(taint)  # as it is, timeAdded included
                present.add(pair)
        elif pair not in owned or pair[0] == VIRTUAL_NODE_TAINT_KEY:
            taints.append(taint)
    taints += [t for pair, t in wanted_by_pair.items() if pair not in present]
    return None if taints == current else taints


def top_problem(problems: dict[str, str]) -> tuple[str, str] | None:
    """The (reason, message) to show of the problems holding the node NotReady, or None."""
    if not problems:
        return None
    rank = {reason: index for index, reason in enumerate(PROBLEM_PRIORITY)}
    reason = min(problems, key=lambda r: (rank.get(r, len(rank)), r))
    return reason, problems[reason]


def failing_watches_message(failing: list) -> str:
    return "; ".join(informers.describe_failure(i) for i in failing)


def reach(settings: NodeSettings) -> dict:
    """Where the API server reaches this virtual kubelet: its address and kubelet port."""
    return {
        # No Hostname address: API servers prefer it by default, and nothing resolves a virtual node's name.
        "addresses": [{"type": "InternalIP", "address": settings.node_ip}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": settings.kubelet_port}},
    }


def node_status(
    settings: NodeSettings,
    offer: dict | None,
    healthy: bool,
    unhealthy_reason: str,
    previous: list[dict],
    problems: dict[str, str] | None = None,
    cordon: Cordon | None = None,
) -> tuple[dict, list[str]]:
    """Node status from the provider's offer, health and problems; also the resources that rounded to zero."""
    offer = offer or {}
    capacity, vanished = quantities.share(offer.get("free") or {}, settings.sharing_percentage)
    capacity.setdefault("pods", "0")
    conditions = previous
    problem = top_problem(problems or {})
    if not healthy:
        ready = ("False", "ProviderUnreachable", unhealthy_reason)
    elif problem:
        ready = ("False", *problem)
    elif not offer:
        ready = ("False", "NoResourceOffer", "the provider has not published its resources yet")
    else:
        ready = ("True", "ProviderReady", f"provider {settings.provider_id} is reachable and offers resources")
    conditions = set_condition(conditions, "Ready", *ready)
    pressure = set(offer.get("pressure") or [])
    for kind in PRESSURE_CONDITIONS:
        conditions = set_condition(
            conditions,
            kind,
            "True" if kind in pressure else "False",
            f"Provider{kind}" if kind in pressure else f"NoProvider{kind}",
            f"every schedulable node of the provider reports {kind}" if kind in pressure else "",
        )
    if vanished:
        message = ", ".join(
            f"{r}: provider has {(offer.get('free') or {})[r]}, {settings.sharing_percentage}% rounds down to 0"
            for r in vanished
        )
        conditions = set_condition(conditions, ROUNDED_TO_ZERO, "True", "IntegerResourceRoundedDown", message)
    else:
        conditions = set_condition(conditions, ROUNDED_TO_ZERO, "False", "NothingRoundedToZero")
    conditions = set_condition(conditions, PROVIDER_CORDONED, *cordon_condition(settings.provider_id, cordon))
    now = now_iso()
    for condition in conditions:
        condition["lastHeartbeatTime"] = now
    status = {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": conditions,
        **reach(settings),
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "catamaran://shadowpod",
            "kernelVersion": "",
            "osImage": f"Catamaran virtual node for {settings.provider_id}",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }
    return status, vanished


class ProviderHealth:
    """The link to the provider, one per peering whatever its number of nodes: the health check of its API server,
    and the problems other parts report (set_problem). Every virtual node of the peering shows its verdict."""

    def __init__(self, peering: PeeringContext, settings: HealthSettings):
        self.peering = peering
        self.settings = settings
        self.healthy = True
        self.unhealthy_reason = ""
        self.failures = 0
        self.problems: dict[str, str] = {}  # NotReady reason -> message, besides the health check
        self.health_listeners: list = []  # called with `ready` whenever the verdict (ready, reason) changes
        self.change_listeners: list = []  # called with nothing on every change (a node rewrites its status)
        self._verdict = (True, "")
        self._informers_changed = asyncio.Event()

    def tasks(self):
        return [self._health_loop(), self._watch_informers()]

    @property
    def not_ready(self) -> tuple[str, str] | None:
        """(reason, message) while the peering's nodes are NotReady for the health check or a problem, else None."""
        if not self.healthy:
            return "ProviderUnreachable", self.unhealthy_reason
        return top_problem(self.problems)

    def set_problem(self, reason: str, message: str | None) -> None:
        """Hold the nodes NotReady with `reason` (a CamelCase word) and `message`; None clears it."""
        if message is None:
            if self.problems.pop(reason, None) is None:
                return
        elif self.problems.get(reason) == message:
            return
        else:
            self.problems[reason] = message
        self._changed()

    def _changed(self) -> None:
        for listener in self.change_listeners:
            listener()
        verdict = self.not_ready
        summary = (verdict is None, verdict[0] if verdict else "")
        if summary == self._verdict:
            return
        self._verdict = summary
        for listener in self.health_listeners:
            listener(verdict is None)

    def _readiness(self) -> str | None:
        """The process's readiness (/readyz): the provider link and problems; failing watches are reported
        by the informers themselves."""
        verdict = self.not_ready
        if verdict is None or verdict[0] == WATCHES_FAILING:
            return None
        return f"{verdict[0]}: {verdict[1]}"

    async def _watch_informers(self) -> None:
        """WatchesFailing while any informer of this process keeps failing (lost rights, a server away)."""

        def changed(_informer) -> None:
            self._informers_changed.set()

        check = f"provider {self.peering.provider_id}"
        informers.failure_listeners.append(changed)
        process_health.HEALTH.add_check(check, self._readiness)
        try:
            while True:
                failing = [i for i in informers.running_informers() if i.failing]
                self.set_problem(WATCHES_FAILING, failing_watches_message(failing) if failing else None)
                await self._informers_changed.wait()
                self._informers_changed.clear()
        finally:
            informers.failure_listeners.remove(changed)
            process_health.HEALTH.remove_check(check)

    async def _health_loop(self) -> None:
        provider = self.peering.provider_id
        while True:
            ok, reason = await self._probe()
            if ok:
                if not self.healthy:
                    log.info("provider reachable again", extra=fields(provider=provider))
                self.failures = 0
                self._set_health(True, "")
            else:
                self.failures += 1
                failed = fields(provider=provider, failures=self.failures, reason=reason)
                log.warning("provider health check failed", extra=failed)
                if self.failures >= self.settings.failure_threshold:
                    self._set_health(False, f"{self.failures} consecutive health checks failed: {reason}")
            await asyncio.sleep(self.settings.period)

    async def _probe(self) -> tuple[bool, str]:
        timeout = self.settings.timeout
        try:
            code, body = await asyncio.wait_for(get_raw(self.peering.provider, "/readyz", timeout), timeout + 1)
        except Exception as error:  # timeouts and connection errors are the point of the check
            return False, f"{type(error).__name__}: {error}"[:200]
        # The provider answered, so it is reachable; a 401 means it refuses the tenant credential (expired or
        # revoked), which a new credential heals without a restart (vk/peering.py CredentialFollower).
        rejected = code == 401
        self.set_problem(
            "CredentialRejected", "the provider rejects the tenant credential (401 Unauthorized)" if rejected else None
        )
        if code == 200 or rejected:
            return True, ""
        return False, f"/readyz answered {code}: {body.strip()[:120]}"

    def _set_health(self, healthy: bool, reason: str) -> None:
        changed = healthy != self.healthy
        self.healthy, self.unhealthy_reason = healthy, reason
        if changed:
            self._changed()


class VirtualNode:
    """Owns one Node object of the peering and its Lease; its readiness is the peering's ProviderHealth."""

    def __init__(self, peering: PeeringContext, settings: NodeSettings, health: ProviderHealth):
        self.peering = peering
        self.settings = settings
        self.health = health
        self.offer: dict | None = None
        self.cordon: Cordon | None = None
        self._reported_cordon = cordon_condition(settings.provider_id, None)  # no Event for a node never cordoned
        self._changed = asyncio.Event()
        self._reported_zero: set[str] = set()
        self._node_uid: str | None = None
        self._node_exists = asyncio.Event()
        self._status_published = asyncio.Event()
        # Set once the provider's offer has been read (the runner hands in its informer's `synced`); until then no
        # offer means "not read yet", not "none published".
        self.offer_synced = asyncio.Event()
        self.offer_synced.set()
        health.change_listeners.append(self._changed.set)

    @property
    def name(self) -> str:
        return self.settings.node_name

    def update_offer(self, offer: dict | None) -> None:
        if offer != self.offer:
            self.offer = offer
            self._changed.set()

    @property
    def _event_target(self) -> dict:
        """The Node as Events name it (Events of cluster-scoped objects live in `default`)."""
        return {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid, "namespace": "default"}

    def update_cordon(self, cordon: Cordon | None) -> None:
        if cordon != self.cordon:
            self.cordon = cordon
            self._changed.set()

    @property
    def wanted_taints(self) -> list[dict]:
        """spec.nodeTaints, and the cordon's while the provider lends nothing new."""
        return [*self.settings.taints, *([CORDON_TAINT] if self.cordon else [])]

    def update_settings(self, settings: NodeSettings) -> None:
        if settings != self.settings:
            self.settings = settings
            self._changed.set()

    async def published(self) -> None:
        """Until the Node exists with its status (addresses, kubelet port) written once."""
        await self._status_published.wait()

    def tasks(self):
        return [self._lease_loop(), self._status_loop(), self._offer_read()]

    async def _offer_read(self) -> None:
        """Publish the whole status once the offer has been read, even when there is none."""
        await self.offer_synced.wait()
        self._changed.set()

    async def remove(self) -> None:
        """Delete the Node and its Lease; call only once tasks() are cancelled, or they would recreate both."""
        with tolerating(404):
            await self.peering.local.delete(Node, self.name)
        # The Lease's owner reference would let garbage collection take it, but not every cluster runs it promptly.
        with tolerating(404):
            await self.peering.local.delete(Lease, self.name, namespace=NODE_LEASE_NAMESPACE)
        log.info("virtual node and lease deleted", extra=fields(node=self.name))

    async def _status_loop(self) -> None:
        while True:
            try:
                await self._sync_node()
            except Exception as error:
                log.warning("cannot update virtual node", extra=fields(node=self.name, error=str(error)[:300]))
                await asyncio.sleep(2)
                self._changed.set()
            # Conditions' heartbeats are refreshed once a minute; the Lease proves liveness.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 60)
            self._changed.clear()

    async def _sync_node(self) -> None:
        try:
            node = await self.peering.local.get(Node, self.name)
        except ApiError as error:
            if error.status.code != 404:
                raise
            metadata = {"name": self.name, "labels": node_labels(self.settings)}
            if owned := owned_taints_annotation(self.wanted_taints):
                metadata["annotations"] = {ANNOTATION_OWNED_TAINTS: owned}
            node = await self.peering.local.create(
                Node.from_dict(
                    {"metadata": metadata, "spec": {"taints": [VIRTUAL_NODE_TAINT, *node_taints(self.wanted_taints)]}}
                )
            )
            log.info("virtual node created", extra=fields(node=self.name))
        self._node_uid = node.metadata.uid
        self._node_exists.set()
        wanted_labels = node_labels(self.settings)
        current_labels = node.metadata.labels or {}
        if any(current_labels.get(k) != v for k, v in wanted_labels.items()):
            node = await self.peering.local.patch(
                Node, self.name, {"metadata": {"labels": wanted_labels}}, patch_type=PatchType.MERGE
            )
        await self._sync_taints(node)
        previous = [c.to_dict() for c in (node.status.conditions or [])] if node.status else []
        health = self.health
        if previous and not self.offer_synced.is_set() and health.not_ready is None:
            # A restart or a new leader: the status the last process published stands until the offer is read (a
            # NoResourceOffer now would turn a serving node NotReady); only where to reach this process changes.
            await self.peering.local.patch(
                Node.Status, self.name, {"status": reach(self.settings)}, patch_type=PatchType.MERGE
            )
            self._status_published.set()
            return
        status, vanished = node_status(
            self.settings, self.offer, health.healthy, health.unhealthy_reason, previous, health.problems, self.cordon
        )
        await self.peering.local.patch(Node.Status, self.name, {"status": status}, patch_type=PatchType.MERGE)
        self._status_published.set()
        if set(vanished) - self._reported_zero:
            await self.peering.events.record(
                self._event_target,
                "Warning",
                "ResourceRoundedToZero",
                next(c["message"] for c in status["conditions"] if c["type"] == ROUNDED_TO_ZERO),
            )
        self._reported_zero = set(vanished)
        await self._report_cordon()

    async def _report_cordon(self) -> None:
        """An Event on the Node whenever the provider's cordon changes (a Warning while it holds)."""
        reported = cordon_condition(self.settings.provider_id, self.cordon)
        if reported == self._reported_cordon:
            return
        self._reported_cordon = reported
        status, reason, message = reported
        await self.peering.events.record(
            self._event_target,
            "Warning" if status == "True" else "Normal",
            f"Provider{reason}" if status == "True" else "ProviderUncordoned",
            message or f"provider {self.settings.provider_id} lends this tenant again",
        )

    async def _sync_taints(self, node: Node) -> None:
        """Put spec.nodeTaints on the node, and take off those the virtual kubelet set that left it."""
        annotations = node.metadata.annotations or {}
        current = [t.to_dict() for t in (node.spec.taints or [])] if node.spec else []
        taints = merged_taints(current, owned_taints(annotations.get(ANNOTATION_OWNED_TAINTS)), self.wanted_taints)
        owned = owned_taints_annotation(self.wanted_taints)
        if taints is None and annotations.get(ANNOTATION_OWNED_TAINTS) == owned:
            return
        # The whole list is replaced: the resourceVersion makes the API server refuse the patch (409) when the
        # node changed since it was read, so no taint added meanwhile is lost.
        patch: dict = {
            "metadata": {
                "resourceVersion": node.metadata.resourceVersion,
                "annotations": {ANNOTATION_OWNED_TAINTS: owned},
            }
        }
        if taints is not None:
            patch["spec"] = {"taints": taints}
        try:
            await self.peering.local.patch(Node, self.name, patch, patch_type=PatchType.MERGE)
        except ApiError as error:
            if error.status.code != 409:
                raise
            log.info("virtual node changed while its taints were synced; syncing again", extra=fields(node=self.name))
            self._changed.set()
            return
        if taints is not None:
            log.info(
                "virtual node taints updated",
                extra=fields(node=self.name, taints=[f"{t['key']}:{t['effect']}" for t in taints]),
            )

    async def _lease_loop(self) -> None:
        await self._node_exists.wait()  # the Lease is owned by the Node, so the Node comes first
        while True:
            try:
                await self._renew_lease()
            except Exception as error:
                log.warning("cannot renew node lease", extra=fields(node=self.name, error=str(error)[:300]))
            await asyncio.sleep(NODE_LEASE_RENEW_SECONDS)

    async def _renew_lease(self) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": NODE_LEASE_DURATION_SECONDS, "renewTime": now}
        try:
            await self.peering.local.patch(
                Lease, self.name, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE
            )
        except ApiError as error:
            if error.status.code != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._node_uid}
            await self.peering.local.create(
                Lease.from_dict(
                    {
                        "metadata": {"name": self.name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [owner]},
                        "spec": spec,
                    }
                )
            )
