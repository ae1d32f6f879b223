"""What a group of tests must not leave in its lab for the next group: peerings, twins, virtual nodes, the pod
webhook, controller processes.

Groups run in whatever order the workers take them (tests/parallel.py), so a group that leaves a peering behind
(its teardown failed or timed out) would break an unrelated one later. After each group the lab is checked; what is
left is named in a warning and removed, so the next group starts from a clean lab either way.
"""

from __future__ import annotations

import json

from catamaran.constants import LABEL_MANAGED_BY, LABEL_TYPE, TYPE_VIRTUAL_NODE
from catamaran_lab.lab import Lab

# Custom resources whose finalizers only a (stopped) controller would remove: stripped before the delete.
PEERING_KINDS = ("foreignclusters", "namespaceoffloadings", "twinnamespaces")
WEBHOOK = "mutatingwebhookconfiguration/catamaran-pod-offloading"
DELETE_TIMEOUT_S = 60


def _names(lab: Lab, cluster: str, *args: str) -> list[str]:
    """`kubectl get -o json` items as kind/namespace/name; none when the kind is not served (CRDs not installed)."""
    result = lab.kubectl(cluster, "get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        return []
    found = []
    listed = json.loads(result.stdout)
    for item in listed.get("items", [listed]):
        meta = item["metadata"]
        found.append("/".join(filter(None, (item["kind"].lower(), meta.get("namespace"), meta["name"]))))
    return found


def in_cluster(lab: Lab, cluster: str) -> list[str]:
    """What peering left in `cluster`, as kind/[namespace/]name."""
    found = [name for kind in PEERING_KINDS for name in _names(lab, cluster, kind, "-A")]
    found += _names(lab, cluster, "namespaces", "-l", f"{LABEL_MANAGED_BY}=catamaran")
    found += _names(lab, cluster, "nodes", "-l", f"{LABEL_TYPE}={TYPE_VIRTUAL_NODE}")
    found += _names(lab, cluster, WEBHOOK)
    return found


def remove(lab: Lab, cluster: str, names: list[str]) -> None:
    """Delete what in_cluster() found, finalizers first, and wait until it is gone (a namespace's pods end first)."""
    for name in names:
        kind, *rest = name.split("/")
        namespace_args = ["-n", rest[0]] if len(rest) == 2 else []
        if f"{kind}s" in PEERING_KINDS:
            lab.kubectl(
                cluster, *namespace_args, "patch", f"{kind}/{rest[-1]}", "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False,
            )  # fmt: skip
    for name in names:
        kind, *rest = name.split("/")
        namespace_args = ["-n", rest[0]] if len(rest) == 2 else []
        lab.kubectl(
            cluster, *namespace_args, "delete", f"{kind}/{rest[-1]}", "--ignore-not-found",
            f"--timeout={DELETE_TIMEOUT_S}s", check=False, timeout=DELETE_TIMEOUT_S + 30,
        )  # fmt: skip
