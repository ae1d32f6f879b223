"""NamespaceOffloadingPolicy on the consumer: a NamespaceOffloading in every namespace a policy selects.

Keyed by namespace: its labels, the policies and its NamespaceOffloading alone decide what it should have, so
each change requeues the namespaces it may concern. A NamespaceOffloading a policy made carries the policy's
name (label) and the policy as owner, so the garbage collector removes it with the policy too; one the policy
did not make is never touched (a namespace's own choice wins). From there the NamespaceOffloading controller
and the virtual kubelets do what they do for any offloaded namespace, draining included when it goes.
"""

from __future__ import annotations

import asyncio
import logging

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from ..constants import LABEL_OFFLOADING_POLICY, MANAGER_COMPONENT, OFFLOADING_GROUP, VERSION
from ..kube.events import EventRecorder
from ..kube.informer import Informer, call, enqueue
from ..kube.ops import tolerating
from ..kube.resources import NamespaceOffloading, NamespaceOffloadingPolicy
from ..kube.workqueue import WorkQueue
from ..logs import fields
from ..objects import as_dict, reference, same_conditions, set_condition
from ..steering import OFFLOADING_NAME, deciding_policy

log = logging.getLogger(__name__)

FIELD_MANAGER = MANAGER_COMPONENT


def summarize_namespace(namespace) -> dict:
    return {
        "labels": dict(namespace.metadata.labels or {}),
        "deleting": namespace.metadata.deletionTimestamp is not None,
    }


def made_by(offloading: dict | None) -> str | None:
    """The policy that made a NamespaceOffloading (None: none did, or there is none)."""
    if offloading is None:
        return None
    return (offloading["metadata"].get("labels") or {}).get(LABEL_OFFLOADING_POLICY)


def policy_offloading(policy: dict, namespace: str) -> dict:
    """The NamespaceOffloading a policy gives a namespace."""
    meta = policy["metadata"]
    return {
        "apiVersion": f"{OFFLOADING_GROUP}/{VERSION}",
        "kind": "NamespaceOffloading",
        "metadata": {
            "name": OFFLOADING_NAME,
            "namespace": namespace,
            "labels": {LABEL_OFFLOADING_POLICY: meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": policy["apiVersion"],
                    "kind": policy["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "spec": policy["spec"]["offloading"],
    }


def next_step(namespace: dict | None, offloading: dict | None, deciding: dict | None) -> str | None:
    """What a namespace's NamespaceOffloading needs so that it follows the policy deciding it (None: nothing).

    `create` and `update` bring it to the deciding policy's spec, `delete` removes one a policy made that no
    policy (or another one) now decides; a namespace's own NamespaceOffloading is left alone."""
    if namespace is None or namespace["deleting"]:
        return None
    owner = made_by(offloading)
    if offloading is not None and owner is None:
        return None  # the namespace's own choice
    if offloading is not None and offloading["metadata"].get("deletionTimestamp"):
        return None  # once gone, the next change decides afresh
    if deciding is None or (owner is not None and owner != deciding["metadata"]["name"]):
        return "delete" if offloading is not None else None
    if offloading is None:
        return "create"
    return "update" if offloading.get("spec") != deciding["spec"]["offloading"] else None


class NamespaceOffloadingPolicyController:
    name = "namespaceoffloadingpolicies"

    def __init__(self, client: AsyncClient, events: EventRecorder, offloadings: Informer, controller_namespace: str):
        self.client = client
        self.events = events
        self.controller_namespace = controller_namespace
        self.policies = Informer(
            client, NamespaceOffloadingPolicy, name="namespaceoffloadingpolicies", transform=as_dict
        )
        self.namespaces = Informer(client, Namespace, name="namespaces", transform=summarize_namespace)
        self.offloadings = offloadings  # the NamespaceOffloading controller's: one watch per type
        # policy -> namespace -> why the API server refused the NamespaceOffloading the policy gives it
        self.refused: dict[str, dict[str, str]] = {}
        self.queue = WorkQueue("policy-namespaces", self.reconcile, workers=4)
        self.status_queue = WorkQueue(self.name, self.report, workers=1)
        self.namespaces.on_change(enqueue(self.queue, key=lambda key: key[1]))
        self.offloadings.on_change(enqueue(self.queue, key=lambda key: key[0]))
        self.offloadings.on_change(self._requeue_makers)
        self.policies.on_change(call(self._requeue_namespaces))
        self.policies.on_change(enqueue(self.status_queue, key=lambda key: key[1]))

    def _requeue_namespaces(self) -> None:
        for _, namespace in list(self.namespaces.cache):
            self.queue.add(namespace)

    def _requeue_makers(self, event: str, key, new, old) -> None:
        for maker in {made_by(new), made_by(old)} - {None}:
            self.status_queue.add(maker)

    def tasks(self):
        return [self.policies.run(), self.namespaces.run(), self._run()]

    def deciding(self, labels: dict) -> dict | None:
        return deciding_policy(self.policies.cache.values(), labels, self.controller_namespace)

    async def _run(self):
        for informer in (self.policies, self.namespaces, self.offloadings):
            await informer.synced.wait()
        await asyncio.gather(self.queue.run(), self.status_queue.run())

    async def reconcile(self, namespace_name: str) -> float | None:
        namespace = self.namespaces.get(None, namespace_name)
        offloading = self.offloadings.get(namespace_name, OFFLOADING_NAME)
        deciding = self.deciding(namespace["labels"]) if namespace else None
        step = next_step(namespace, offloading, deciding)
        if step is None:
            return None
        if step == "delete":
            with tolerating(404):
                await self.client.delete(NamespaceOffloading, OFFLOADING_NAME, namespace=namespace_name)
            log.info("namespace no longer selected", extra=fields(namespace=namespace_name, policy=made_by(offloading)))
            return None
        policy_name = deciding["metadata"]["name"]
        body = NamespaceOffloading.from_dict(policy_offloading(deciding, namespace_name))
        try:
            if step == "create":  # never apply: that would adopt a NamespaceOffloading made meanwhile by someone else
                with tolerating(409):
                    await self.client.create(body, field_manager=FIELD_MANAGER)
            else:
                await self.client.apply(body, field_manager=FIELD_MANAGER, force=True)
        except ApiError as error:
            # A spec the NamespaceOffloading refuses (say an immutable field changed in the policy): reported on the
            # policy and retried with backoff, as the policy may change back.
            self._refused(policy_name, namespace_name, error.status.message or str(error))
            raise
        self._refused(policy_name, namespace_name, None)
        log.info(f"namespace offloading {step}d by policy", extra=fields(namespace=namespace_name, policy=policy_name))
        return None

    def _refused(self, policy_name: str, namespace_name: str, message: str | None) -> None:
        refused = self.refused.setdefault(policy_name, {})
        if refused.get(namespace_name) == message:
            return
        if message is None:
            refused.pop(namespace_name, None)
        else:
            refused[namespace_name] = message
        self.status_queue.add(policy_name)

    async def report(self, policy_name: str) -> float | None:
        policy = self.policies.get(None, policy_name)
        if policy is None:
            return None
        made = sum(1 for offloading in self.offloadings.cache.values() if made_by(offloading) == policy_name)
        status = policy.get("status") or {}
        refused = self.refused.get(policy_name) or {}
        if refused:
            first = sorted(refused)[:3]
            reason, message = (
                "OffloadingRefused",
                f"{len(refused)} namespace(s) refused: "
                + "; ".join(f"{namespace}: {refused[namespace]}" for namespace in first),
            )
        else:
            reason, message = "Applied", f"{made} namespace(s) offloaded by this policy"
        conditions = set_condition(
            status.get("conditions") or [], "Ready", "False" if refused else "True", reason, message[:1024]
        )
        if refused and not same_conditions(status.get("conditions"), conditions):
            await self.events.record(reference(policy), "Warning", reason, message[:1024])
        wanted = {"offloadedNamespaces": made, "observedGeneration": policy["metadata"].get("generation")}
        if all(status.get(k) == v for k, v in wanted.items()) and same_conditions(status.get("conditions"), conditions):
            return None
        with tolerating(404):
            await self.client.patch(
                NamespaceOffloadingPolicy.Status,
                policy_name,
                {"status": {**wanted, "conditions": conditions}},
                patch_type=PatchType.MERGE,
            )
        return None
