"""Resource reflection: a namespace offloaded from cluster-1 to cluster-3 (pods on its real node) gets its
ConfigMaps, Secrets, Services, EndpointSlices, Ingresses and service-account tokens in the twin namespace.

The tests run in file order and share one federation: the consumer's manager (webhook) and the provider's
manager, one virtual kubelet, namespace `reflect` offloaded with the Remote strategy.
"""

from __future__ import annotations

import base64
import ipaddress
import json

import pytest

from catamaran.constants import ANNOTATION_ALLOWED_INGRESS_CLASSES, SYSTEM_NAMESPACE, virtual_node_name
from catamaran_lab.config import SERVICE_CLUSTER_IP_RANGE

from . import federation
from .lab_access import get_json, require_real_node, wait_for
from .manifests import BUSYBOX, deployment, restricted_busybox

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-3"
NODE = virtual_node_name(PROVIDER)
NAMESPACE = "reflect"
TWIN = f"{NAMESPACE}-{CONSUMER}"
REFLECTED = "catamaran.io/managed-by=reflection"
INGRESS_CLASS = "provider-default"
STORAGE_CLASS = "lab-local"


@pytest.fixture(scope="module")
def fed(lab, lab_config_in_use):
    require_real_node(lab_config_in_use.cluster(PROVIDER))
    with federation.remotely_offloaded(lab, CONSUMER, PROVIDER, NAMESPACE) as processes:
        lend_ingresses(lab)
        yield processes
        lab.kubectl(CONSUMER, "delete", "mutatingwebhookconfiguration", federation.WEBHOOK, check=False)
        lab.kubectl(PROVIDER, "delete", "ingressclass", INGRESS_CLASS, check=False)


def lend_ingresses(lab) -> None:
    """The provider's default ingress class, which fills in the class of reflected Ingresses (the peering names
    none), lent with every host: the Ingresses here are catch-alls. And the storage class of its claims."""
    default_class = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {"name": INGRESS_CLASS, "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "example.com/ingress-controller"},
    }
    apply(lab, default_class, cluster=PROVIDER)
    federation.grant_terms(
        lab,
        CONSUMER,
        PROVIDER,
        ingress={"allowedClasses": [INGRESS_CLASS], "allowedHosts": ["*"]},
        storage={"allowedClasses": [STORAGE_CLASS]},  # the provider's class of reflected claims, further down
    )

    def lent() -> bool:
        annotations = get_json(lab, PROVIDER, "namespace", TWIN)["metadata"].get("annotations") or {}
        return annotations.get(ANNOTATION_ALLOWED_INGRESS_CLASSES) == INGRESS_CLASS

    wait_for(lent, what="the provider's Ingress terms on the twin")


def apply(lab, *objects: dict, cluster: str = CONSUMER) -> None:
    lab.kubectl(cluster, "apply", "-f", "-", input=federation.as_list(list(objects)))


def remote(lab, kind: str, name: str, namespace: str = TWIN) -> dict | None:
    result = lab.kubectl(PROVIDER, "-n", namespace, "get", kind, name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def local(lab, kind: str, name: str) -> dict | None:
    result = lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", kind, name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def events_on(lab, kind: str, name: str, reason: str) -> list[dict]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
    return get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", selector)["items"]


def config_map(name: str, data: dict, **meta) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, **meta},
        "data": data,
    }


def secret(name: str, data: dict, kind: str = "Opaque", **meta) -> dict:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": kind,
        "metadata": {"name": name, "namespace": NAMESPACE, **meta},
        "data": encoded,
    }


def served(lab, pod: str, path: str) -> str:
    """What the remote pod's web server serves at `path`, asked inside the pod: the provider's NetworkPolicy keeps
    the lab's host, like any address outside the twin and the fabric, from the tenant's pods."""
    command = ["exec", pod, "--", "timeout", "5", "wget", "-qO-", f"http://127.0.0.1:8080{path}"]
    return lab.kubectl(PROVIDER, "-n", TWIN, *command, timeout=30).stdout


APP_SCRIPT = """
mkdir -p /tmp/www
cp /page/index.html /tmp/www/index.html
echo "$GREETING" > /tmp/www/greeting
cp /var/run/secrets/kubernetes.io/serviceaccount/token /tmp/www/token
cp /var/run/secrets/kubernetes.io/serviceaccount/ca.crt /tmp/www/ca.crt
cp /var/run/secrets/kubernetes.io/serviceaccount/namespace /tmp/www/namespace
exec httpd -f -p 8080 -h /tmp/www
"""


def app_deployment() -> dict:
    greeting = {"name": "GREETING", "valueFrom": {"secretKeyRef": {"name": "app-env", "key": "greeting"}}}
    pod_spec = restricted_busybox(
        ["sh", "-c", APP_SCRIPT],
        name="web",
        env=[greeting],
        volumeMounts=[{"name": "page", "mountPath": "/page"}],
        readinessProbe={"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 2},
    )
    pod_spec.update(
        serviceAccountName="reader",
        imagePullSecrets=[{"name": "pull"}],
        volumes=[{"name": "page", "configMap": {"name": "page"}}],
    )
    return deployment("web", 1, pod_spec, namespace=NAMESPACE)


def running_app_pod(lab) -> dict | None:
    pods = get_json(lab, CONSUMER, "pods", "-n", NAMESPACE, "-l", "app=web")["items"]
    ready = [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]
    return ready[0] if len(ready) == 1 else None


def test_an_offloaded_app_finds_its_configmap_secret_pull_secret_and_token_on_a_real_node(lab, fed):
    dockerconfig = json.dumps({"auths": {"registry.lab.invalid": {"auth": base64.b64encode(b"u:p").decode()}}})
    apply(
        lab,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": NAMESPACE}},
        config_map("page", {"index.html": "<h1>served from the consumer's ConfigMap</h1>\n"}),
        secret("app-env", {"greeting": "hello from a Secret"}),
        secret("pull", {".dockerconfigjson": dockerconfig}, kind="kubernetes.io/dockerconfigjson"),
        app_deployment(),
    )
    pod = wait_for(lambda: running_app_pod(lab), timeout=120, what="the offloaded app Ready on the consumer")
    assert pod["spec"]["nodeName"] == NODE
    name = pod["metadata"]["name"]
    remote_pod = remote(lab, "pod", name)
    assert remote_pod["spec"]["nodeName"] == f"{PROVIDER}-real", "runs as a real container"

    assert served(lab, name, "/index.html") == "<h1>served from the consumer's ConfigMap</h1>\n"
    assert served(lab, name, "/greeting") == "hello from a Secret\n"
    # The pull Secret is on the provider and the remote pod names it, so a remote pull would authenticate.
    pull = remote(lab, "secret", "pull")
    assert pull["type"] == "kubernetes.io/dockerconfigjson"
    assert base64.b64decode(pull["data"][".dockerconfigjson"]).decode() == dockerconfig
    assert remote_pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]

    # The token is the consumer's, for this pod's service account, bound to the account's binding Secret there.
    assert served(lab, name, "/namespace") == NAMESPACE
    consumer_ca = local(lab, "configmap", "kube-root-ca.crt")["data"]["ca.crt"]
    assert served(lab, name, "/ca.crt") == consumer_ca
    provider_ca = remote(lab, "configmap", "kube-root-ca.crt")["data"]["ca.crt"]
    assert provider_ca != consumer_ca, "the provider's own CA bundle is left in place"
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}
    review["spec"] = {"token": served(lab, name, "/token")}
    result = json.loads(lab.kubectl(CONSUMER, "create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout)
    assert result["status"]["authenticated"] is True, result["status"]
    user = result["status"]["user"]
    assert user["username"] == f"system:serviceaccount:{NAMESPACE}:reader"
    assert "authentication.kubernetes.io/pod-uid" not in user.get("extra", {})
    binding = local(lab, "secret", f"catamaran-token-binding.{PROVIDER}.reader")
    assert binding["type"] == "catamaran.io/token-binding"
    # The virtual kubelets may read Secrets and request tokens here because this namespace is offloaded.
    role_binding = local(lab, "rolebinding", "catamaran-vk-reflection")
    assert role_binding["subjects"][0]["name"] == f"system:serviceaccounts:{SYSTEM_NAMESPACE}"
    token_secret = remote(lab, "secret", "catamaran-token.sa.reader")
    assert token_secret["type"] == "Opaque"
    assert token_secret["metadata"]["labels"]["catamaran.io/managed-by"] == "reflection"


KINDS = {
    "configmap": (
        config_map("kinds-cm", {"a": "1"}),
        {"data": {"a": "2"}},
        lambda obj: obj.get("data"),
    ),
    "secret": (
        secret("kinds-secret", {"a": "1"}),
        {"data": {"a": base64.b64encode(b"2").decode()}},
        lambda obj: obj.get("data"),
    ),
    "service": (
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kinds-svc", "namespace": NAMESPACE},
            "spec": {"selector": {"app": "kinds"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        },
        {"spec": {"ports": [{"name": "http", "port": 81, "targetPort": 8080}]}},
        lambda obj: [(p["port"], p["targetPort"]) for p in obj["spec"]["ports"]],
    ),
    "ingress": (
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "kinds-ing", "namespace": NAMESPACE},
            "spec": {"defaultBackend": {"service": {"name": "kinds-svc", "port": {"number": 80}}}},
        },
        {"spec": {"defaultBackend": {"service": {"name": "kinds-svc", "port": {"number": 81}}}}},
        lambda obj: obj["spec"]["defaultBackend"]["service"]["port"]["number"],
    ),
}


TAMPERING = {
    "configmap": {"data": {"a": "evil", "extra": "x"}},
    "secret": {"data": {"a": base64.b64encode(b"evil").decode()}},
    "service": {"spec": {"ports": [{"name": "http", "port": 99, "targetPort": 8080}]}},
    "ingress": {"spec": {"defaultBackend": {"service": {"name": "kinds-svc", "port": {"number": 99}}}}},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_updates_tampering_and_deletions_follow_the_local_object(lab, fed, kind):
    body, update, fields = KINDS[kind]
    name = body["metadata"]["name"]
    apply(lab, body)
    copy = wait_for(lambda: remote(lab, kind, name), timeout=30, what=f"{kind} {name} reflected")
    assert copy["metadata"]["labels"]["catamaran.io/origin-cluster-id"] == CONSUMER
    original = fields(copy)

    lab.kubectl(CONSUMER, "-n", NAMESPACE, "patch", kind, name, "--type=merge", "-p", json.dumps(update))
    updated = fields(local(lab, kind, name))
    assert updated != original
    wait_for(lambda: fields(remote(lab, kind, name) or copy) == updated, timeout=30, what="the update reflected")

    # Tampering on the provider is undone: the reflected fields and the labels alike.
    lab.kubectl(PROVIDER, "-n", TWIN, "patch", kind, name, "--type=merge", "-p", json.dumps(TAMPERING[kind]))
    lab.kubectl(PROVIDER, "-n", TWIN, "label", kind, name, "tampered=yes")

    def corrected():
        copy = remote(lab, kind, name)
        return copy and "tampered" not in copy["metadata"].get("labels", {}) and fields(copy) == updated

    wait_for(corrected, timeout=30, what="the tampered copy corrected")

    uid = remote(lab, kind, name)["metadata"]["uid"]
    lab.kubectl(PROVIDER, "-n", TWIN, "delete", kind, name)
    again = wait_for(
        lambda: (c := remote(lab, kind, name)) and c["metadata"]["uid"] != uid and c,
        timeout=30,
        what="the deleted copy recreated",
    )
    assert fields(again) == updated

    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", kind, name)
    wait_for(lambda: remote(lab, kind, name) is None, timeout=30, what="the copy deleted with its local object")


def test_a_provider_object_of_the_same_name_is_left_alone_and_the_conflict_reported(lab, fed):
    apply(
        lab,
        {**config_map("taken", {"owner": "provider"}), "metadata": {"name": "taken", "namespace": TWIN}},
        cluster=PROVIDER,
    )
    theirs = remote(lab, "configmap", "taken")
    apply(lab, config_map("taken", {"owner": "consumer"}))
    event = wait_for(
        lambda: next(iter(events_on(lab, "ConfigMap", "taken", "ReflectionConflict")), None),
        timeout=30,
        what="the conflict reported on the local ConfigMap",
    )
    assert event["type"] == "Warning"
    assert f"{TWIN}/taken" in event["message"]
    after = remote(lab, "configmap", "taken")
    assert after["data"] == {"owner": "provider"}
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "configmap", "taken")
    assert remote(lab, "configmap", "taken")["metadata"]["uid"] == theirs["metadata"]["uid"]


def test_services_get_provider_addresses_and_endpoints_not_already_on_the_provider(lab, fed, lab_config_in_use):
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web-headless", "namespace": NAMESPACE},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]},
    }
    # Its address is set here, from the range's low band, which the API server keeps for addresses asked for: the
    # provider's own allocation (random, from the high band) cannot be it by chance. Both labs' ranges are the same.
    static_ip = str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).network_address + 12)
    web = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "selector": {"app": "web"},
            "clusterIP": static_ip,
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        },
    }
    # A Service without selector whose endpoint is a consumer-side address (a pod on the consumer, say).
    external = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "external", "namespace": NAMESPACE},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }
    # An address in the consumer's pod range (whichever lab this is), on none of its pods.
    external_ip = str(ipaddress.ip_network(lab_config_in_use.cluster(CONSUMER).pod_cidr).network_address + 9)
    external_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "external-1",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": "external"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        "endpoints": [{"addresses": [external_ip], "conditions": {"ready": True}, "nodeName": f"{CONSUMER}-node-0"}],
    }
    apply(lab, headless, web, external, external_slice)
    copy = wait_for(lambda: remote(lab, "service", "web"), timeout=30, what="Service web reflected")
    mine = local(lab, "service", "web")
    assert copy["spec"]["clusterIP"] not in ("", "None", mine["spec"]["clusterIP"]), "allocated by the provider"
    assert wait_for(lambda: remote(lab, "service", "web-headless"))["spec"]["clusterIP"] == "None"

    # The app's pod runs on this provider: its endpoint is in the provider's own slice, not a reflected one.
    pod_ip = remote(lab, "pod", running_app_pod(lab)["metadata"]["name"])["status"]["podIP"]

    def provider_slices():
        slices = get_json(lab, PROVIDER, "endpointslices", "-n", TWIN, "-l", "kubernetes.io/service-name=web")["items"]
        return slices if any(e for s in slices for e in s.get("endpoints") or []) else None

    # The provider's endpoint-slice controller retries with backoff when its cache lags: give it time.
    slices = wait_for(provider_slices, timeout=90, what="the provider's own EndpointSlice for web")
    own = [
        s
        for s in slices
        if s["metadata"]["labels"].get("endpointslice.kubernetes.io/managed-by") != "reflection.catamaran.io"
    ]
    reflected = [s for s in slices if s not in own]
    assert [a for s in own for e in s["endpoints"] for a in e["addresses"]] == [pod_ip]
    assert all(not s.get("endpoints") for s in reflected), "the offloaded pod's local endpoint is not reflected"

    copy = wait_for(lambda: remote(lab, "endpointslice", "external-1"), timeout=30, what="the external slice reflected")
    assert copy["endpoints"][0]["addresses"] == [external_ip]
    assert copy["endpoints"][0]["conditions"]["ready"] is True
    external_slice["endpoints"][0]["conditions"]["ready"] = False
    apply(lab, external_slice)
    wait_for(
        lambda: remote(lab, "endpointslice", "external-1")["endpoints"][0]["conditions"]["ready"] is False,
        timeout=30,
        what="the ready flag followed",
    )


def test_remote_probe_failures_show_on_the_local_pod_with_a_growing_count(lab, fed):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "unready", "namespace": NAMESPACE},
        "spec": {
            **{k: v for k, v in app_deployment()["spec"]["template"]["spec"].items() if k != "containers"},
            "containers": [
                {
                    **app_deployment()["spec"]["template"]["spec"]["containers"][0],
                    "readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1},
                }
            ],
        },
    }
    apply(lab, pod)

    def unhealthy_count():
        events = events_on(lab, "Pod", "unready", "Unhealthy")
        return events[0]["count"] if events else None

    first = wait_for(unhealthy_count, timeout=90, what="the remote Unhealthy event on the local pod")
    later = wait_for(lambda: (c := unhealthy_count()) and c > first and c, timeout=60, what="its count growing")
    assert later > first
    event = events_on(lab, "Pod", "unready", "Unhealthy")[0]
    assert event["source"]["component"] == f"{PROVIDER} (remote)"
    assert "Readiness probe failed" in event["message"]
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "unready", "--wait=false")


def reflection_settings(lab, settings: dict | None) -> None:
    patch = {"spec": {"reflection": settings}}
    lab.kubectl(
        CONSUMER, "-n", SYSTEM_NAMESPACE, "patch", "foreigncluster", PROVIDER, "--type=merge", "-p", json.dumps(patch)
    )


def test_policy_knobs_change_what_is_reflected(lab, fed):
    apply(
        lab,
        config_map("plain", {"a": "1"}),
        config_map("skipped", {"a": "1"}, annotations={"catamaran.io/skip-reflection": "true"}),
        config_map("chosen", {"a": "1"}, annotations={"catamaran.io/allow-reflection": "true"}),
        secret("knob-secret", {"a": "1"}),
    )
    for name in ("plain", "chosen"):
        wait_for(lambda n=name: remote(lab, "configmap", n), timeout=30, what=f"{name} reflected")
    wait_for(lambda: remote(lab, "secret", "knob-secret"), timeout=30, what="knob-secret reflected")
    assert remote(lab, "configmap", "skipped") is None, "the skip annotation keeps it local"
    try:
        reflection_settings(lab, {"kinds": {"configMaps": {"policy": "AllowList"}, "secrets": {"workers": 0}}})
        wait_for(lambda: remote(lab, "configmap", "plain") is None, timeout=30, what="plain removed under AllowList")
        wait_for(lambda: remote(lab, "secret", "knob-secret") is None, timeout=30, what="Secrets off with workers 0")
        assert remote(lab, "configmap", "chosen") is not None
        apply(lab, secret("late-secret", {"a": "1"}))
        apply(lab, config_map("late-plain", {"a": "1"}))
        apply(lab, config_map("late-chosen", {"a": "1"}, annotations={"catamaran.io/allow-reflection": "true"}))
        wait_for(lambda: remote(lab, "configmap", "late-chosen"), timeout=30, what="an allowed ConfigMap reflected")
        assert remote(lab, "configmap", "late-plain") is None
        assert remote(lab, "secret", "late-secret") is None
    finally:
        reflection_settings(lab, None)
    wait_for(lambda: remote(lab, "configmap", "plain"), timeout=30, what="plain back with the default policy")
    wait_for(lambda: remote(lab, "secret", "late-secret"), timeout=30, what="Secrets back")


def test_a_claim_is_provisioned_on_the_provider_and_a_local_volume_stands_for_it(lab, fed):
    # The provider's storage: a local volume on its real node, of a class the peering names.
    path = lab.root / "volumes" / "reflect-data"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    provider_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    provider_volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "lab-reflect-data"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": STORAGE_CLASS,
            "local": {"path": str(path)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [f"{PROVIDER}-real"]}
                            ]
                        }
                    ]
                }
            },
        },
    }
    apply(lab, provider_class, provider_volume, cluster=PROVIDER)
    reflection_settings(lab, {"storageClassName": STORAGE_CLASS})
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": NAMESPACE},
        "spec": {
            "storageClassName": "catamaran",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Mi"}},
        },
    }
    template = app_deployment()["spec"]["template"]["spec"]
    writer = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "writer", "namespace": NAMESPACE},
        "spec": {
            "securityContext": template["securityContext"],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "writer",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "echo written-on-the-provider > /data/proof; exec sleep 3600"],
                    "securityContext": template["containers"][0]["securityContext"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    try:
        apply(lab, claim, writer)
        wait_for(
            lambda: (local(lab, "pod", "writer") or {}).get("status", {}).get("phase") == "Running",
            timeout=120,
            what="the pod with the claim Running",
        )
        bound = local(lab, "pvc", "data")
        assert bound["status"]["phase"] == "Bound"
        volume = get_json(lab, CONSUMER, "pv", bound["spec"]["volumeName"])
        terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == [NODE], "the local volume stands for the virtual node"
        copy = remote(lab, "pvc", "data")
        assert copy["spec"]["storageClassName"] == STORAGE_CLASS
        assert copy["spec"]["volumeName"] == "lab-reflect-data"
        wait_for(lambda: (path / "proof").exists(), timeout=30, what="the file written through the provider's volume")
        assert (path / "proof").read_text() == "written-on-the-provider\n"

        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "writer", "--grace-period=1")
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pvc", "data", "--timeout=60s")
        wait_for(
            lambda: remote(lab, "pvc", "data") is None,
            timeout=60,
            what="the provider's claim deleted with the local one",
        )
        wait_for(
            lambda: lab.kubectl(CONSUMER, "get", "pv", volume["metadata"]["name"], check=False).returncode != 0,
            timeout=60,
            what="the released local volume removed",
        )
    finally:
        reflection_settings(lab, None)
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "writer", "--ignore-not-found", "--grace-period=1")
        lab.kubectl(PROVIDER, "delete", "pv", "lab-reflect-data", "--ignore-not-found", "--wait=false")


def test_ending_the_offloading_removes_every_copy_and_nothing_else(lab, fed):
    apply(
        lab,
        {**config_map("not-ours", {"owner": "provider"}), "metadata": {"name": "not-ours", "namespace": TWIN}},
        cluster=PROVIDER,
    )
    copies = get_json(
        lab, PROVIDER, "configmaps,secrets,services,endpointslices,ingresses", "-n", TWIN, "-l", REFLECTED
    )
    assert len(copies["items"]) >= 5
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "namespaceoffloading", "offloading", "--wait=false")

    def copies_gone():
        result = lab.kubectl(
            PROVIDER, "-n", TWIN, "get", "configmaps,secrets,services,endpointslices,ingresses", "-l", REFLECTED,
            "-o", "name", check=False,
        )  # fmt: skip
        return result.returncode == 0 and not result.stdout.strip()

    wait_for(copies_gone, timeout=120, interval=0.2, what="every reflected copy removed from the twin")
    # Removed by the reflectors, one by one: the object Catamaran did not create was not among them.
    assert remote(lab, "configmap", "not-ours")["data"] == {"owner": "provider"}
    wait_for(
        lambda: lab.kubectl(PROVIDER, "get", "namespace", TWIN, check=False).returncode != 0,
        timeout=120,
        what="the twin removed",
    )
    assert local(lab, "configmap", "page") is not None, "the local objects stay"
    wait_for(
        lambda: local(lab, "rolebinding", "catamaran-vk-reflection") is None,
        timeout=60,
        what="the virtual kubelets' reflection rights gone with the offloading",
    )
