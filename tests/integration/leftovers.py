"""What a group of tests must not leave in its lab for the next group: peerings, twins, virtual nodes, the pod
webhook, controller processes.

Groups run in whatever order the workers take them (tests/parallel.py), so a group that leaves a peering behind
(its teardown failed or timed out) would break an unrelated one later. After each group the lab is checked; what is
left is named in a warning and removed, so the next group starts from a clean lab either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from catamaran.constants import LABEL_MANAGED_BY, LABEL_TYPE, MANAGED_BY_CATAMARAN, TYPE_VIRTUAL_NODE
from catamaran_lab.lab import Lab

# Custom resources whose finalizers only a (stopped) controller would remove: stripped before the delete.
PEERING_KINDS = ("foreignclusters", "namespaceoffloadings", "twinnamespaces")
WEBHOOK = "mutatingwebhookconfiguration/catamaran-pod-offloading"
DELETE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Leftover:
    kind: str  # lower case, as kubectl takes it: foreigncluster, namespace, ...
    namespace: str | None
    name: str

    def __str__(self) -> str:
        return "/".join(filter(None, (self.kind, self.namespace, self.name)))

    def kubectl_args(self, verb: str) -> list[str]:
        return [*(["-n", self.namespace] if self.namespace else []), verb, f"{self.kind}/{self.name}"]


def _listed(lab: Lab, cluster: str, *args: str) -> list[Leftover]:
    """`kubectl get -o json`'s items; none when the kind is not served (CRDs not installed) or the object is absent."""
    result = lab.kubectl(cluster, "get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        return []
    listed = json.loads(result.stdout)
    return [
        Leftover(item["kind"].lower(), item["metadata"].get("namespace"), item["metadata"]["name"])
        for item in listed.get("items", [listed])
    ]


def in_cluster(lab: Lab, cluster: str) -> list[Leftover]:
    """What peering left in `cluster`."""
    found = [leftover for kind in PEERING_KINDS for leftover in _listed(lab, cluster, kind, "-A")]
    found += _listed(lab, cluster, "namespaces", "-l", f"{LABEL_MANAGED_BY}={MANAGED_BY_CATAMARAN}")
    found += _listed(lab, cluster, "nodes", "-l", f"{LABEL_TYPE}={TYPE_VIRTUAL_NODE}")
    found += _listed(lab, cluster, WEBHOOK)
    return found


def remove(lab: Lab, cluster: str, found: list[Leftover]) -> None:
    """Delete what in_cluster() found, finalizers first, and wait until it is gone (a namespace's pods end first)."""
    for leftover in found:
        if f"{leftover.kind}s" in PEERING_KINDS:
            patch = ["--type=merge", "-p", '{"metadata":{"finalizers":null}}']
            lab.kubectl(cluster, *leftover.kubectl_args("patch"), *patch, check=False)
    for leftover in found:
        lab.kubectl(
            cluster, *leftover.kubectl_args("delete"), "--ignore-not-found", f"--timeout={DELETE_TIMEOUT_S}s",
            check=False, timeout=DELETE_TIMEOUT_S + 30,
        )  # fmt: skip
