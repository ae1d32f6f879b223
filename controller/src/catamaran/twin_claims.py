"""Who a twin namespace belongs to: one origin namespace of the consumer, never two. Pure.

A consumer's twins on a provider are its TwinNamespaces there, each named like its twin and recording the
consumer namespace it extends (`spec.originNamespace`, immutable). Several namespaces may ask for one remote name:
SelectedName naming another namespace's twin, EnforceSameName in a namespace named like one (`shop-c1`), a policy
doing either. Only one may have it: a twin shared by two namespaces hands each the other's pods, Secrets, tokens
and kubelet API.

The rule, the same in the virtual kubelets and the consumer's manager:
- the namespace whose TwinNamespace holds the name keeps it (the first to hold it);
- while none holds it, the claimant with the oldest NamespaceOffloading (creationTimestamp, then the namespace's
  name) may take it, so claims made at the same time end alike on every provider;
- every other claimant is refused, on its own NamespaceOffloading (never the holder's), and stays refused until the
  holder lets the name go. The refusal does not name the holder: that namespace is none of the claimant's business.
"""

from __future__ import annotations

from collections.abc import Iterable

from .steering import OFFLOADING_NAME, remote_namespace_name

# The reason of a refused claim: per-cluster entries, the aggregated phase's condition, Events, held pods.
TWIN_TAKEN = "TwinNamespaceTaken"


def claim_order(namespace: str, offloading: dict) -> tuple[str, str]:
    """Older NamespaceOffloadings first; the namespace's name breaks ties (timestamps have whole seconds)."""
    return (offloading["metadata"].get("creationTimestamp") or "", namespace)


def claimants(remote: str, offloadings: Iterable[tuple[str, dict]], consumer_id: str) -> list[str]:
    """The namespaces whose live NamespaceOffloading maps to `remote`, in claim order. `offloadings` holds
    (namespace, NamespaceOffloading) pairs."""
    live = [
        (namespace, offloading)
        for namespace, offloading in offloadings
        if offloading["metadata"].get("name", OFFLOADING_NAME) == OFFLOADING_NAME
        and not offloading["metadata"].get("deletionTimestamp")
        and remote_namespace_name(namespace, offloading.get("spec") or {}, consumer_id) == remote
    ]
    return [namespace for namespace, offloading in sorted(live, key=lambda pair: claim_order(*pair))]


def twin_holder(
    remote: str, twin_origin: str | None, offloadings: Iterable[tuple[str, dict]], consumer_id: str
) -> str | None:
    """The namespace `remote` belongs to: the origin of the TwinNamespace holding it (`twin_origin`, None when none
    does, or where no TwinNamespace is known), else its first claimant; None when nobody claims it."""
    if twin_origin:
        return twin_origin
    return next(iter(claimants(remote, offloadings, consumer_id)), None)


def claim_refusal(namespace: str, remote: str, holder: str | None) -> str | None:
    """Why `namespace` may not have the twin `remote` (its holder being `holder`), or None when it may."""
    if holder is None or holder == namespace:
        return None
    return (
        f"twin namespace {remote} already belongs to another namespace of this cluster, and a twin extends only one"
        " namespace; choose another remoteNamespaceName, or the DefaultName strategy"
    )


class RemoteNames:
    """Which namespaces' NamespaceOffloadings map to each remote name, kept up to date from an informer's changes,
    so a claim is decided without a walk over every offloading of the cluster."""

    def __init__(self, consumer_id: str):
        self.consumer_id = consumer_id
        self._remote_of: dict[str, str] = {}  # namespace -> the remote name its offloading maps to
        self._namespaces_of: dict[str, set[str]] = {}  # remote name -> those namespaces

    def changed(self, namespace: str, offloading: dict | None) -> set[str]:
        """Record a namespace's offloading (None: gone); returns the remote names whose claimants changed."""
        before = self._remote_of.pop(namespace, None)
        if before is not None:
            self._namespaces_of[before].discard(namespace)
            if not self._namespaces_of[before]:
                del self._namespaces_of[before]
        after = None
        if offloading is not None:
            after = remote_namespace_name(namespace, offloading.get("spec") or {}, self.consumer_id)
            self._remote_of[namespace] = after
            self._namespaces_of.setdefault(after, set()).add(namespace)
        return {name for name in (before, after) if name is not None}

    def namespaces(self, remote: str) -> set[str]:
        """The namespaces whose offloading maps to `remote`, live or being deleted."""
        return set(self._namespaces_of.get(remote, ()))
