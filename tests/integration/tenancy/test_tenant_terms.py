"""Every field a tenant writes is decided by the provider's terms (docs/tenant-terms.md), consumer cluster-1,
provider cluster-2.

Each refused or rewritten row of the table is tried here as an attacker would: with the tenant's own credential
on the provider, or through a pod of the consumer. Each allowance is then granted in the tenant's ResourceOffer,
as the peering module writes it, and shown to work. The tests run in file order, on the package's peering
(conftest.py), in namespace `termed`; the terms they grant are taken back, the manager they stop restarted.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess

import pytest

from catamaran import quantities
from catamaran.constants import (
    ANNOTATION_ALLOWED_INGRESS_HOSTS,
    ANNOTATION_ALLOWED_SERVICE_TYPES,
    ANNOTATION_ALLOWED_STORAGE_CLASSES,
    ANNOTATION_ENDPOINT_RANGES,
    DEFAULT_CONTAINER_REQUESTS,
    DEFAULT_OBJECT_QUOTA,
    INGRESS_HOSTS_CONFIGMAP,
    RESOURCE_OFFER_NAME,
    ROOT_CA_CONFIGMAP,
    SYSTEM_NAMESPACE,
    TENANT_PRIORITY_CLASS,
    TENANT_PRIORITY_VALUE,
    TENANT_TERMS_NAME,
    tenant_namespace,
)
from catamaran_lab.localpath import STORAGE_CLASS as LAB_DEFAULT_CLASS  # every lab cluster with a real node's

from .. import federation
from ..lab_access import get_json, wait_for
from ..manifests import container
from . import CONSUMER, PROVIDER

pytestmark = pytest.mark.integration

NAMESPACE = "termed"
TWIN = f"{NAMESPACE}-{CONSUMER}"
TENANT = tenant_namespace(CONSUMER)
TOLERATE_VIRTUAL_NODE = [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}]
PROVIDER_CRITICAL = "provider-critical"


@pytest.fixture(scope="module")
def fed(lab, peering):
    with federation.offloaded(lab, CONSUMER, PROVIDER, NAMESPACE):
        yield peering
    lab.kubectl(PROVIDER, "delete", "priorityclass", PROVIDER_CRITICAL, check=False)
    lab.kubectl(PROVIDER, "delete", "priorityclass", PROVIDER_CRITICAL, check=False)


@pytest.fixture(scope="module")
def tenant_kubectl(lab, fed, tmp_path_factory):
    return federation.tenant_kubectl(lab, CONSUMER, PROVIDER, tmp_path_factory.mktemp("tenant-terms"), duration="30m")


def refused(result: subprocess.CompletedProcess, *words: str) -> str:
    """The API server's refusal, which must name why."""
    assert result.returncode != 0, f"accepted: {result.stdout}"
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


def service(name: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": TWIN},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}], **spec},
    }


def endpoint_slice(name: str, *addresses: str) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": TWIN, "labels": {"kubernetes.io/service-name": "pivot"}},
        "addressType": "IPv4",
        "ports": [{"port": 6443, "protocol": "TCP"}],
        "endpoints": [{"addresses": list(addresses), "conditions": {"ready": True}}],
    }


def shadowpod(name: str, spec: dict) -> dict:
    return {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "ShadowPod",
        "metadata": {"name": name, "namespace": TWIN},
        "spec": {"pod": {"metadata": {"labels": {"app": "terms"}}, "spec": spec}},
    }


def apply(run, *objects: dict) -> subprocess.CompletedProcess:
    return run("apply", "-f", "-", input=federation.as_list(list(objects)))


def created_condition(lab, name: str) -> dict:
    status = get_json(lab, PROVIDER, "shadowpod", "-n", TWIN, name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "PodCreated"), {})


def remote_pod(lab, name: str) -> dict | None:
    result = lab.kubectl(PROVIDER, "-n", TWIN, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def offer(lab) -> dict:
    return get_json(lab, PROVIDER, "resourceoffer", "-n", TENANT, RESOURCE_OFFER_NAME)


def twin(lab) -> dict:
    return get_json(lab, PROVIDER, "namespace", TWIN)


def test_every_twin_carries_the_terms_guards(lab, fed):
    consumer_range = lab.recorded_config().cluster(CONSUMER).pod_cidr
    wait_for(lambda: offer(lab).get("status", {}).get("endpointRanges") == [consumer_range], what="endpointRanges")
    annotations = wait_for(
        lambda: (a := twin(lab)["metadata"].get("annotations") or {}).get(ANNOTATION_ENDPOINT_RANGES) and a,
        what="the twin's terms annotations",
    )
    assert annotations[ANNOTATION_ALLOWED_SERVICE_TYPES] == "ClusterIP"
    assert annotations[ANNOTATION_ENDPOINT_RANGES] == consumer_range
    limits = get_json(lab, PROVIDER, "limitrange", "-n", TWIN, TENANT_TERMS_NAME)["spec"]["limits"][0]
    assert limits["defaultRequest"] == DEFAULT_CONTAINER_REQUESTS
    hard = get_json(lab, PROVIDER, "resourcequota", "-n", TWIN, TENANT_TERMS_NAME)["spec"]["hard"]
    parsed = {resource: quantities.parse(amount) for resource, amount in hard.items()}
    assert parsed == {resource: quantities.parse(amount) for resource, amount in DEFAULT_OBJECT_QUOTA.items()}
    account = get_json(lab, PROVIDER, "serviceaccount", "-n", TWIN, "default")
    assert account["automountServiceAccountToken"] is False
    priority = get_json(lab, PROVIDER, "priorityclass", TENANT_PRIORITY_CLASS)
    assert (priority["value"], priority["preemptionPolicy"]) == (TENANT_PRIORITY_VALUE, "Never")


def test_services_that_would_capture_provider_traffic_are_refused(lab, tenant_kubectl):
    refused(
        apply(tenant_kubectl, service("capture", externalIPs=["203.0.113.10"])),
        "catamaran-tenant-terms",
        "externalIPs are refused",
    )
    refused(apply(tenant_kubectl, service("open", type="NodePort")), "Service type NodePort is not allowed")
    refused(apply(tenant_kubectl, service("balanced", type="LoadBalancer")), "Service type LoadBalancer")
    refused(apply(tenant_kubectl, service("renamed", type="ExternalName", externalName="kubernetes.default")))
    # None of them exists: nothing on the provider answers for 203.0.113.10 or opens a node port.
    names = lab.kubectl(PROVIDER, "-n", TWIN, "get", "services", "-o", "name").stdout.split()
    assert not {"service/capture", "service/open", "service/balanced", "service/renamed"} & set(names)
    assert apply(tenant_kubectl, service("plain")).returncode == 0  # a ClusterIP Service is the tenant's right


def test_endpoint_slices_point_only_into_the_consumers_announced_range(lab, tenant_kubectl):
    provider = lab.recorded_config().cluster(PROVIDER)
    node_ip = provider.real_node.node_ip if provider.real_node else "172.16.0.1"
    kubernetes = get_json(
        lab, PROVIDER, "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"
    )
    api_server = kubernetes["items"][0]["endpoints"][0]["addresses"][0]
    another_twins_pod = str(ipaddress.ip_network(provider.pod_cidr).network_address + 5)
    assert apply(tenant_kubectl, service("pivot", clusterIP="None")).returncode == 0
    for name, address in (("to-api", api_server), ("to-node", node_ip), ("to-pod", another_twins_pod)):
        refused(
            apply(tenant_kubectl, endpoint_slice(name, address)),
            "EndpointSlice addresses must lie in the consumer's announced pod ranges",
        )
    fqdn = {**endpoint_slice("by-name", "kubernetes.default.svc"), "addressType": "FQDN"}
    refused(apply(tenant_kubectl, fqdn), "FQDN EndpointSlices are refused")
    consumer_address = str(ipaddress.ip_network(lab.recorded_config().cluster(CONSUMER).pod_cidr).network_address + 9)
    assert apply(tenant_kubectl, endpoint_slice("to-consumer", consumer_address)).returncode == 0
    tenant_kubectl("-n", TWIN, "delete", "service", "pivot", "plain")
    tenant_kubectl("-n", TWIN, "delete", "endpointslice", "to-consumer")


def test_no_never_expiring_token_and_no_unbounded_storage(lab, tenant_kubectl):
    token_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "forever",
            "namespace": TWIN,
            "annotations": {"kubernetes.io/service-account.name": "default"},
        },
    }
    refused(apply(tenant_kubectl, token_secret), "service-account-token Secrets are refused")
    lend_storage_classes(lab, "standard")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "huge", "namespace": TWIN},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1000Ti"}},
            "storageClassName": "standard",
        },
    }
    refused(apply(tenant_kubectl, claim), "exceeded quota", "requests.storage")
    lend_storage_classes(lab)


def lend_storage_classes(lab, *classes: str, in_force: str | None = None) -> None:
    """Terms lending these classes (none: the provider's default, the lab's own unless `in_force` says another),
    once the twin carries them."""
    federation.grant_terms(
        lab, CONSUMER, PROVIDER, **({"storage": {"allowedClasses": list(classes)}} if classes else {})
    )
    expected = ",".join(classes) if classes else LAB_DEFAULT_CLASS if in_force is None else in_force
    wait_for(
        lambda: twin(lab)["metadata"]["annotations"].get(ANNOTATION_ALLOWED_STORAGE_CLASSES, "") == expected,
        what=f"the twin lending storage classes {expected!r}",
    )


def config_map(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": TWIN}, "data": data}


def test_the_providers_root_ca_in_a_twin_is_not_the_tenants_to_write(lab, tenant_kubectl):
    published = get_json(lab, PROVIDER, "configmap", "-n", TWIN, ROOT_CA_CONFIGMAP)
    forged = config_map(ROOT_CA_CONFIGMAP, **{"ca.crt": "-----BEGIN CERTIFICATE-----\nforged\n"})
    # An update, as reflection writes (the tenant has no patch, so no `kubectl apply` of an existing object).
    replaced = tenant_kubectl("replace", "-f", "-", input=json.dumps(forged))
    refused(replaced, "catamaran-tenant-terms", f"{ROOT_CA_CONFIGMAP} is the provider's")
    deleted = tenant_kubectl("-n", TWIN, "delete", "configmap", ROOT_CA_CONFIGMAP)
    refused(deleted, f"{ROOT_CA_CONFIGMAP} is the provider's")
    kept = get_json(lab, PROVIDER, "configmap", "-n", TWIN, ROOT_CA_CONFIGMAP)
    assert (kept["metadata"]["uid"], kept["data"]) == (published["metadata"]["uid"], published["data"])
    # The control: the tenant's other ConfigMaps (what reflection writes) are its own to write and delete.
    assert apply(tenant_kubectl, config_map("reflected", key="value")).returncode == 0
    assert tenant_kubectl("-n", TWIN, "delete", "configmap", "reflected").returncode == 0


def claim(name: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": TWIN},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec},
    }


def test_a_tenant_claim_never_takes_a_volume_of_the_providers(lab, tenant_kubectl):
    # A provider admin's static volume (no class, Available), as for an NFS share: here a directory of its node.
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "provider-data", "labels": {"tier": "gold"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": "/var/lib/provider-data"},
        },
    }
    lab.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(volume))
    lend_storage_classes(lab, "standard")
    try:
        by_name = claim("by-name", volumeName="provider-data", storageClassName="standard")
        refused(apply(tenant_kubectl, by_name), "may not name a volume")
        selector = {"matchLabels": {"tier": "gold"}}
        by_label = claim("by-label", selector=selector, storageClassName="standard")
        refused(apply(tenant_kubectl, by_label), "may not select volumes")
        refused(apply(tenant_kubectl, claim("static", storageClassName="")), "a claim must have a storage class")
        # No class and no default class on the provider would bind the volume just as well. The lab's default class
        # fills a class in, and these terms do not lend it; without it, no class at all is refused.
        refused(apply(tenant_kubectl, claim("no-class")), f"storage class {LAB_DEFAULT_CLASS} is not allowed")
        with no_default_class(lab):
            wait_for(
                lambda: "a claim must have a storage class" in apply(tenant_kubectl, claim("no-class")).stderr,
                what="a claim without a class refused on a provider without a default class",
            )
        # The control: a claim of a class is accepted, and waits for that class's provisioner.
        assert apply(tenant_kubectl, claim("by-class", storageClassName="standard")).returncode == 0
        assert get_json(lab, PROVIDER, "pv", "provider-data")["status"]["phase"] == "Available"
        tenant_kubectl("-n", TWIN, "delete", "pvc", "by-class")
        refused(
            apply(tenant_kubectl, claim("gold", storageClassName="gold")),
            "storage class gold is not allowed by the provider's terms (allowed: standard)",
        )
    finally:
        lab.kubectl(PROVIDER, "delete", "pv", "provider-data", "--wait=false", check=False)
        lend_storage_classes(lab)


def test_a_tenant_claim_names_the_providers_default_class_unless_its_terms_lend_others(lab, tenant_kubectl):
    refused(
        apply(tenant_kubectl, claim("unlent", storageClassName="standard")),
        f"storage class standard is not allowed by the provider's terms (allowed: {LAB_DEFAULT_CLASS})",
    )
    # What a claim naming no class gets: the default, filled in by the provider's admission.
    assert apply(tenant_kubectl, claim("defaulted")).returncode == 0
    assert get_json(lab, PROVIDER, "pvc", "-n", TWIN, "defaulted")["spec"]["storageClassName"] == LAB_DEFAULT_CLASS
    tenant_kubectl("-n", TWIN, "delete", "pvc", "defaulted")
    # Without a default class, the terms lend nothing.
    with no_default_class(lab):
        lend_storage_classes(lab, in_force="")
        refused(apply(tenant_kubectl, claim("other", storageClassName="standard")), "(allowed: none")
    lend_storage_classes(lab)


@contextlib.contextmanager
def no_default_class(lab):
    """The provider without its default class for a while, as a cluster that has none."""
    annotation = "storageclass.kubernetes.io/is-default-class"
    lab.kubectl(PROVIDER, "annotate", "storageclass", LAB_DEFAULT_CLASS, f"{annotation}=false", "--overwrite")
    try:
        yield
    finally:
        lab.kubectl(PROVIDER, "annotate", "storageclass", LAB_DEFAULT_CLASS, f"{annotation}=true", "--overwrite")


def test_a_tenant_pods_grace_and_annotations_are_the_providers_to_bound(lab, tenant_kubectl):
    spec = {"containers": [container("app")], "terminationGracePeriodSeconds": 315360000}
    annotated = shadowpod("endless", spec)
    annotated["spec"]["pod"]["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/default-container": "app",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "karpenter.sh/do-not-disrupt": "true",
        "k8s.v1.cni.cncf.io/networks": "provider-internal",
        "cni.projectcalico.org/ipAddrs": '["10.0.0.1"]',
        "prometheus.io/scrape": "true",
        "sidecar.istio.io/inject": "true",
    }
    assert apply(tenant_kubectl, annotated).returncode == 0
    pod = wait_for(lambda: remote_pod(lab, "endless"), what="the pod of ShadowPod endless")
    assert pod["spec"]["terminationGracePeriodSeconds"] == 300
    assert pod["metadata"]["annotations"] == {"kubectl.kubernetes.io/default-container": "app"}
    tenant_kubectl("-n", TWIN, "delete", "shadowpod", "endless", "--wait=true")

    federation.grant_terms_in_force(
        lab,
        CONSUMER,
        PROVIDER,
        TWIN,
        pods={"maxTerminationGracePeriodSeconds": 30, "allowedAnnotations": ["prometheus.io/*"]},
    )
    try:
        assert apply(tenant_kubectl, annotated).returncode == 0
        pod = wait_for(lambda: remote_pod(lab, "endless"), what="the pod of ShadowPod endless, granted more")
        assert pod["spec"]["terminationGracePeriodSeconds"] == 30
        assert pod["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    finally:
        tenant_kubectl("-n", TWIN, "delete", "shadowpod", "endless", "--wait=true")
        federation.grant_terms(lab, CONSUMER, PROVIDER)


def test_pod_level_requests_and_pods_without_requests_are_counted(lab, tenant_kubectl):
    # A tenth of the nodes: a quota below the largest node, so a pod past it is refused for the quota, not as a pod no
    # node could hold (which the provider checks first).
    sharing = offer(lab)["spec"].get("sharingPercentage")
    federation.grant_terms(lab, CONSUMER, PROVIDER, sharingPercentage=10)

    def quota_at_ten_percent():
        status = offer(lab).get("status") or {}
        tenth = quantities.round_down("cpu", quantities.parse(status.get("allocatable", {}).get("cpu", "0")) / 10)
        quota = status.get("quota", {}).get("cpu")
        return quota is not None and quantities.parse(quota) == tenth and quantities.parse(quota)

    try:
        quota_cpu = wait_for(quota_at_ten_percent, what="the quota at 10 %")
        beyond = quantities.format_quantity("cpu", quota_cpu + 1)
        pod_level = {"containers": [container("app")], "resources": {"requests": {"cpu": beyond}}}
        best_effort = {"containers": [container("app")]}
        written = apply(tenant_kubectl, shadowpod("pod-level", pod_level), shadowpod("best-effort", best_effort))
        assert written.returncode == 0, written.stderr

        def refused_for_the_quota():
            found = created_condition(lab, "pod-level")
            return found.get("reason") == "QuotaExceeded" and found

        condition = wait_for(refused_for_the_quota, what="the pod-level request refused for the quota")
        assert f"cpu (requested {beyond}" in condition["message"]
        assert remote_pod(lab, "pod-level") is None
        pod = wait_for(lambda: remote_pod(lab, "best-effort"), what="the best-effort ShadowPod's pod")
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["requests"] == DEFAULT_CONTAINER_REQUESTS
        assert pod["status"].get("qosClass") != "BestEffort"
        wait_for(
            lambda: (
                quantities.parse(offer(lab)["status"]["used"].get("cpu", "0"))
                >= quantities.parse(DEFAULT_CONTAINER_REQUESTS["cpu"])
            ),
            what="the defaulted request counted as used",
        )
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert not any("kube-api-access" in v["name"] for v in pod["spec"].get("volumes") or [])
        tenant_kubectl("-n", TWIN, "delete", "shadowpod", "pod-level", "best-effort", "--wait=true")
    finally:
        federation.grant_terms(lab, CONSUMER, PROVIDER, **({"sharingPercentage": sharing} if sharing else {}))


def test_fields_outside_the_table_are_refused_and_priority_is_the_providers(lab, tenant_kubectl):
    lab.kubectl(
        PROVIDER,
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": PROVIDER_CRITICAL},
                "value": 1000000000,
            }
        ),
    )
    runtime = {"containers": [container("app")], "runtimeClassName": "runc-privileged"}
    critical = {"containers": [container("app")], "priorityClassName": PROVIDER_CRITICAL}
    assert apply(tenant_kubectl, shadowpod("runtime", runtime), shadowpod("critical", critical)).returncode == 0
    condition = wait_for(
        lambda: (
            created_condition(lab, "runtime").get("reason") == "FieldNotAllowed" and created_condition(lab, "runtime")
        )
    )
    assert "runtimeClassName" in condition["message"]
    pod = wait_for(lambda: remote_pod(lab, "critical"), what="the pod of ShadowPod critical")
    assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == (TENANT_PRIORITY_CLASS, TENANT_PRIORITY_VALUE)
    tenant_kubectl("-n", TWIN, "delete", "shadowpod", "runtime", "critical", "--wait=true")
    wait_for(lambda: remote_pod(lab, "critical") is None, what="the critical pod gone")

    federation.grant_terms(lab, CONSUMER, PROVIDER, allowedPriorityClasses=[PROVIDER_CRITICAL])
    wait_for(lambda: offer_terms(lab).get("allowedPriorityClasses") == [PROVIDER_CRITICAL], what="the allowance")
    assert apply(tenant_kubectl, shadowpod("critical", critical)).returncode == 0
    pod = wait_for(lambda: remote_pod(lab, "critical"), what="the allowed critical pod")
    assert pod["spec"]["priorityClassName"] == PROVIDER_CRITICAL
    tenant_kubectl("-n", TWIN, "delete", "shadowpod", "critical", "--wait=true")
    federation.grant_terms(lab, CONSUMER, PROVIDER)


def offer_terms(lab) -> dict:
    return offer(lab).get("spec") or {}


def test_twin_names_are_suffixed_unless_allowed(lab, tenant_kubectl):
    request = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "TwinNamespace",
        "metadata": {"name": "payments", "namespace": TENANT},
        "spec": {"originNamespace": "payments"},
    }
    assert apply(tenant_kubectl, request).returncode == 0

    def twin_status():
        return get_json(lab, PROVIDER, "twinnamespace", "-n", TENANT, "payments").get("status") or {}

    status = wait_for(lambda: twin_status().get("phase") == "Failed" and twin_status(), what="payments refused")
    assert "not allowed by the provider's terms" in status["message"]
    assert lab.kubectl(PROVIDER, "get", "namespace", "payments", check=False).returncode != 0

    federation.grant_terms(lab, CONSUMER, PROVIDER, twinNamespaceNames="Any")
    wait_for(lambda: twin_status().get("phase") == "Ready", what="payments made once any name is allowed")
    assert lab.kubectl(PROVIDER, "get", "namespace", "payments", check=False).returncode == 0
    tenant_kubectl("-n", TENANT, "delete", "twinnamespace", "payments", "--wait=true")
    federation.grant_terms(lab, CONSUMER, PROVIDER)


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("claiming", {"resourceClaims": [{"name": "gpu", "resourceClaimName": "provider-gpus"}]}),
        (
            "reaching-out",
            {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}, "namespaceSelector": {}}
                        ]
                    }
                }
            },
        ),
        ("from-the-future", {"futureField": {"enabled": True}}),
    ],
)
def test_refused_pod_fields_never_make_a_pod(lab, tenant_kubectl, name, field):
    assert apply(tenant_kubectl, shadowpod(name, {"containers": [container("app")], **field})).returncode == 0
    condition = wait_for(
        lambda: created_condition(lab, name).get("reason") == "FieldNotAllowed" and created_condition(lab, name),
        what=f"{name} refused",
    )
    assert "the provider's terms refuse" in condition["message"]
    assert remote_pod(lab, name) is None
    tenant_kubectl("-n", TWIN, "delete", "shadowpod", name, "--wait=true")


def test_a_node_name_is_refused_by_the_shadowpod_schema_itself(lab, tenant_kubectl):
    pinned = shadowpod("pinned", {"containers": [container("app")], "nodeName": "cluster-2-node-0"})
    refused(apply(tenant_kubectl, pinned), "spec.pod.spec.nodeName")


def test_ephemeral_containers_a_tenant_adds_are_held_to_its_pod_security_level(lab, tenant_kubectl):
    """What `kubectl debug` sends through a virtual node, written here with the tenant's own credential: a
    privileged ephemeral container never reaches the pod; a restricted one joins it."""
    assert apply(tenant_kubectl, shadowpod("debugged", {"containers": [container("app")]})).returncode == 0
    wait_for(lambda: remote_pod(lab, "debugged"), what="the pod of ShadowPod debugged")

    def add(*ephemeral: dict) -> None:
        body = json.dumps({"spec": {"pod": {"spec": {"ephemeralContainers": list(ephemeral)}}}})
        tenant_kubectl("-n", TWIN, "patch", "shadowpod", "debugged", "--type=merge", "-p", body)

    def events(reason: str) -> list[str]:
        listed = get_json(lab, PROVIDER, "-n", TWIN, "events", "--field-selector", f"reason={reason}")["items"]
        return [e["message"] for e in listed if e["involvedObject"]["name"] == "debugged"]

    privileged = {**container("root-shell"), "securityContext": {"privileged": True}}
    add(privileged)
    refusal = wait_for(lambda: events("EphemeralContainersRefused"), what="the refusal of root-shell")
    assert "root-shell" in refusal[0]
    assert "privileged" in refusal[0], refusal
    assert not remote_pod(lab, "debugged")["spec"].get("ephemeralContainers")
    add(container("debugger"))
    added = wait_for(
        lambda: [c["name"] for c in remote_pod(lab, "debugged")["spec"].get("ephemeralContainers") or []],
        what="the restricted ephemeral container on the pod",
    )
    assert added == ["debugger"]
    tenant_kubectl("-n", TWIN, "delete", "shadowpod", "debugged", "--wait=true")


def test_rewritten_pod_fields_are_the_providers(lab, tenant_kubectl):
    spec = {
        "containers": [container("app")],
        "schedulerName": "tenant-scheduler",
        "schedulingGates": [{"name": "example.com/hold"}],
        "serviceAccountName": "builder",
        "automountServiceAccountToken": True,
        "overhead": {"cpu": "1m"},
        "preemptionPolicy": "PreemptLowerPriority",
    }
    assert apply(tenant_kubectl, shadowpod("rewritten", spec)).returncode == 0
    pod = wait_for(lambda: remote_pod(lab, "rewritten"), what="the pod of ShadowPod rewritten")["spec"]
    assert pod["schedulerName"] == "default-scheduler"
    assert not pod.get("schedulingGates")
    # Its own account is refused; the token it asked for is the twin's default ServiceAccount's, bound to nothing.
    assert pod["serviceAccountName"] == "default"
    assert pod["automountServiceAccountToken"] is True
    assert not pod.get("overhead")
    assert pod["preemptionPolicy"] == "Never"  # the tenant class's
    tenant_kubectl("-n", TWIN, "delete", "shadowpod", "rewritten", "--wait=true")


def test_load_balancer_classes_and_object_counts_are_the_providers(lab, tenant_kubectl):
    allowed, other = "example.com/allowed", "example.com/other"
    federation.grant_terms(
        lab,
        CONSUMER,
        PROVIDER,
        services={"allowedTypes": ["LoadBalancer"], "allowedLoadBalancerClasses": [allowed]},
        objectQuota={"services": "2"},
    )
    wait_for(
        lambda: "LoadBalancer" in twin(lab)["metadata"]["annotations"][ANNOTATION_ALLOWED_SERVICE_TYPES],
        what="the twin's annotations updated",
    )
    wait_for(
        lambda: (
            get_json(lab, PROVIDER, "resourcequota", "-n", TWIN, TENANT_TERMS_NAME)
            .get("status", {})
            .get("hard", {})
            .get("services")
            == "2"
        ),
        what="the twin's quota of 2 Services in force",
    )
    refused(
        apply(tenant_kubectl, service("other-class", type="LoadBalancer", loadBalancerClass=other)),
        f"load-balancer class {other} is not allowed",
    )
    assert apply(tenant_kubectl, service("lb", type="LoadBalancer", loadBalancerClass=allowed)).returncode == 0
    assert apply(tenant_kubectl, service("second")).returncode == 0
    refused(apply(tenant_kubectl, service("third")), "exceeded quota", "services")
    tenant_kubectl("-n", TWIN, "delete", "service", "lb", "second")
    federation.grant_terms(lab, CONSUMER, PROVIDER)


def local_service(name: str, kind: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"type": kind, "ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": name}},
    }


def test_reflection_obeys_the_terms_and_a_granted_node_port_is_reflected_as_such(lab, fed):
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(local_service("web", "NodePort")))

    def copy_type():
        result = lab.kubectl(PROVIDER, "-n", TWIN, "get", "service", "web", "-o", "json", check=False)
        return json.loads(result.stdout)["spec"]["type"] if result.returncode == 0 else None

    wait_for(lambda: copy_type() == "ClusterIP", what="the NodePort Service reflected as ClusterIP")
    selector = "involvedObject.kind=Service,involvedObject.name=web,reason=AdjustedToProviderTerms"
    warnings = wait_for(
        lambda: get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", selector)["items"],
        what="a Warning Event on the local Service",
    )
    assert "type NodePort is not allowed by the provider's terms" in warnings[0]["message"]

    federation.grant_terms(lab, CONSUMER, PROVIDER, services={"allowedTypes": ["NodePort"]})
    wait_for(lambda: copy_type() == "NodePort", timeout=90, what="the Service reflected as NodePort once allowed")
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "service", "web")
    federation.grant_terms(lab, CONSUMER, PROVIDER)


LENT_HOSTS = f"*.{CONSUMER}.example"
INGRESS_CLASS = "public"


def ingress(name: str, *hosts: str, namespace: str = TWIN, ingress_class: str | None = INGRESS_CLASS, **extra) -> dict:
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    path = {"path": "/", "pathType": "Prefix", "backend": backend}
    spec = {"rules": [{"host": host, "http": {"paths": [path]}} for host in hosts], **extra.pop("spec", {})}
    if ingress_class:
        spec["ingressClassName"] = ingress_class
    metadata = {"name": name, "namespace": namespace, **extra}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": spec}


def served_hosts(lab) -> dict:
    result = lab.kubectl(PROVIDER, "-n", SYSTEM_NAMESPACE, "get", "configmap", INGRESS_HOSTS_CONFIGMAP, "-o", "json")
    return json.loads(result.stdout).get("data") or {}


def create(run, obj: dict) -> subprocess.CompletedProcess:
    """A create, as reflection writes: `kubectl apply` would add its own annotation, which no term lends."""
    return run("create", "-f", "-", input=json.dumps(obj))


def test_tenant_ingresses_take_only_lent_classes_hosts_and_annotations(lab, tenant_kubectl):
    shop = f"shop.{CONSUMER}.example"
    # Cautious defaults: no class is lent, so no tenant Ingress at all.
    refused(create(tenant_kubectl, ingress("early", shop)), f"ingress class {INGRESS_CLASS} is not allowed", "none")

    rewrite = "nginx.ingress.kubernetes.io/rewrite-target"
    lent = {"allowedClasses": [INGRESS_CLASS], "allowedHosts": [LENT_HOSTS], "allowedAnnotations": [rewrite]}
    federation.grant_terms(lab, CONSUMER, PROVIDER, ingress=lent)
    wait_for(
        lambda: twin(lab)["metadata"]["annotations"].get(ANNOTATION_ALLOWED_INGRESS_HOSTS) == LENT_HOSTS,
        what="the twin's Ingress terms",
    )
    # A provider's own Ingress, in a namespace of its own, serves a host inside the pattern lent to the tenant.
    taken = f"taken.{CONSUMER}.example"
    lab.kubectl(PROVIDER, "create", "namespace", "storefront", check=False)
    lab.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(ingress("owner", taken, namespace="storefront")))
    wait_for(lambda: served_hosts(lab).get(taken) == "storefront", what="the provider's host recorded as served")

    refused(create(tenant_kubectl, ingress("internal", shop, ingress_class="internal")), "ingress class internal")
    refused(create(tenant_kubectl, ingress("classless", shop, ingress_class=None)), "an Ingress without a class")
    outside = f"shop.{PROVIDER}.example"
    refused(create(tenant_kubectl, ingress("outside", outside)), f"hosts not lent by the provider's terms: {outside}")
    catch_all = ingress("catch-all", spec={"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}})
    refused(create(tenant_kubectl, catch_all), "hosts not lent by the provider's terms: *")
    tls = ingress("tls", shop, spec={"tls": [{"hosts": [outside], "secretName": "cert"}]})
    refused(create(tenant_kubectl, tls), "TLS hosts must be within")
    squatter = refused(
        create(tenant_kubectl, ingress("squat", taken)), f"already served by another namespace of the provider: {taken}"
    )
    assert "storefront" not in squatter, "the owner is not the tenant's to know"
    snippets = {
        "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers 'X: y';",
        "nginx.ingress.kubernetes.io/auth-url": "http://attacker.example/auth",
    }
    refused(
        create(tenant_kubectl, ingress("snippet", shop, annotations=snippets)),
        "Ingress annotations not allowed",
        "configuration-snippet",
        "auth-url",
    )
    # The control: within every term, created, and updated (its own host is no collision with itself).
    allowed = ingress("shop", shop, f"*.wild.{CONSUMER}.example", annotations={rewrite: "/"})
    assert create(tenant_kubectl, allowed).returncode == 0
    wait_for(lambda: served_hosts(lab).get(shop) == TWIN, what="the tenant's host recorded as served")
    allowed["spec"]["rules"][0]["http"]["paths"][0]["path"] = "/cart"
    updated = tenant_kubectl("replace", "-f", "-", input=json.dumps(allowed))
    assert updated.returncode == 0, updated.stderr
    lab.kubectl(PROVIDER, "delete", "namespace", "storefront", "--wait=false")
    tenant_kubectl("-n", TWIN, "delete", "ingress", "shop")
    federation.grant_terms(lab, CONSUMER, PROVIDER)


def test_a_reflected_ingress_the_terms_refuse_is_a_warning_on_the_consumers(lab, fed):
    local = ingress("local-shop", f"shop.{CONSUMER}.example", namespace=NAMESPACE)
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(local))
    selector = "involvedObject.kind=Ingress,involvedObject.name=local-shop,reason=ReflectionFailed"
    warnings = wait_for(
        lambda: get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", selector)["items"],
        what="a Warning Event on the local Ingress",
    )
    assert warnings[0]["type"] == "Warning"
    assert "is not allowed by the provider's terms" in warnings[0]["message"], warnings[0]["message"]
    assert lab.kubectl(PROVIDER, "-n", TWIN, "get", "ingress", "local-shop", check=False).returncode != 0
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "ingress", "local-shop")


def test_what_a_provider_admin_reports_is_checked_by_the_consumer(lab, fed, tmp_path):
    """A provider's admin (not the tenant) writes a pod IP of the consumer's own and a huge made-up message into a
    remote pod's status, with the manager stopped: neither reaches the local pod as written."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reported", "namespace": NAMESPACE, "labels": {"app": "reported"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": f"catamaran-{PROVIDER}"},
            "tolerations": TOLERATE_VIRTUAL_NODE,
            "terminationGracePeriodSeconds": 0,
            "containers": [container("app")],
        },
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))

    def local():
        return get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "reported")

    wait_for(lambda: local()["status"].get("podIP"), timeout=90, what="the pod's IP from the provider")
    kubernetes = get_json(
        lab, CONSUMER, "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"
    )
    consumer_api = kubernetes["items"][0]["endpoints"][0]["addresses"][0]
    manager = fed["manager"]
    manager.stop()
    try:
        status = get_json(lab, PROVIDER, "pod", "-n", TWIN, "reported")["status"]
        forged = dict(status, podIP=consumer_api, podIPs=[{"ip": consumer_api}])
        forged.update(phase="Failed", reason="made up reason!", message="x" * 700_000)
        patch = tmp_path / "status.json"  # 700 kB: beyond a command line
        patch.write_text(json.dumps({"status": forged}))
        lab.kubectl(
            PROVIDER,
            "-n",
            TWIN,
            "patch",
            "pod",
            "reported",
            "--subresource=status",
            "--type=merge",
            "--patch-file",
            str(patch),
        )
        shown = wait_for(
            lambda: (p := local())["status"].get("reason") == "ProviderReported" and p, what="the report checked"
        )["status"]
        assert shown.get("podIP") is None  # nor any other IP: the refused one is only named in the condition
        assert not shown.get("podIPs")
        assert len(shown["message"]) <= 1024
        refusal = next(c for c in shown["conditions"] if c["type"] == "catamaran.io/PodIPAccepted")
        assert refusal["status"] == "False"
        selector = "involvedObject.kind=Pod,involvedObject.name=reported,reason=PodIPRefused"
        assert wait_for(
            lambda: get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", selector)["items"]
        )
    finally:
        manager.start()
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "reported", "--wait=true", check=False, timeout=90)


def test_a_provider_workload_preempts_a_tenant_pod_which_comes_back(lab, fed):
    provider = lab.recorded_config().cluster(PROVIDER)
    node = provider.nodes[0].name
    allocatable = quantities.parse(get_json(lab, PROVIDER, "node", node)["status"]["allocatable"]["cpu"])
    share = quantities.format_quantity("cpu", quantities.round_down("cpu", allocatable * 6 / 10))
    federation.place(lab, CONSUMER, PROVIDER, {"kubernetes.io/hostname": node}, [])
    try:
        tenant = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "tenant-work", "namespace": NAMESPACE},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": f"catamaran-{PROVIDER}"},
                "tolerations": TOLERATE_VIRTUAL_NODE,
                "terminationGracePeriodSeconds": 0,
                "containers": [container("app", cpu=share)],
            },
        }
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(tenant))
        first = wait_for(
            lambda: (p := remote_pod(lab, "tenant-work")) and p["status"].get("phase") == "Running" and p,
            timeout=90,
            what="the tenant pod Running on the provider",
        )
        own = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "provider-work", "namespace": "default"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": 0,
                "containers": [container("app", cpu=share)],
            },
        }
        lab.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(own))
        wait_for(
            lambda: get_json(lab, PROVIDER, "pod", "-n", "default", "provider-work")["spec"].get("nodeName") == node,
            timeout=90,
            what="the provider's pod scheduled by preempting the tenant's",
        )
        selector = "involvedObject.kind=Pod,involvedObject.name=tenant-work,reason=Preempted"
        shown = wait_for(
            lambda: get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", selector)["items"],
            what="the local pod shows it was preempted",
        )
        assert "Preempted" in shown[0]["reason"]
        second = wait_for(
            lambda: (p := remote_pod(lab, "tenant-work")) and p["metadata"]["uid"] != first["metadata"]["uid"] and p
        )
        assert second["status"].get("phase") == "Pending"
        lab.kubectl(PROVIDER, "-n", "default", "delete", "pod", "provider-work", "--wait=true")
        wait_for(
            lambda: get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "tenant-work")["status"].get("phase") == "Running",
            timeout=90,
            what="the tenant pod Running again once capacity returns",
        )
    finally:
        lab.kubectl(PROVIDER, "-n", "default", "delete", "pod", "provider-work", "--wait=false", check=False)
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "tenant-work", "--wait=true", check=False, timeout=90)
        federation.grant_terms(lab, CONSUMER, PROVIDER, field_manager="tests")  # the placement taken back
