"""Removal in ordered steps (plugins/module_utils/removal.py): what the remove_objects module deletes, awaits and
refuses."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.removal import RemovalTimedOut, remove_steps

from tests.unit.collection.peering_fakes import FakeCluster

MANAGED = "app.kubernetes.io/managed-by=catamaran.federation"


def obj(api_version, kind, name, namespace=None, managed=True, deleting=False):
    metadata = {"name": name, "labels": {"app.kubernetes.io/managed-by": "catamaran.federation"} if managed else {}}
    if namespace:
        metadata["namespace"] = namespace
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def target(api_version, kind, namespace=None, name=None, label_selectors=None):
    return {
        "api_version": api_version,
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "label_selectors": label_selectors,
    }


def step(objects=(), awaited=(), propagation="Background"):
    return {"objects": list(objects), "await": list(awaited), "propagation_policy": propagation}


class ClusterWithWatches(FakeCluster):
    """Records each wait, with how many deletions came before it; a deleted Deployment's pods go too (its ReplicaSet's
    garbage collection), but for those a finalizer holds."""

    def __init__(self, label, objects=()):
        super().__init__(label, objects, crds=False)
        self.waits = []

    def delete(
        self, api_version, kind, name, namespace=None, dry_run=False, grace_period=None, propagation="Background"
    ):
        result = super().delete(api_version, kind, name, namespace, dry_run, grace_period, propagation)
        if kind == "Deployment" and not dry_run:
            for key, pod in list(self.objects.items()):
                if key[1] == "Pod" and key[2] == namespace and key[3].startswith(name + "-"):
                    if pod["metadata"].get("finalizers"):
                        pod["metadata"]["deletionTimestamp"] = "now"
                    else:
                        del self.objects[key]
        return result

    def watch_list_until(self, api_version, kind, namespace, done, timeout, labels=None, fields=None):
        self.waits.append((kind, namespace, labels, fields, len(self.deleted)))
        return super().watch_list_until(api_version, kind, namespace, done, timeout, labels, fields)


def teardown_cluster():
    return ClusterWithWatches(
        "cluster-1",
        [
            obj("apps/v1", "Deployment", "catamaran-manager", "catamaran-system"),
            obj("apps/v1", "Deployment", "someone-elses", "catamaran-system", managed=False),
            obj("v1", "Pod", "catamaran-manager-x", "catamaran-system"),
            obj("rbac.authorization.k8s.io/v1", "ClusterRole", "catamaran-manager"),
            obj("rbac.authorization.k8s.io/v1", "ClusterRole", "cluster-admin", managed=False),
            obj(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                "catamaran-pod-offloading",
                managed=False,
            ),
        ],
    )


TEARDOWN = [
    step(
        [target("apps/v1", "Deployment", "catamaran-system")],
        [target("v1", "Pod", "catamaran-system")],
    ),
    step(
        [
            target("rbac.authorization.k8s.io/v1", "ClusterRole"),
            target(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                name="catamaran-pod-offloading",
                label_selectors=[],
            ),
        ]
    ),
]

# What TEARDOWN removes from teardown_cluster(), in this order.
TEARDOWN_REMOVES = [
    "Deployment catamaran-system/catamaran-manager",
    "ClusterRole catamaran-manager",
    "MutatingWebhookConfiguration catamaran-pod-offloading",
]


def test_steps_delete_what_the_selector_or_name_matches_in_order_and_await_each_step():
    cluster = teardown_cluster()
    changes = ChangeSet(check_mode=False)

    removed = remove_steps(cluster, changes, TEARDOWN, [MANAGED], wait=True, timeout=120)

    assert removed == TEARDOWN_REMOVES
    assert cluster.deleted == [
        ("Deployment", "catamaran-manager"),
        ("ClusterRole", "catamaran-manager"),
        ("MutatingWebhookConfiguration", "catamaran-pod-offloading"),
    ]
    # Others' objects stay; the pod was only awaited (garbage collection removed it).
    assert {name for (_, _, _, name) in cluster.objects} == {"someone-elses", "cluster-admin"}
    # The first step's wait comes before the second step's deletions, and covers the awaited pods.
    assert [(kind, deleted) for kind, _, _, _, deleted in cluster.waits] == [
        ("Deployment", 1),
        ("Pod", 1),
        ("ClusterRole", 3),
        ("MutatingWebhookConfiguration", 3),
    ]
    assert cluster.waits[-1][2:4] == (None, "metadata.name=catamaran-pod-offloading")
    assert changes.changed
    assert "delete cluster-1: ClusterRole catamaran-manager" in changes.actions


def test_a_wait_that_times_out_names_what_is_left_and_starts_no_later_step():
    cluster = teardown_cluster()
    cluster.objects[("v1", "Pod", "catamaran-system", "catamaran-manager-x")]["metadata"]["finalizers"] = ["held"]

    with pytest.raises(RemovalTimedOut) as raised:
        remove_steps(cluster, ChangeSet(check_mode=False), TEARDOWN, [MANAGED], wait=True, timeout=1)

    assert raised.value.left == ["Pod catamaran-system/catamaran-manager-x"]
    assert "cluster-1: still there after the wait: Pod catamaran-system/catamaran-manager-x" in str(raised.value)
    assert cluster.deleted == [("Deployment", "catamaran-manager")]


def test_objects_already_going_are_awaited_not_deleted_again():
    cluster = teardown_cluster()
    cluster.objects[("apps/v1", "Deployment", "catamaran-system", "catamaran-manager")]["metadata"][
        "deletionTimestamp"
    ] = "earlier"
    cluster.objects.pop(("v1", "Pod", "catamaran-system", "catamaran-manager-x"))

    with pytest.raises(RemovalTimedOut):
        remove_steps(cluster, ChangeSet(check_mode=False), TEARDOWN[:1], [MANAGED], wait=True, timeout=1)

    assert cluster.deleted == []
    assert cluster.waits[0][0] == "Deployment"


def test_check_mode_deletes_as_dry_runs_and_waits_for_nothing():
    cluster = teardown_cluster()
    changes = ChangeSet(check_mode=True)

    removed = remove_steps(cluster, changes, TEARDOWN, [MANAGED], wait=True, timeout=120)

    assert removed == TEARDOWN_REMOVES
    assert cluster.deleted == []
    assert cluster.waits == []
    assert changes.changed


def test_a_step_deletes_with_its_propagation_policy():
    cluster = teardown_cluster()
    steps = [step([target("apps/v1", "Deployment", "catamaran-system")], propagation="Foreground")]

    remove_steps(cluster, ChangeSet(check_mode=False), steps, [MANAGED], wait=False, timeout=120)

    assert cluster.propagations == ["Foreground"]
    assert cluster.waits == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (target("apps/v1", "Deployment", "catamaran-system", label_selectors=[]), "names neither a name nor a label"),
        (target("apps/v1", "Deployment"), "Deployment is namespaced and names no namespace"),
        (target("rbac.authorization.k8s.io/v1", "ClusterRole", "kube-system"), "is cluster-scoped, yet names"),
        (target("example.com/v1", "Widget", "default"), "unsupported kind example.com/v1 Widget"),
    ],
)
def test_a_target_that_could_match_too_much_or_nothing_known_is_refused_before_any_deletion(bad, message):
    cluster = teardown_cluster()
    steps = [TEARDOWN[0], step([bad])]

    with pytest.raises(InvalidInput, match=message) as raised:
        remove_steps(cluster, ChangeSet(check_mode=False), steps, [MANAGED], wait=True, timeout=120)

    assert "steps[1].objects" in str(raised.value)
    assert cluster.deleted == []
