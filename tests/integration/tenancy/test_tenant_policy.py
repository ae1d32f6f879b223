"""The provider's tenant boundary: Pod Security level, least-privilege credential and quota, consumer cluster-1,
provider cluster-2.

The tenant's terms are the spec of its ResourceOffer on the provider, written here as the peering module's
provider side would. A pod the terms refuse never becomes a Pod on the provider; the refusal shows on the
ShadowPod and, through the virtual kubelet, on the local pod. The tests run in file order, on the package's
peering (conftest.py), in namespace `guarded`; the terms they change are put back.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from catamaran import quantities
from catamaran.constants import (
    RESOURCE_OFFER_NAME,
    TENANT_CREDENTIAL_SECRET,
    TENANT_TOKEN_BINDING_SECRET,
    tenant_namespace,
    virtual_node_name,
)

from .. import federation
from ..lab_access import get_json, wait_for
from ..manifests import container
from . import CONSUMER, PROVIDER

pytestmark = pytest.mark.integration

NODE = virtual_node_name(PROVIDER)
NAMESPACE = "guarded"
TWIN = f"{NAMESPACE}-{CONSUMER}"
TENANT = tenant_namespace(CONSUMER)
REMOTE_CONDITION = "catamaran.io/RemotePodCreated"
TO_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
    "terminationGracePeriodSeconds": 0,
}


@pytest.fixture(scope="module")
def fed(lab, peering):
    with federation.offloaded(lab, CONSUMER, PROVIDER, NAMESPACE):
        yield


def set_terms(lab, **terms) -> None:
    """The tenant's terms in its ResourceOffer spec, as the provider's side of the peering writes them."""
    offer = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "ResourceOffer",
        "metadata": {"name": RESOURCE_OFFER_NAME, "namespace": TENANT},
        "spec": {"clusterID": PROVIDER, **terms},
    }
    lab.kubectl(PROVIDER, "apply", "--server-side", "--field-manager=tests", "-f", "-", input=json.dumps(offer))


def offer_status(lab) -> dict:
    return get_json(lab, PROVIDER, "resourceoffer", "-n", TENANT, RESOURCE_OFFER_NAME).get("status") or {}


def twin_labels(lab) -> dict:
    return get_json(lab, PROVIDER, "namespace", TWIN)["metadata"].get("labels") or {}


def offloaded_pod(name: str, cpu: str | None = None, **changes) -> dict:
    """A restricted-compliant pod for the virtual node, with `changes` merged into its container."""
    app = container("app", cpu=cpu)
    for key, value in changes.pop("container", {}).items():
        app[key] = {**app[key], **value} if isinstance(value, dict) and key in app else value
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "policy"}},
        "spec": {**TO_VIRTUAL_NODE, "containers": [app], **changes},
    }


def create(lab, *pods: dict) -> None:
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=federation.as_list(list(pods)))


def local_pod(lab, name: str) -> dict:
    return get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, name)


def remote_condition(pod: dict) -> dict | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == REMOTE_CONDITION), None)


def refused_with(lab, name: str, reason: str):
    condition = remote_condition(local_pod(lab, name))
    return condition if condition and condition["reason"] == reason else None


def remote_pod_exists(lab, name: str) -> bool:
    return lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", name, check=False).returncode == 0


def events(lab, cluster: str, namespace: str, kind: str, name: str, reason: str) -> list[dict]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
    return get_json(lab, cluster, "events", "-n", namespace, "--field-selector", selector)["items"]


def running_locally(lab, name: str) -> bool:
    pod = local_pod(lab, name)
    return pod["status"].get("phase") == "Running" and remote_condition(pod) is None


def delete_local(lab, *names: str) -> None:
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", *names, "--wait=true", timeout=90)


UNSAFE = {
    "privileged": (
        {"container": {"securityContext": {"privileged": True, "allowPrivilegeEscalation": True}}},
        'privileged (container "app" must not set securityContext.privileged=true)',
    ),
    "host-path": (
        {
            "container": {"volumeMounts": [{"name": "root", "mountPath": "/host"}]},
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        },
        'hostPath volumes ("root")',
    ),
    "sys-admin": (
        {"container": {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}},
        'non-default capabilities (container "app" must not include "SYS_ADMIN"',
    ),
    "host-port": (
        {"container": {"ports": [{"containerPort": 8080, "hostPort": 8080}]}},
        'hostPort (container "app" uses hostPort 8080)',
    ),
}


def test_twins_enforce_the_default_level_and_the_offer_publishes_the_quota(lab, fed):
    labels = twin_labels(lab)
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"
    status = wait_for(lambda: (s := offer_status(lab)).get("quota") and s, what="the offer's quota")
    allocatable = {r: quantities.parse(v) for r, v in status["allocatable"].items()}
    # The default share (90 %) of the allocatable of the nodes the tenant may use.
    assert quantities.parse(status["quota"]["cpu"]) == quantities.round_down("cpu", allocatable["cpu"] * 9 / 10)
    assert quantities.parse(status["quota"]["pods"]) == int(allocatable["pods"] * 9 / 10)
    assert status["used"]["pods"] == "0"


def test_unsafe_pods_never_run_on_the_provider_and_the_local_pod_shows_why(lab, fed):
    create(lab, *(offloaded_pod(name, **changes) for name, (changes, _) in UNSAFE.items()))
    for name, (_, violation) in UNSAFE.items():
        refused = wait_for(
            lambda n=name: refused_with(lab, n, "PodSecurityViolation"),
            what=f"{name}: the provider's refusal on the local pod",
        )
        assert refused["status"] == "False"
        assert 'violates PodSecurity "restricted:latest"' in refused["message"]
        assert violation in refused["message"]
        event = wait_for(
            lambda n=name: events(lab, CONSUMER, NAMESPACE, "Pod", n, "RemotePodSecurityViolation"),
            what=f"{name}: the Warning Event on the local pod",
        )[0]
        assert event["type"] == "Warning"
        assert violation in event["message"]
        assert local_pod(lab, name)["status"]["phase"] == "Pending"
        shadow = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name)
        created = next(c for c in shadow["status"]["conditions"] if c["type"] == "PodCreated")
        assert (created["status"], created["reason"]) == ("False", "PodSecurityViolation")
        assert not remote_pod_exists(lab, name)


def test_the_same_pods_run_once_the_peering_allows_privileged(lab, fed):
    set_terms(lab, podSecurity="privileged")
    wait_for(
        lambda: twin_labels(lab).get("pod-security.kubernetes.io/enforce") == "privileged",
        what="the twin relabelled privileged",
    )
    for name in UNSAFE:
        wait_for(lambda n=name: running_locally(lab, n), timeout=60, what=f"{name} Running once allowed")
    remote = get_json(lab, PROVIDER, "pod", "-n", TWIN, "privileged")
    assert remote["spec"]["containers"][0]["securityContext"]["privileged"] is True
    assert remote["metadata"]["labels"]["catamaran.io/origin-cluster-id"] == CONSUMER

    delete_local(lab, *UNSAFE)
    set_terms(lab)  # back to the default level
    wait_for(
        lambda: twin_labels(lab).get("pod-security.kubernetes.io/enforce") == "restricted",
        what="the twin relabelled restricted",
    )
    wait_for(lambda: offer_status(lab).get("used", {}).get("pods") == "0", what="the tenant's usage back to zero")


@pytest.fixture(scope="module")
def tenant_kubectl(lab, fed, tmp_path_factory):
    return federation.tenant_kubectl(lab, CONSUMER, PROVIDER, tmp_path_factory.mktemp("tenant"), duration="10m")


OTHER_TENANT = tenant_namespace("cluster-3")
# (verb, resource[/name][:subresource], namespace or None for cluster scope, allowed)
PROBES = [
    # What the virtual kubelet needs: twins requested in its tenant namespace, ShadowPods and reflected
    # objects in its twins, the offer and its one credential Secret read-only.
    ("create", "twinnamespaces", TENANT, True),
    ("delete", "twinnamespaces", TENANT, True),
    ("get", "resourceoffers", TENANT, True),
    ("get", f"secrets/{TENANT_CREDENTIAL_SECRET}", TENANT, True),
    ("create", "shadowpods", TWIN, True),
    ("delete", "shadowpods", TWIN, True),
    ("get", "pods", TWIN, True),
    ("get", "pods:log", TWIN, True),
    ("create", "pods:exec", TWIN, True),
    ("create", "configmaps", TWIN, True),
    ("update", "secrets", TWIN, True),
    ("create", "services", TWIN, True),
    ("create", "endpointslices.discovery.k8s.io", TWIN, True),
    # Nothing cluster-wide.
    ("create", "namespaces", None, False),
    ("delete", "namespaces", None, False),
    ("patch", "namespaces", None, False),
    ("get", "nodes", None, False),
    ("patch", "nodes", None, False),
    ("create", "clusterroles", None, False),
    ("create", "clusterrolebindings", None, False),
    ("impersonate", "users", None, False),
    ("create", "certificatesigningrequests", None, False),
    ("create", "persistentvolumes", None, False),
    # Not its own terms, credentials or status.
    ("update", "resourceoffers", TENANT, False),
    ("patch", "resourceoffers:status", TENANT, False),
    ("list", "secrets", TENANT, False),
    ("get", f"secrets/{TENANT_TOKEN_BINDING_SECRET}", TENANT, False),
    ("create", "serviceaccounts:token", TENANT, False),
    ("create", "rolebindings", TENANT, False),
    # Not pods directly, nor the twin's guard rails.
    ("create", "pods", TWIN, False),
    ("patch", "pods", TWIN, False),
    ("delete", "pods", TWIN, False),
    ("update", "pods:ephemeralcontainers", TWIN, False),
    ("patch", "shadowpods:status", TWIN, False),
    ("create", "resourcequotas", TWIN, False),
    ("delete", "resourcequotas", TWIN, False),
    ("create", "limitranges", TWIN, False),
    ("create", "roles", TWIN, False),
    ("create", "rolebindings", TWIN, False),
    ("create", "serviceaccounts", TWIN, False),
    # Nothing outside its tenant namespace and twins.
    ("get", "pods", "kube-system", False),
    ("get", "secrets", "default", False),
    ("create", "shadowpods", "default", False),
    ("get", "resourceoffers", OTHER_TENANT, False),
    ("create", "twinnamespaces", OTHER_TENANT, False),
    ("get", f"secrets/{TENANT_CREDENTIAL_SECRET}", OTHER_TENANT, False),
    ("create", "shadowpods", "catamaran-system", False),
]


def test_the_tenant_credential_can_do_what_the_virtual_kubelet_needs_and_nothing_else(lab, tenant_kubectl):
    answers = {}
    for verb, resource, namespace, _ in PROBES:
        scope = ["-n", namespace] if namespace else []
        kind, _, subresource = resource.partition(":")
        subresource_flag = [f"--subresource={subresource}"] if subresource else []
        result = tenant_kubectl("auth", "can-i", verb, kind, *subresource_flag, *scope)
        assert result.stdout.strip() in ("yes", "no"), result.stderr
        answers[(verb, resource, namespace)] = result.stdout.strip() == "yes"
    expected = {(verb, resource, namespace): allowed for verb, resource, namespace, allowed in PROBES}
    assert answers == expected


def shadowpod(name: str, spec: dict, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "ShadowPod",
        "metadata": {"name": name, "namespace": TWIN},
        "spec": {"pod": {"metadata": {"labels": labels or {}}, "spec": spec}},
    }


def shadow_refusal(lab, name: str, reason: str):
    status = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name).get("status") or {}
    created = next((c for c in status.get("conditions") or [] if c["type"] == "PodCreated"), None)
    return created if created and (created["status"], created["reason"]) == ("False", reason) else None


def test_shadowpods_written_directly_get_the_same_refusals(lab, tenant_kubectl):
    privileged = offloaded_pod("direct", **UNSAFE["privileged"][0])["spec"]
    for field in TO_VIRTUAL_NODE:
        privileged.pop(field)
    privileged["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    # No node of the provider has that much: refused as infeasible, before the quota (a quota refusal of ShadowPods
    # written directly: test_tenant_terms.py's pod-level requests).
    huge = {"containers": [container("app", cpu="100000")]}
    # No Catamaran labels and another tenant's origin: neither hides the pod from this tenant's quota.
    sneaky = {"containers": [container("app")]}
    written = tenant_kubectl(
        "apply",
        "-f",
        "-",
        input=federation.as_list(
            [
                shadowpod("direct", privileged),
                shadowpod("huge", huge),
                shadowpod("sneaky", sneaky, labels={"catamaran.io/origin-cluster-id": "cluster-3"}),
            ]
        ),
    )
    assert written.returncode == 0, written.stderr

    refused = wait_for(lambda: shadow_refusal(lab, "direct", "PodSecurityViolation"), what="the direct refusal")
    assert 'hostPath volumes ("root")' in refused["message"]
    assert 'privileged (container "app" must not set securityContext.privileged=true)' in refused["message"]
    event = wait_for(lambda: events(lab, PROVIDER, TWIN, "ShadowPod", "direct", "PodSecurityViolation"))[0]
    assert event["type"] == "Warning"

    infeasible = wait_for(lambda: shadow_refusal(lab, "huge", "Infeasible"), what="the infeasible refusal")
    assert "cpu (requested 100000, the most one node has" in infeasible["message"]
    assert wait_for(lambda: events(lab, PROVIDER, TWIN, "ShadowPod", "huge", "Infeasible"))[0]["type"] == "Warning"
    assert not remote_pod_exists(lab, "direct")
    assert not remote_pod_exists(lab, "huge")

    pod = wait_for(lambda: remote_pod_exists(lab, "sneaky") and get_json(lab, PROVIDER, "pod", "-n", TWIN, "sneaky"))
    assert pod["metadata"]["labels"]["catamaran.io/origin-cluster-id"] == CONSUMER
    assert pod["metadata"]["labels"]["catamaran.io/managed-by"] == "catamaran"
    wait_for(lambda: offer_status(lab)["used"]["pods"] == "1", what="the sneaky pod counted in the tenant's usage")
    deleted = tenant_kubectl("-n", TWIN, "delete", "shadowpod", "direct", "huge", "sneaky", "--wait=true")
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: offer_status(lab)["used"]["pods"] == "0", what="the tenant's usage back to zero")


def test_reserved_twin_names_are_refused(lab, tenant_kubectl):
    requests = [
        {
            "apiVersion": "offloading.catamaran.io/v1alpha1",
            "kind": "TwinNamespace",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"originNamespace": "probe"},
        }
        for name in ("kube-tenant-probe", "catamaran-tenant-cluster-3")
    ]
    written = tenant_kubectl("apply", "-f", "-", input=federation.as_list(requests))
    assert written.returncode == 0, written.stderr
    for name in ("kube-tenant-probe", "catamaran-tenant-cluster-3"):
        twin = wait_for(
            lambda n=name: (t := get_json(lab, PROVIDER, "twinnamespace", "-n", TENANT, n)).get("status") and t,
            what=f"the refusal of twin {name}",
        )
        assert twin["status"]["phase"] == "Failed"
        assert "reserved" in twin["status"]["message"]
        assert events(lab, PROVIDER, TENANT, "TwinNamespace", name, "ReservedName")
    assert lab.kubectl(PROVIDER, "get", "namespace", "kube-tenant-probe", check=False).returncode != 0
    deleted = tenant_kubectl("-n", TENANT, "delete", "twinnamespace", *(r["metadata"]["name"] for r in requests))
    assert deleted.returncode == 0, deleted.stderr


def test_a_consumer_past_its_share_is_stopped_by_the_providers_quota(lab, fed):
    # The provider shares 10 % with this tenant, while the consumer's virtual node still shows 90 % of the
    # provider's free resources: its scheduler lets it past its share, the provider does not.
    set_terms(lab, sharingPercentage=10)

    def quota_at_ten_percent():
        status = offer_status(lab)
        tenth = quantities.round_down("cpu", quantities.parse(status["allocatable"]["cpu"]) / 10)
        return quantities.parse(status["quota"]["cpu"]) == tenth and status["quota"]

    quota = wait_for(quota_at_ten_percent, what="the quota at 10 %")
    share = quantities.parse(quota["cpu"]) * Fraction(2, 5)
    cpu = quantities.format_quantity("cpu", quantities.round_down("cpu", share))
    create(lab, *(offloaded_pod(f"share-{i}", cpu=cpu) for i in (1, 2, 3)))

    refused = wait_for(
        lambda: next((n for n in ("share-1", "share-2", "share-3") if refused_with(lab, n, "QuotaExceeded")), None),
        what="one pod past the share refused",
    )
    admitted = [n for n in ("share-1", "share-2", "share-3") if n != refused]
    for name in admitted:
        wait_for(lambda n=name: running_locally(lab, n), what=f"{name} Running within the share")
    condition = refused_with(lab, refused, "QuotaExceeded")
    assert f"cpu (requested {cpu}" in condition["message"]
    assert f"quota {quota['cpu']}" in condition["message"]
    assert wait_for(lambda: events(lab, CONSUMER, NAMESPACE, "Pod", refused, "RemoteQuotaExceeded"))
    assert not remote_pod_exists(lab, refused)
    used = wait_for(lambda: (u := offer_status(lab)["used"]).get("pods") == "2" and u, what="used: two pods")
    assert quantities.parse(used["cpu"]) == 2 * quantities.parse(cpu)

    # Freeing part of the share lets the refused pod through, without anyone touching it.
    delete_local(lab, admitted[0])
    wait_for(lambda: running_locally(lab, refused), timeout=60, what="the refused pod Running once the share frees")
    assert remote_pod_exists(lab, refused)
    delete_local(lab, admitted[1], refused)
    set_terms(lab)
