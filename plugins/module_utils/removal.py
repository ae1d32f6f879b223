# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Removal of objects found by name or label selector, in ordered steps, in one module run (remove_objects).

A role's teardown is a sequence: the workloads and their pods first, then the rights they ran with. Each step
deletes what it finds, then watches until what it deleted, and what it awaits (pods a deleted workload's controller
removes), is gone. A kubernetes.core task per kind and namespace did the same at about a second of CPU per kind.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.kube import KINDS, describe


class RemovalTimedOut(Exception):
    """What a step deleted or awaits is still there at the deadline."""

    def __init__(self, message, left):
        super().__init__(message)
        self.left = left


def target_spec():
    """The suboptions of one target (an entry of a step's objects or await)."""
    return dict(
        api_version=dict(type="str", required=True),
        kind=dict(type="str", required=True),
        namespace=dict(type="str"),
        name=dict(type="str"),
        label_selectors=dict(type="list", elements="str"),
    )


def targets(entries, default_selectors, what):
    """Each entry as (api_version, kind, namespace, name, selector string); refuses what would match too much."""
    result = []
    for entry in entries or []:
        key = (entry["api_version"], entry["kind"])
        if key not in KINDS:
            raise InvalidInput("%s: unsupported kind %s %s" % (what, entry["api_version"], entry["kind"]))
        namespaced = KINDS[key][1]
        namespace = entry.get("namespace") or None
        if namespaced and not namespace:
            raise InvalidInput("%s: %s is namespaced and names no namespace" % (what, entry["kind"]))
        if not namespaced and namespace:
            raise InvalidInput("%s: %s is cluster-scoped, yet names namespace %r" % (what, entry["kind"], namespace))
        selectors = entry.get("label_selectors")
        selector = ",".join(default_selectors if selectors is None else selectors)
        if not entry.get("name") and not selector:
            # A kind's every object in a namespace (or cluster-wide) is never what a teardown means.
            raise InvalidInput("%s: %s names neither a name nor a label selector" % (what, entry["kind"]))
        result.append((entry["api_version"], entry["kind"], namespace, entry.get("name") or None, selector))
    return result


def find(cluster, target):
    """The live objects a target matches: by name (and selector, when both are given) or by selector."""
    api_version, kind, namespace, name, selector = target
    fields = "metadata.name=" + name if name else None
    return cluster.list(api_version, kind, namespace, labels=selector or None, fields=fields)


def remove_steps(cluster, changes, steps, default_selectors, wait, timeout, clock=time.monotonic):
    """Run the steps in order on one cluster; returns the references of what was deleted (or would be, in check
    mode). Without waiting (or in check mode, whose deletions are dry runs), a step only deletes."""
    plan = [
        (
            targets(step.get("objects"), default_selectors, "steps[%d].objects" % index),
            targets(step.get("await"), default_selectors, "steps[%d].await" % index),
            step.get("propagation_policy") or "Background",
        )
        for index, step in enumerate(steps)
    ]
    removed = []
    for deleted, awaited, propagation in plan:
        gone_after = []
        for target in deleted:
            found = find(cluster, target)
            for obj in found:
                metadata = obj["metadata"]
                if changes.delete_object(cluster, target[0], target[1], obj, propagation=propagation):
                    removed.append(describe(target[0], target[1], metadata["name"], metadata.get("namespace")))
            if found:
                gone_after.append(target)
        if wait and not changes.check_mode:
            await_gone(cluster, gone_after + awaited, clock() + timeout, clock)
    return removed


def await_gone(cluster, targets_left, deadline, clock):
    """Watch each target until it matches nothing; one deadline for the whole step."""
    for target in targets_left:
        api_version, kind, namespace, name, selector = target
        finished, items = cluster.watch_list_until(
            api_version,
            kind,
            namespace,
            lambda items: not items,
            max(1, deadline - clock()),
            labels=selector or None,
            fields="metadata.name=" + name if name else None,
        )
        if not finished:
            left = sorted(
                describe(api_version, kind, item["metadata"]["name"], item["metadata"].get("namespace"))
                for item in items
            )
            raise RemovalTimedOut("%s: still there after the wait: %s" % (cluster.label, ", ".join(left)), left)
