# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Idempotent apply/delete with check mode and diff, shared by every module.

Whether an apply changes anything is decided by the API server itself: a server-side dry run
of the apply is compared with the live object, so defaults and other managers' fields never
show up as false changes. In check mode only the dry run happens.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib

from ansible_collections.catamaran.federation.plugins.module_utils.kube import ClusterError, describe

VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid", "selfLink")


def comparable(obj):
    """The object without what the server changes on every write."""
    if obj is None:
        return None
    result = copy.deepcopy(obj)
    result.pop("status", None)
    metadata = result.get("metadata") or {}
    for key in VOLATILE_METADATA:
        metadata.pop(key, None)
    annotations = metadata.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        metadata.pop("annotations", None)
    return result


def redacted(obj):
    """A copy safe to print: Secret values become a short digest, never the value."""
    if obj is None or obj.get("kind") != "Secret":
        return obj
    result = copy.deepcopy(obj)
    for field in ("data", "stringData"):
        values = result.get(field)
        if values:
            result[field] = {
                key: "<redacted sha256:%s>" % hashlib.sha256(str(value).encode()).hexdigest()[:12]
                for key, value in values.items()
            }
    return result


class ChangeSet:
    """Collects what a module changed (or would change) on one or more clusters."""

    def __init__(self, check_mode):
        self.check_mode = check_mode
        self.changed = False
        self.before = {}
        self.after = {}
        self.actions = []

    def _record(self, cluster, obj_ref, action, before, after):
        key = "%s: %s" % (cluster.label, obj_ref)
        self.changed = True
        self.actions.append("%s %s" % (action, key))
        self.before[key] = redacted(comparable(before))
        self.after[key] = redacted(comparable(after))

    def apply(self, cluster, obj):
        """Make obj true on cluster; returns the live (or would-be) object."""
        metadata = obj["metadata"]
        ref = describe(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace"))
        current = cluster.get(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace"))
        try:
            planned = cluster.apply(obj, dry_run=True)
        except ClusterError as error:
            # A namespace this same run creates does not exist yet during a check-mode dry run.
            if not (self.check_mode and error.status == 404 and metadata.get("namespace")):
                raise
            planned = obj
        if comparable(current) == comparable(planned):
            return current
        result = planned if self.check_mode else cluster.apply(obj)
        self._record(cluster, ref, "update" if current else "create", current, result)
        return result

    def ensure(self, cluster, obj):
        """Create obj if it is missing and leave an existing one as it is: others own its fields (a namespace's Pod
        Security labels, set by the controller role with the same field manager, which an apply would take away)."""
        metadata = obj["metadata"]
        current = cluster.get(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace"))
        return current if current is not None else self.apply(cluster, obj)

    def delete(self, cluster, api_version, kind, name, namespace=None, grace_period=None):
        """Delete if present; returns whether it existed."""
        current = cluster.get(api_version, kind, name, namespace)
        if current is None:
            return False
        self.delete_object(cluster, api_version, kind, current, grace_period)
        return True

    def delete_object(self, cluster, api_version, kind, current, grace_period=None, propagation="Background"):
        """Delete a live object (as read or listed: list items carry no kind) unless it is already going; returns
        whether this deleted it."""
        metadata = current.get("metadata") or {}
        if metadata.get("deletionTimestamp"):
            return False  # already going; waiting is the caller's business
        name, namespace = metadata["name"], metadata.get("namespace")
        deleted = cluster.delete(
            api_version,
            kind,
            name,
            namespace,
            dry_run=self.check_mode,
            grace_period=grace_period,
            propagation=propagation,
        )
        if not deleted:
            return False  # gone since it was read
        before = dict(current, apiVersion=api_version, kind=kind)
        self._record(cluster, describe(api_version, kind, name, namespace), "delete", before, None)
        return True

    def patch(self, cluster, current, patch, subresource=None):
        """Merge-patch an object we do not own as a whole (e.g. cordon a node)."""
        metadata = current["metadata"]
        planned = cluster.merge_patch(
            current["apiVersion"], current["kind"], metadata["name"], patch, metadata.get("namespace"), dry_run=True
        )
        if comparable(planned) == comparable(current):
            return current
        result = planned
        if not self.check_mode:
            result = cluster.merge_patch(
                current["apiVersion"], current["kind"], metadata["name"], patch, metadata.get("namespace")
            )
        ref = describe(current["apiVersion"], current["kind"], metadata["name"], metadata.get("namespace"))
        self._record(cluster, ref, "patch", current, result)
        return result

    def note(self, action):
        """A change that is not one object's before/after (e.g. a forced cleanup)."""
        self.changed = True
        self.actions.append(action)

    def result(self, **extra):
        outcome = dict(changed=self.changed, actions=self.actions, **extra)
        if self.changed:
            outcome["diff"] = {"before": self.before, "after": self.after}
        return outcome
