"""Rollouts and image pull problems (plugins/module_utils/rollout.py): the rollout module's decisions."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.rollout import (
    RolloutFailed,
    image_pull_problems,
    rollout_progress,
    wait_for_rollout,
)


def deployment(generation=2, observed=2, replicas=2, updated=2, available=2, total=2):
    return {
        "kind": "Deployment",
        "metadata": {"name": "catamaran-manager", "generation": generation},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "manager"}}},
        "status": {
            "observedGeneration": observed,
            "replicas": total,
            "updatedReplicas": updated,
            "availableReplicas": available,
        },
    }


def pod(name, reason=None, message="", deleting=False):
    state = {"waiting": {"reason": reason, "message": message}} if reason else {"running": {}}
    meta = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    status = {"containerStatuses": [{"name": "manager", "image": "registry.lab/controller:1", "state": state}]}
    return {"metadata": meta, "status": status}


def test_a_deployment_is_rolled_out_once_seen_updated_available_and_without_old_pods():
    assert rollout_progress(deployment())[0]
    assert rollout_progress(deployment(observed=1)) == (False, "its controller has not seen the new spec yet")
    assert rollout_progress(deployment(updated=1))[1] == "1 of 2 pod(s) updated, 2 available"
    assert rollout_progress(deployment(total=3))[1] == "1 old pod(s) still terminating"
    daemonset = {
        "kind": "DaemonSet",
        "metadata": {"generation": 1},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3},
    }
    assert rollout_progress(daemonset) == (False, "3 of 3 pod(s) updated, 0 available")


def test_only_containers_waiting_on_their_image_are_problems():
    pods = [
        pod("a", "ErrImagePull", "failed to pull: 401 Unauthorized"),
        pod("b", "ContainerCreating"),
        pod("c"),
        pod("d", "ImagePullBackOff", deleting=True),  # an old pod going away
    ]
    assert image_pull_problems(pods) == [
        "pod a, container manager, image registry.lab/controller:1: ErrImagePull: failed to pull: 401 Unauthorized"
    ]


class FakeCluster:
    def __init__(self, workloads, pods):
        self.workloads, self.pods, self.listed = list(workloads), pods, []

    def get(self, api_version, kind, name, namespace=None):
        return self.workloads.pop(0) if len(self.workloads) > 1 else self.workloads[0]

    def list(self, api_version, kind, namespace=None, labels=None, fields=None):
        self.listed.append(labels)
        return self.pods


def test_the_wait_fails_at_the_first_image_problem_naming_it():
    cluster = FakeCluster([deployment(updated=0, available=0)], [pod("a", "ErrImagePull", "401 Unauthorized")])
    with pytest.raises(RolloutFailed) as failed:
        wait_for_rollout(cluster, "Deployment", "catamaran-manager", "catamaran-system", 300, sleep=lambda s: None)
    assert "cannot pull their image" in str(failed.value)
    assert "401 Unauthorized" in failed.value.problems[0]
    assert cluster.listed == ["app=manager"]


def test_the_wait_ends_when_rolled_out_or_fails_at_the_timeout_with_what_is_left():
    rolling = [deployment(updated=1), deployment()]
    assert wait_for_rollout(FakeCluster(rolling, []), "Deployment", "m", "ns", 300, sleep=lambda s: None)
    ticks = iter(range(0, 1000, 100))
    with pytest.raises(RolloutFailed, match="did not roll out in 300s: 1 of 2 pod"):
        wait_for_rollout(
            FakeCluster([deployment(updated=1)], []), "Deployment", "m", "ns", 300,
            clock=lambda: next(ticks), sleep=lambda s: None,
        )  # fmt: skip


def test_the_kinds_it_waits_for_and_their_pods_have_paths():
    from ansible_collections.catamaran.federation.plugins.module_utils.kube import KINDS

    assert {("apps/v1", "Deployment"), ("apps/v1", "DaemonSet"), ("v1", "Pod")} <= set(KINDS)
