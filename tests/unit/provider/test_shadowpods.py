"""The provider's pods from ShadowPods (provider/shadowpods.py): ownership, placement, create errors, labels,
and pods of other namespaces. ShadowPodController.reconcile against an in-memory cluster:
test_shadowpods_reconciler.py.
"""

from __future__ import annotations

import pytest
from lightkube.core.exceptions import ApiError

from catamaran.provider.offers import Placement, TenantTerms
from catamaran.provider.shadowpods import classify_create_error, pod_from_shadow
from catamaran.vk import forge
from tests.unit.consumer_pods import local_pod
from tests.unit.provider.placements import placement
from tests.unit.provider.pod_specs import compliant_spec
from tests.unit.twin_cases import TWIN, twin_namespace


def test_remote_pod_is_owned_by_its_shadowpod():
    shadow = forge.shadowpod_for(local_pod(), twin_namespace="shop-c", consumer_id="c", provider_id="p")
    shadow["apiVersion"] = "offloading.catamaran.io/v1alpha1"
    shadow["metadata"]["uid"] = "s-1"
    pod = pod_from_shadow(shadow)
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ShadowPod", "s-1", True)
    assert pod["metadata"]["name"] == "web-1"


def test_placement_is_added_to_the_remote_pod_and_wins_over_the_pods_own_selector():
    shadow = forge.shadowpod_for(local_pod(), twin_namespace="shop-c", consumer_id="c", provider_id="p")
    shadow["apiVersion"] = "offloading.catamaran.io/v1alpha1"
    shadow["metadata"]["uid"] = "s-1"
    shadow["spec"]["pod"]["spec"]["nodeSelector"] = {"catamaran.io/lab-node-kind": "fake", "disk": "ssd"}
    toleration = {"key": "k", "operator": "Exists", "effect": "NoSchedule"}
    pod = pod_from_shadow(shadow, placement({"catamaran.io/lab-node-kind": "real"}, [toleration]))
    assert pod["spec"]["nodeSelector"] == {"catamaran.io/lab-node-kind": "real", "disk": "ssd"}
    assert toleration in pod["spec"]["tolerations"]
    assert pod_from_shadow(shadow, placement({}, [toleration]))["spec"]["tolerations"].count(toleration) == 1
    assert pod_from_shadow(shadow)["spec"] == shadow["spec"]["pod"]["spec"]


def api_error(code: int, message: str) -> ApiError:
    class Response:
        status_code = code

        def json(self):
            return {"kind": "Status", "code": code, "message": message, "status": "Failure"}

    return ApiError(response=Response())


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (403, 'pods "x" is forbidden: exceeded quota: tight, requested: pods=1', "QuotaExceeded"),
        (404, 'namespaces "gone" not found', "NamespaceMissing"),
        (400, 'admission webhook "deny.example" denied the request', "AdmissionRejected"),
        (403, "violates PodSecurity restricted", "AdmissionRejected"),
        (500, "etcd timeout", "CreateFailed"),
    ],
)
def test_create_errors_are_classified(code, message, reason):
    assert classify_create_error(api_error(code, message))[0] == reason


def test_the_provider_brings_a_running_pod_to_its_shadowpods_labels_keeping_what_it_added_itself():
    from catamaran.provider.shadowpods import changes_for

    running = {
        "changeable": {
            "labels": {"app": "web", "old": "x"},
            "annotations": {"provider.example/scanned": "yes"},
            "activeDeadlineSeconds": None,
        }
    }
    wanted = {"metadata": {"labels": {"app": "web", "new": "y"}, "annotations": {"a": "1"}}, "spec": {}}
    # "old" stays: it may be the provider's own (a mesh's admission labels pods), as its annotation does.
    assert changes_for(running, wanted) == {"metadata": {"labels": {"new": "y"}, "annotations": {"a": "1"}}}
    running["changeable"]["labels"] = {"app": "web", "old": "x", "new": "y"}
    running["changeable"]["annotations"]["a"] = "1"
    assert changes_for(running, wanted) is None


def test_the_manager_says_whose_pod_it_is_not_the_shadowpod():
    shadow = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "metadata": {"name": "p", "namespace": "ns-c", "uid": "u"},
        "spec": {"pod": {"metadata": {"labels": {"app": "x", "catamaran.io/origin-cluster-id": "someone-else"}}}},
    }
    shadow["spec"]["pod"]["spec"] = compliant_spec()
    labels = pod_from_shadow(shadow, Placement(), "c")["metadata"]["labels"]
    assert labels == {"app": "x", "catamaran.io/origin-cluster-id": "c", "catamaran.io/managed-by": "catamaran"}


def test_a_shadowpods_recreations_annotation_never_reaches_its_pod_even_where_the_terms_allow_it():
    """The count is the manager's to stamp (it grows the local pod's restart count): neither a made pod nor a running
    pod's update (changes_for reads the same pod) takes a tenant's value."""
    shadow = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "metadata": {"name": "p", "namespace": "ns-c", "uid": "u"},
        "spec": {"pod": {"metadata": {"annotations": {"catamaran.io/recreations": "7", "catamaran.io/keep": "y"}}}},
    }
    shadow["spec"]["pod"]["spec"] = compliant_spec()
    terms = TenantTerms(allowed_pod_annotations=("catamaran.io/*",))
    annotations = pod_from_shadow(shadow, Placement(), "c", terms)["metadata"]["annotations"]
    assert annotations == {"catamaran.io/keep": "y"}


def test_the_provider_runs_no_pod_of_another_namespace_in_a_twin():
    from catamaran.provider.shadowpods import foreign_namespace

    def shadow(local: str | None) -> dict:
        annotations = {"catamaran.io/local-namespace": local} if local else {}
        return {"metadata": {"name": "web", "namespace": TWIN, "annotations": annotations}}

    recorded = twin_namespace("victim")["metadata"]["annotations"]
    assert foreign_namespace(shadow("victim"), recorded) is None
    assert foreign_namespace(shadow(None), recorded) is None
    assert foreign_namespace(shadow("evil"), {}) is None  # a twin made before origins were recorded
    refusal = foreign_namespace(shadow("evil"), recorded)
    assert refusal is not None
    assert "victim" not in refusal.replace(TWIN, "")
