"""Namespaces, policies and pods the namespace offloading tests share: regions, teams, labels."""

from __future__ import annotations

from catamaran import steering

REGION = "topology.kubernetes.io/region"
IN_B = {"nodeSelectorTerms": [{"matchExpressions": [{"key": REGION, "operator": "In", "values": ["region-b"]}]}]}


def pod(affinity=None, owner=None, tolerations=None):
    meta = {"name": "p", "namespace": "shop"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o"}]
    spec = {"containers": [{"name": "c", "image": "i"}]}
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": meta, "spec": spec}


def policy(name: str, selector: dict, **offloading) -> dict:
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloadingPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"namespaceSelector": selector, "offloading": {"podOffloadingStrategy": "Remote", **offloading}},
    }


TEAM_A = policy("team-a", {"matchLabels": {"team": "a"}})
ANY_TEAM = policy(
    "any-team", {"matchExpressions": [{"key": "team", "operator": "Exists"}]}, podOffloadingStrategy="Local"
)


def labels(name: str, **more) -> dict:
    return {steering.NAMESPACE_NAME_LABEL: name, **more}
