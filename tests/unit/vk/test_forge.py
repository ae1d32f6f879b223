"""Forging a ShadowPod from a local pod (vk/forge.py): what is dropped, the token volume, API server access,
changes sent to a running pod, and which pods are offloaded at all.
"""

from __future__ import annotations

import pytest

from catamaran import objects
from catamaran.provider.shadowpods import pod_from_shadow
from catamaran.vk import forge
from tests.unit.consumer_pods import local_pod
from tests.unit.vk.offloading_scope import NOW


def test_with_a_token_secret_the_token_volume_reads_the_consumers_token_ca_and_namespace():
    shadow = forge.shadowpod_for(
        local_pod(), twin_namespace="shop-c", consumer_id="c", provider_id="p", token_secret="catamaran-token.sa.web"
    )
    spec = shadow["spec"]["pod"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["containers"][0]["volumeMounts"][0] == {"name": "kube-api-access-abc", "mountPath": "/var/run"}
    volume = spec["volumes"][0]
    assert volume["projected"]["defaultMode"] == 420
    assert volume["projected"]["sources"] == [
        {
            "secret": {
                "name": "catamaran-token.sa.web",
                "items": [{"key": "token.3607s", "path": "token"}],
            }
        },
        {"configMap": {"name": "catamaran-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"secret": {"name": "catamaran-token.sa.web", "items": [{"key": "namespace", "path": "namespace"}]}},
    ]
    assert forge.token_requests(local_pod()["spec"]) == [(None, 3607)]


def test_pods_of_one_account_read_one_key_per_audience_and_lifetime_whatever_their_volumes_are_called():
    """The key of a token depends on what it is (audience, lifetime), not on the pod's volume names, which the
    API server generates per pod: so all the account's pods read one Secret."""
    first, second = local_pod(), local_pod()
    second["spec"]["volumes"][0] = {**second["spec"]["volumes"][0], "name": "kube-api-access-xyz"}
    vault = {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 600, "path": "vault-token"}}
    second["spec"]["volumes"].append({"name": "vault", "projected": {"sources": [vault]}})
    assert forge.token_requests(second["spec"]) == [(None, 3607), ("vault", 600)]

    def keys(pod: dict) -> list[str]:
        spec = forge.shadowpod_for(
            pod, twin_namespace="shop-c", consumer_id="c", provider_id="p", token_secret="catamaran-token.sa.web"
        )["spec"]["pod"]["spec"]
        projected = [volume["projected"] for volume in spec["volumes"] if "projected" in volume]
        sources = [source for volume in projected for source in volume["sources"]]
        return [item["key"] for source in sources for item in (source.get("secret") or {}).get("items", [])]

    vault_key = forge.token_key("vault", 600)
    assert keys(first) == ["token.3607s", "namespace"]
    assert keys(second) == ["token.3607s", "namespace", vault_key]
    assert vault_key.startswith("token.600s.")
    assert vault_key != forge.token_key("vault-2", 600)
    # The per-pod Secrets of earlier releases named keys after the volume; their ShadowPods still read them.
    assert forge.volume_token_key("kube-api-access-abc", 0) == "kube-api-access-abc.token-0"


HOME = ("203.0.113.10", 6443)


def forged(annotation: str | None = None, token_secret: str | None = "catamaran-token.sa.web", **container) -> dict:
    pod = local_pod()
    pod["spec"]["containers"][0].update(container)
    if annotation is not None:
        pod["metadata"]["annotations"]["catamaran.io/api-server-access"] = annotation
    shadow = forge.shadowpod_for(
        pod, twin_namespace="shop-c", consumer_id="c", provider_id="p", token_secret=token_secret, home_api_server=HOME
    )
    return shadow["spec"]["pod"]["spec"]


def env_of(spec: dict) -> dict:
    return {variable["name"]: variable["value"] for variable in spec["containers"][0].get("env") or []}


def test_home_access_points_in_cluster_clients_at_the_consumers_api_server():
    spec = forged()
    env = env_of(spec)
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("203.0.113.10", "6443")
    assert env["KUBERNETES_PORT_443_TCP"] == "tcp://203.0.113.10:6443"
    assert spec["volumes"][0]["projected"]["sources"][0]["secret"]["name"] == "catamaran-token.sa.web"
    assert spec["automountServiceAccountToken"] is False
    # A variable the container sets itself wins.
    own = env_of(forged(env=[{"name": "KUBERNETES_SERVICE_HOST", "value": "mine"}]))
    assert own["KUBERNETES_SERVICE_HOST"] == "mine"
    assert own["KUBERNETES_SERVICE_PORT"] == "6443"


@pytest.mark.parametrize(("access", "automount"), [("provider", True), ("disabled", False)])
def test_provider_and_disabled_access_carry_no_consumer_token_and_no_home_address(access, automount):
    spec = forged(access)
    assert env_of(spec) == {}
    assert "volumes" in spec
    assert [v["name"] for v in spec["volumes"]] == ["data"]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data"}]
    assert spec["automountServiceAccountToken"] is automount


def test_an_unknown_access_keeps_the_pod_from_being_offloaded():
    pod = local_pod()
    pod["metadata"]["annotations"]["catamaran.io/api-server-access"] = "everywhere"
    offloading = {"metadata": {}, "spec": {}}
    reason, message = forge.offload_refusal(pod, offloading, {}, "catamaran-p", "p")
    assert reason == "InvalidAPIServerAccess"
    assert "'everywhere' is none of home, provider, disabled" in message


def test_forged_spec_drops_everything_local():
    shadow = forge.shadowpod_for(local_pod(), twin_namespace="shop-c", consumer_id="c", provider_id="p")
    spec = shadow["spec"]["pod"]["spec"]
    for field in ("nodeName", "nodeSelector", "affinity", "serviceAccountName", "priorityClassName", "priority"):
        assert field not in spec
    assert spec["hostNetwork"] is False
    assert spec["automountServiceAccountToken"] is False
    assert [t["key"] for t in spec["tolerations"]] == ["node.kubernetes.io/not-ready"]
    assert spec["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data"}]
    assert shadow["metadata"] == {
        "name": "web-1",
        "namespace": "shop-c",
        "labels": {
            "app": "web",
            "catamaran.io/origin-cluster-id": "c",
            "catamaran.io/destination-cluster-id": "p",
            "catamaran.io/managed-by": "catamaran",
        },
        "annotations": {
            "catamaran.io/local-pod-uid": "u-1",
            "catamaran.io/local-namespace": "shop",
            "catamaran.io/status-source": "pod",
        },
    }
    assert "kubectl.kubernetes.io/last-applied-configuration" not in shadow["spec"]["pod"]["metadata"]["annotations"]


def test_forging_leaves_the_local_pod_untouched():
    pod = local_pod()
    forge.shadowpod_for(pod, twin_namespace="t", consumer_id="c", provider_id="p")
    assert pod["spec"]["nodeName"] == "catamaran-p"
    assert len(pod["spec"]["volumes"]) == 2


def test_kubectl_debugs_containers_are_sent_once_and_never_at_creation():
    debugger = {"name": "debugger-x", "image": "busybox", "targetContainerName": "app"}
    pod = local_pod(ephemeralContainers=[debugger])
    shadow = forge.shadowpod_for(pod, twin_namespace="shop-c", consumer_id="c", provider_id="p")
    assert "ephemeralContainers" not in shadow["spec"]["pod"]["spec"]  # the API refuses them on create
    assert forge.missing_ephemeral_containers(pod, {"ephemeralContainers": []}) == [debugger]
    assert forge.missing_ephemeral_containers(pod, {"ephemeralContainers": ["debugger-x"]}) is None
    # The provider creates the pod without them and adds them through the subresource.
    shadow["spec"]["pod"]["spec"]["ephemeralContainers"] = [debugger]
    shadow["metadata"]["uid"] = "s-1"
    shadow["apiVersion"] = "offloading.catamaran.io/v1alpha1"
    assert "ephemeralContainers" not in pod_from_shadow(shadow)["spec"]


def test_variables_from_the_pods_namespace_and_uid_keep_the_local_pods_values():
    from_field = [
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "UID", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}}},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    pod = local_pod()
    spec = forged(env=from_field)
    env = {variable["name"]: variable for variable in spec["containers"][0]["env"]}
    assert env["NS"] == {"name": "NS", "value": pod["metadata"]["namespace"]}  # not the twin's
    assert env["UID"] == {"name": "UID", "value": pod["metadata"]["uid"]}
    assert env["NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the same on both sides


def test_label_annotation_and_deadline_changes_of_a_running_pod_reach_its_shadowpod():
    pod = local_pod()
    shadow = forge.shadowpod_for(pod, twin_namespace="shop-c", consumer_id="c", provider_id="p")
    sent = {"changeable": objects.changeable_pod_fields(shadow["spec"]["pod"])}
    assert forge.changed_template(pod, sent, "c", "p") is None
    pod["metadata"]["labels"] = {"tier": "web"}  # "app" removed, "tier" added
    pod["spec"]["activeDeadlineSeconds"] = 5
    patch = forge.changed_template(pod, sent, "c", "p")
    labels = patch["spec"]["pod"]["metadata"]["labels"]
    assert (labels["app"], labels["tier"], labels["catamaran.io/origin-cluster-id"]) == (None, "web", "c")
    assert patch["spec"]["pod"]["metadata"]["annotations"] == {"team": "a"}  # kubectl's own is never sent
    assert patch["spec"]["pod"]["spec"] == {"activeDeadlineSeconds": 5}


def test_a_resize_of_a_running_pod_reaches_its_shadowpod_container_by_container():
    pod = local_pod()
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "i", "resources": {"requests": {"cpu": "10m"}}},  # runs once: never resized
        {"name": "proxy", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "10m"}}},
    ]
    shadow = forge.shadowpod_for(pod, twin_namespace="shop-c", consumer_id="c", provider_id="p")
    sent = {"resources": objects.container_resources(shadow["spec"]["pod"]["spec"])}
    assert set(sent["resources"]) == {"app", "proxy"}
    assert forge.resized_containers(pod, sent) is None
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "300m"}}
    pod["spec"]["initContainers"][1]["resources"] = {"requests": {"cpu": "20m"}}
    assert forge.resized_containers(pod, sent) == [
        {"op": "test", "path": "/spec/pod/spec/containers/0/name", "value": "app"},
        {"op": "replace", "path": "/spec/pod/spec/containers/0/resources", "value": {"requests": {"cpu": "300m"}}},
        {"op": "test", "path": "/spec/pod/spec/initContainers/1/name", "value": "proxy"},
        {"op": "replace", "path": "/spec/pod/spec/initContainers/1/resources", "value": {"requests": {"cpu": "20m"}}},
    ]


NODE = "catamaran-cluster-2"
LABELS = {"catamaran.io/type": "virtual-node", "topology.kubernetes.io/region": "region-b"}


def pod(namespace: str = "apps", owner: str | None = None) -> dict:
    meta = {"name": "p", "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {}}


def offloading(selector: dict | None = None, deleting: bool = False) -> dict:
    meta = {"name": "offloading", "namespace": "apps"}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"clusterSelector": selector} if selector else {}}


def region(value: str) -> dict:
    expression = {"key": "topology.kubernetes.io/region", "operator": "In", "values": [value]}
    return {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}


def refusal(pod_: dict, offloading_: dict | None):
    return forge.offload_refusal(pod_, offloading_, LABELS, NODE, "cluster-2")


def test_a_namespace_is_offloaded_only_by_a_selecting_offloading():
    assert refusal(pod(), offloading()) is None
    assert refusal(pod(), offloading(region("region-b"))) is None
    assert forge.offloading_selects(offloading(), LABELS, NODE)
    assert not forge.offloading_selects(None, LABELS, NODE)
    assert not forge.offloading_selects(offloading(deleting=True), LABELS, NODE)
    assert not forge.offloading_selects(offloading(region("region-a")), LABELS, NODE)


def test_a_namespace_without_offloading_says_how_to_offload_it():
    reason, message = refusal(pod("kube-system"), None)
    assert reason == "OffloadingBackOff"
    assert "namespace kube-system is not offloaded" in message
    assert "NamespaceOffloading named 'offloading' in namespace kube-system" in message
    assert "cluster-2" in message
    assert NODE in message


def test_an_offloading_that_does_not_select_this_cluster_or_is_leaving_is_named():
    reason, message = refusal(pod(), offloading(region("region-a")))
    assert reason == "OffloadingBackOff"
    assert "clusterSelector" in message
    assert "does not select" in message
    assert "cluster-2" in message
    reason, message = refusal(pod(), offloading(deleting=True))
    assert reason == "OffloadingBackOff"
    assert "being deleted" in message


@pytest.mark.parametrize("offloading_", [None, offloading()])
def test_daemonset_pods_are_never_offloaded_whatever_their_namespace(offloading_):
    reason, message = refusal(pod(owner="DaemonSet"), offloading_)
    assert reason == "DaemonSetNotOffloaded"
    assert "DaemonSet pods are never offloaded" in message
    assert "catamaran.io/type NotIn" in message
    assert refusal(pod(owner="ReplicaSet"), offloading()) is None
