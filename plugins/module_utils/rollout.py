# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A Deployment's or DaemonSet's rollout, and the image pull problems of its pods (the rollout module)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

# A container waiting for one of these will not start by waiting longer: a wrong image, tag or credential.
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
MESSAGE_LIMIT = 300


def rollout_progress(workload):
    """(done, what is left) of a Deployment or DaemonSet as its controller reports it."""
    meta, spec, status = workload["metadata"], workload.get("spec") or {}, workload.get("status") or {}
    if (status.get("observedGeneration") or 0) < (meta.get("generation") or 0):
        return False, "its controller has not seen the new spec yet"
    if workload["kind"] == "DaemonSet":
        wanted = status.get("desiredNumberScheduled") or 0
        updated, available = status.get("updatedNumberScheduled") or 0, status.get("numberAvailable") or 0
    else:
        wanted = spec.get("replicas", 1)
        updated, available = status.get("updatedReplicas") or 0, status.get("availableReplicas") or 0
        # Old replicas still running after the new ones are available: the rollout is not over.
        if (status.get("replicas") or 0) > wanted:
            return False, "%d old pod(s) still terminating" % (status["replicas"] - wanted)
    if updated < wanted or available < wanted:
        return False, "%d of %d pod(s) updated, %d available" % (updated, wanted, available)
    return True, "%d pod(s) updated and available" % wanted


def image_pull_problems(pods):
    """Each container of these pods that waits on its image, as "pod P, container C, image I: REASON: message"."""
    found = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_PULL_REASONS:
                message = (waiting.get("message") or "")[:MESSAGE_LIMIT]
                found.append(
                    "pod %s, container %s, image %s: %s: %s"
                    % (
                        pod["metadata"]["name"],
                        container.get("name"),
                        container.get("image"),
                        waiting["reason"],
                        message,
                    )
                )
    return found


def selector_labels(workload):
    """The workload's matchLabels as a label selector string (the role's workloads select by labels only)."""
    labels = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join("%s=%s" % (key, value) for key, value in sorted(labels.items()))


class RolloutFailed(Exception):
    def __init__(self, message, problems=None):
        super().__init__(message)
        self.problems = problems or []


def wait_for_rollout(cluster, kind, name, namespace, timeout, interval=2.0, clock=time.monotonic, sleep=time.sleep):
    """Until the workload has rolled out; RolloutFailed as soon as one of its pods waits on its image, or at the
    timeout with what is left. Returns the workload as last read."""
    deadline = clock() + timeout
    while True:
        workload = cluster.get("apps/v1", kind, name, namespace)
        if workload is None:
            raise RolloutFailed("%s %s/%s does not exist" % (kind, namespace, name))
        done, left = rollout_progress(workload)
        if done:
            return workload
        pods = cluster.list("v1", "Pod", namespace=namespace, labels=selector_labels(workload))
        problems = image_pull_problems(pods)
        if problems:
            what = "%s %s/%s cannot start: its pods cannot pull their image: " % (kind, namespace, name)
            raise RolloutFailed(what + "; ".join(problems), problems)
        if clock() >= deadline:
            raise RolloutFailed("%s %s/%s did not roll out in %ss: %s" % (kind, namespace, name, timeout, left))
        sleep(interval)
