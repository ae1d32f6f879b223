"""Pure logic of the controller: quantities, the virtual node's share, spec forging, status mapping."""

from __future__ import annotations

from fractions import Fraction

import pytest
from lightkube.core.exceptions import ApiError

from catamaran import objects, quantities
from catamaran.constants import VIRTUAL_NODE_TAINT_KEY
from catamaran.networks import covering_networks
from catamaran.provider.offers import NodeSummary, Placement, PodSummary, offer_status
from catamaran.provider.shadowpods import classify_create_error, pod_from_shadow
from catamaran.vk import forge
from catamaran.vk.node import ROUNDED_TO_ZERO, NodeSettings, node_status
from catamaran.vk.pod_status import comparable_status


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("1", Fraction(1)),
        ("1.5", Fraction(3, 2)),
        ("1Gi", Fraction(2**30)),
        ("500Ki", Fraction(500 * 1024)),
        ("1e3", Fraction(1000)),
        ("2k", Fraction(2000)),
        ("250n", Fraction(250, 10**9)),
    ],
)
def test_quantities_parse_exactly(text, value):
    assert quantities.parse(text) == value


def test_garbage_quantity_is_rejected():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantities.parse("lots")


def test_share_rounds_down_and_names_what_vanished():
    capacity, vanished = quantities.share({"cpu": "3", "memory": "1001", "nvidia.com/gpu": "1", "pods": "10"}, 90)
    assert capacity == {"cpu": "2700m", "memory": "900", "nvidia.com/gpu": "0", "pods": "9"}
    assert vanished == ["nvidia.com/gpu"]


def test_share_of_whole_cpus_prints_whole_cpus():
    assert quantities.share({"cpu": "10"}, 50)[0] == {"cpu": "5"}


def test_pod_requests_count_init_containers_sidecars_and_overhead():
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "100m"}}}, {"resources": {"limits": {"cpu": "200m"}}}],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        ],
        "overhead": {"cpu": "10m"},
    }
    requests = quantities.pod_requests(spec)
    assert requests["cpu"] == Fraction(1) + Fraction(50, 1000) + Fraction(10, 1000)
    assert requests["memory"] == Fraction(2**30)


def test_free_resources_never_go_negative():
    free = quantities.free_resources([{"cpu": "1"}], [{"cpu": Fraction(3)}])
    assert free == {"cpu": Fraction(0)}


def summary(node, tenant=None, cpu="1"):
    return PodSummary(node=node, tenant=tenant, requests={"cpu": quantities.parse(cpu)})


def test_offer_ignores_the_tenants_own_pods_and_unschedulable_nodes():
    nodes = {
        (None, "a"): NodeSummary(True, {"cpu": "4", "pods": "10"}, ("10.1.1.0/24",), frozenset()),
        (None, "b"): NodeSummary(False, {"cpu": "100"}, ("10.1.2.0/24",), frozenset()),
    }
    pods = {
        ("x", "mine"): summary("a", tenant="consumer", cpu="2"),
        ("x", "other"): summary("a", tenant=None, cpu="1"),
        ("x", "elsewhere"): summary("b", tenant=None, cpu="50"),
    }
    status = offer_status(nodes, pods, "consumer")
    assert status["free"] == {"cpu": "3", "pods": "10"}
    assert status["nodes"] == 1
    assert status["podCIDRs"] == ["10.1.0.0/22"]


def test_covering_network_keeps_every_node_range():
    assert covering_networks({"10.102.1.0/24", "10.102.3.0/24"}) == ["10.102.0.0/22"]


def test_pressure_is_reported_only_when_every_node_has_it():
    nodes = {
        (None, "a"): NodeSummary(True, {"cpu": "1"}, (), frozenset({"MemoryPressure", "DiskPressure"})),
        (None, "b"): NodeSummary(True, {"cpu": "1"}, (), frozenset({"MemoryPressure"})),
    }
    assert offer_status(nodes, {}, "t")["pressure"] == ["MemoryPressure"]


def test_node_status_reports_rounding_to_zero_and_health():
    settings = NodeSettings(provider_id="p", node_ip="10.0.0.9", sharing_percentage=90)
    offer = {"free": {"cpu": "2", "nvidia.com/gpu": "1"}, "pressure": ["DiskPressure"]}
    status, vanished = node_status(settings, offer, True, "", [])
    conditions = {c["type"]: c for c in status["conditions"]}
    assert vanished == ["nvidia.com/gpu"]
    assert conditions["Ready"]["status"] == "True"
    assert conditions["DiskPressure"]["status"] == "True"
    assert conditions[ROUNDED_TO_ZERO]["status"] == "True"
    assert status["allocatable"] == {"cpu": "1800m", "nvidia.com/gpu": "0", "pods": "0"}
    unhealthy, _ = node_status(settings, offer, False, "3 consecutive health checks failed", status["conditions"])
    ready = next(c for c in unhealthy["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ProviderUnreachable")


KUBE_API_ACCESS = {
    "name": "kube-api-access-abc",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ],
    },
}


def local_pod(**spec_extra) -> dict:
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
        },
        "spec": {
            "nodeName": "catamaran-p",
            "nodeSelector": {"catamaran.io/type": "virtual-node"},
            "affinity": {"nodeAffinity": {}},
            "serviceAccountName": "builder",
            "priorityClassName": "high",
            "priority": 1000,
            "hostNetwork": True,
            "tolerations": [
                {"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            ],
            "volumes": [KUBE_API_ACCESS, {"name": "data", "emptyDir": {}}],
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "volumeMounts": [{"name": "kube-api-access-abc", "mountPath": "/var/run"}, {"name": "data"}],
                }
            ],
            **spec_extra,
        },
        "status": {},
    }


def test_with_a_token_secret_the_token_volume_reads_the_consumers_token_ca_and_namespace():
    shadow = forge.shadowpod_for(
        local_pod(), twin_namespace="shop-c", consumer_id="c", provider_id="p", token_secret="catamaran-token.web-1"
    )
    spec = shadow["spec"]["pod"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["containers"][0]["volumeMounts"][0] == {"name": "kube-api-access-abc", "mountPath": "/var/run"}
    volume = spec["volumes"][0]
    assert volume["projected"]["defaultMode"] == 420
    assert volume["projected"]["sources"] == [
        {
            "secret": {
                "name": "catamaran-token.web-1",
                "items": [{"key": "kube-api-access-abc.token-0", "path": "token"}],
            }
        },
        {"configMap": {"name": "catamaran-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"secret": {"name": "catamaran-token.web-1", "items": [{"key": "namespace", "path": "namespace"}]}},
    ]
    assert forge.token_requests(local_pod()["spec"]) == [("kube-api-access-abc.token-0", None, 3607)]


HOME = ("203.0.113.10", 6443)


def forged(annotation: str | None = None, token_secret: str | None = "catamaran-token.web-1", **container) -> dict:
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
    assert spec["volumes"][0]["projected"]["sources"][0]["secret"]["name"] == "catamaran-token.web-1"
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
        "annotations": {"catamaran.io/local-pod-uid": "u-1", "catamaran.io/local-namespace": "shop"},
    }
    assert "kubectl.kubernetes.io/last-applied-configuration" not in shadow["spec"]["pod"]["metadata"]["annotations"]


def test_forging_leaves_the_local_pod_untouched():
    pod = local_pod()
    forge.shadowpod_for(pod, twin_namespace="t", consumer_id="c", provider_id="p")
    assert pod["spec"]["nodeName"] == "catamaran-p"
    assert len(pod["spec"]["volumes"]) == 2


def test_remote_pod_is_owned_by_its_shadowpod():
    shadow = forge.shadowpod_for(local_pod(), twin_namespace="shop-c", consumer_id="c", provider_id="p")
    shadow["apiVersion"] = "offloading.catamaran.io/v1alpha1"
    shadow["metadata"]["uid"] = "s-1"
    pod = pod_from_shadow(shadow)
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ShadowPod", "s-1", True)
    assert pod["metadata"]["name"] == "web-1"


REAL = (("catamaran.io/lab-node-kind", "real"),)
REAL_TAINT = ("catamaran.io/lab-node-kind", "real", "NoSchedule")


def placement(selector=None, tolerations=()) -> Placement:
    return Placement.from_offer_spec({"nodeSelector": selector or {}, "tolerations": list(tolerations)})


def test_placement_admits_nodes_it_selects_and_whose_taints_it_tolerates():
    tainted_real = NodeSummary(True, {"cpu": "2"}, (), frozenset(), REAL, (REAL_TAINT,))
    plain = NodeSummary(True, {"cpu": "8"}, (), frozenset(), (("other", "x"),), ())
    real_only = placement({"catamaran.io/lab-node-kind": "real"})
    assert not real_only.admits(tainted_real), "the taint is not tolerated"
    assert not real_only.admits(plain)
    exact = {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
    assert placement({"catamaran.io/lab-node-kind": "real"}, [exact]).admits(tainted_real)
    assert placement(tolerations=[{"operator": "Exists"}]).admits(tainted_real)
    assert not placement(tolerations=[{**exact, "effect": "NoExecute"}]).admits(tainted_real)
    assert Placement().admits(plain)
    assert not Placement().admits(tainted_real), "an empty placement keeps off tainted nodes, as before"


def test_offer_counts_only_the_nodes_the_placement_admits():
    nodes = {
        (None, "real"): NodeSummary(True, {"cpu": "2", "pods": "110"}, ("10.1.255.0/24",), frozenset(), REAL),
        (None, "fake"): NodeSummary(True, {"cpu": "8", "pods": "110"}, ("10.1.1.0/24",), frozenset(), ()),
    }
    status = offer_status(nodes, {}, "t", placement({"catamaran.io/lab-node-kind": "real"}))
    assert status["free"]["cpu"] == "2"
    assert status["nodes"] == 1
    assert offer_status(nodes, {}, "t")["free"]["cpu"] == "10"


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


@pytest.mark.parametrize(
    ("provider", "remap", "ip", "expected"),
    [
        (["10.102.0.0/16"], "10.200.0.0/16", "10.102.3.7", "10.200.3.7"),
        (["10.100.0.0/16"], "10.200.0.0/16", "10.100.0.9", "10.200.0.9"),  # overlapping with the consumer
        (["10.102.0.0/16"], None, "10.102.3.7", "10.102.3.7"),
        (["10.102.0.0/16"], "10.200.0.0/16", "192.168.1.1", None),  # outside the provider's range: refused
    ],
)
def test_ip_translation_keeps_the_offset(provider, remap, ip, expected):
    assert forge.IPTranslator(provider, remap)(ip) == expected


def test_remap_range_too_small_translates_what_fits_and_says_so():
    translate = forge.IPTranslator(["10.0.0.0/16"], "10.200.0.0/24")
    assert "10.200.0.0/24" in translate.problem
    assert "10.0.0.0/16" in translate.problem
    assert "prefix /16 or shorter" in translate.problem
    assert translate("10.0.0.7") == "10.200.0.7"
    assert translate("10.0.3.7") is None  # offset beyond the remap range: refused, never shown untranslated
    assert forge.IPTranslator(["10.0.0.0/16"], "10.200.0.0/16").problem == ""


APP = {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}


def test_local_status_translates_ips_and_counts_recreations():
    shadow_status = {
        "recreations": 2,
        "pod": {
            "phase": "Running",
            "podIP": "10.102.1.5",
            "podIPs": [{"ip": "10.102.1.5"}],
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": True, "restartCount": 1, "state": {"running": {}}}],
        },
    }
    local = {"conditions": [{"type": "PodScheduled", "status": "True", "reason": "local"}]}
    translate = forge.IPTranslator(["10.102.0.0/16"], "10.200.0.0/16")
    status = forge.local_pod_status(
        local, shadow_status, node_ip="10.0.0.9", translate=translate, provider_reachable=True, now="t", spec=APP
    )
    assert status["podIP"] == "10.200.1.5"
    assert status["podIPs"] == [{"ip": "10.200.1.5"}]
    assert status["hostIP"] == "10.0.0.9"
    assert status["containerStatuses"][0]["restartCount"] == 3
    assert {c["type"]: c.get("reason") for c in status["conditions"]}["PodScheduled"] == "local"


def test_unreachable_provider_marks_pods_not_ready():
    shadow_status = {
        "pod": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": True}],
        }
    }
    status = forge.local_pod_status(
        {}, shadow_status, node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=False, now="t", spec=APP
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ProviderUnreachable")
    assert status["containerStatuses"][0]["ready"] is False


def test_a_fabric_tunnel_down_marks_pods_not_ready_and_its_return_ready_again():
    shadow_status = {
        "pod": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "ready": True}],
        }
    }
    common = dict(node_ip="1.1.1.1", translate=lambda ip: ip, provider_reachable=True, now="t", spec=APP)
    down = forge.local_pod_status({}, shadow_status, network_down="the tunnel is down (TunnelSilent: quiet)", **common)
    ready = next(c for c in down["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NetworkUnreachable")
    assert "TunnelSilent" in ready["message"]
    assert down["containerStatuses"][0]["ready"] is False
    back = forge.local_pod_status(down, shadow_status, **common)
    assert next(c for c in back["conditions"] if c["type"] == "Ready")["status"] == "True"


def test_remote_refusal_shows_on_the_local_pod():
    shadow_status = {
        "conditions": [
            {"type": "PodCreated", "status": "False", "reason": "QuotaExceeded", "message": "exceeded quota: tight"}
        ]
    }
    status = forge.local_pod_status(
        {},
        shadow_status,
        node_ip="1.1.1.1",
        translate=lambda ip: ip,
        provider_reachable=True,
        now="t",
        spec={"containers": [{"name": "app", "image": "nginx"}]},
    )
    refused = next(c for c in status["conditions"] if c["type"] == forge.REMOTE_CONDITION)
    assert (refused["status"], refused["reason"]) == ("False", "QuotaExceeded")
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "QuotaExceeded"


def test_unchanged_status_is_recognised_despite_timestamps():
    a = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "1"}]}
    b = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2"}]}
    assert comparable_status(a) == comparable_status(b)


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


def test_merge_patch_nulls_removed_keys():
    assert objects.merge_patch({"a": 1, "b": {"c": 1, "d": 2}}, {"b": {"c": 1}}) == {"a": None, "b": {"d": None}}


def test_status_patch_touches_only_wanted_fields():
    current = {"phase": "Running", "pod": {"reason": "x", "podIP": "1"}, "conditions": []}
    assert objects.status_patch(current, {"pod": {"podIP": "2"}}) == {"pod": {"reason": None, "podIP": "2"}}


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


def test_readiness_gates_are_kept_from_the_local_pod_and_gate_ready():
    shadow_status = {"pod": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    common = {"node_ip": "1.1.1.1", "translate": None, "provider_reachable": True, "now": "t"}
    gates = ["example.com/feature-1"]
    status = forge.local_pod_status({}, shadow_status, readiness_gates=gates, **common)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert '"example.com/feature-1" does not exist' in ready["message"]
    gate = {"type": "example.com/feature-1", "status": "True"}
    status = forge.local_pod_status({"conditions": [gate]}, shadow_status, readiness_gates=gates, **common)
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True", "example.com/feature-1": "True"}


def test_a_pod_outliving_its_remote_pod_shows_its_containers_ended():
    local = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "app", "ready": True, "state": {"running": {"startedAt": "s"}}},
            {"name": "done", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        ],
    }
    status = forge.terminated_pod_status(local, now="t")
    app, done = status["containerStatuses"]
    assert app["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert (app["state"]["terminated"]["finishedAt"], app["state"]["terminated"]["startedAt"]) == ("t", "s")
    assert done == local["containerStatuses"][1]  # its own end, as reported, is kept
    assert status["phase"] == "Failed"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "False", "PodScheduled": "True"}


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


def test_an_init_containers_restart_alone_is_a_status_change_worth_writing():
    waiting = {"name": "init1", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    before = {"phase": "Pending", "initContainerStatuses": [waiting]}
    after = {"phase": "Pending", "initContainerStatuses": [{**waiting, "restartCount": 2}]}
    assert comparable_status(before) != comparable_status(after)


def test_a_deletion_grace_annotation_is_read_only_when_a_whole_number():
    key = "catamaran.io/deletion-grace-period-seconds"
    assert objects.deletion_grace({key: "30"}) == 30
    assert [objects.deletion_grace(a) for a in ({key: "²"}, {key: "-1"}, {key: ""}, {}, None)] == [None] * 5
