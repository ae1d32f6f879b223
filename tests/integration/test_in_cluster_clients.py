"""Offloaded pods as in-cluster API clients: a real client (kubectl, from the lab's image built from the pinned
kubernetes module) with nothing but its in-cluster configuration, offloaded to a provider's real node.

The peering declares where the provider's pods reach the consumer's API server (spec.homeAPIServer; in the lab, a
host address every real node reaches); the virtual kubelet points the pod's KUBERNETES_SERVICE_* there, and the pod's
token and CA are the consumer's (reflected). So the client speaks to its home API server as its own service account,
held to the consumer's RBAC. A pod may choose the provider's API server or none (catamaran.io/api-server-access).
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import ANNOTATION_API_SERVER_ACCESS, virtual_node_name
from catamaran_lab.binaries import read_pins
from catamaran_lab.images import kubectl_image_name

from . import federation
from .lab_access import require_real_node, wait_for
from .manifests import real_pod

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NAMESPACE = "in-cluster"
TWIN = f"{NAMESPACE}-{CONSUMER}"
TO_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": virtual_node_name(PROVIDER)},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
}
POD_READER = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "pod-reader"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
}
READS_PODS = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "RoleBinding",
    "metadata": {"name": "default-reads-pods"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
    "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NAMESPACE}],
}


@pytest.fixture(scope="module")
def home(lab, lab_config_in_use):
    for name in (CONSUMER, PROVIDER):
        require_real_node(lab_config_in_use.cluster(name))
    url = federation.gateway_facts(lab, CONSUMER)["api_server"]
    with federation.one_real_peering(lab, CONSUMER, PROVIDER, NAMESPACE, homeAPIServer=url):
        body = {"apiVersion": "v1", "kind": "List", "items": [POD_READER, READS_PODS]}
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(body))
        yield url


def kubectl_pod(lab, name: str, access: str | None = None) -> None:
    """An offloaded pod holding kubectl, idle until the test runs it (kubectl exec, through the virtual node)."""
    pod = real_pod(
        name,
        ["sleep", "3600"],
        container={"image": kubectl_image_name(read_pins().kubernetes), "env": [{"name": "HOME", "value": "/tmp"}]},
        **TO_VIRTUAL_NODE,
    )
    if access:
        pod["metadata"]["annotations"] = {ANNOTATION_API_SERVER_ACCESS: access}
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(pod))
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=90s", timeout=120)


def in_pod(lab, pod: str, *command: str):
    return lab.kubectl(CONSUMER, "-n", NAMESPACE, "exec", pod, "--", *command, check=False, timeout=60)


def test_kubectl_offloaded_lists_its_namespaces_pods_on_the_consumer_and_is_refused_the_rest(lab, home):
    kubectl_pod(lab, "client")
    host, port = home.removeprefix("https://").rsplit(":", 1)
    env = in_pod(lab, "client", "env").stdout.split()
    assert f"KUBERNETES_SERVICE_HOST={host}" in env
    assert f"KUBERNETES_SERVICE_PORT={port}" in env
    whoami = in_pod(lab, "client", "kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert (whoami.returncode, whoami.stdout) == (0, f"system:serviceaccount:{NAMESPACE}:default"), whoami.stderr
    # Its own namespace on the consumer (on the provider it is the twin, another name): the pod itself is there.
    listed = in_pod(lab, "client", "kubectl", "get", "pods", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert "pod/client" in listed.stdout.split()
    for refused in (["get", "secrets"], ["get", "pods", "-n", "kube-system"], ["delete", "pod", "client"]):
        answer = in_pod(lab, "client", "kubectl", *refused)
        assert answer.returncode != 0, f"kubectl {' '.join(refused)} was allowed"
        assert "Forbidden" in answer.stderr, answer.stderr


def test_provider_access_speaks_to_the_provider_as_the_twins_default_service_account(lab, home):
    kubectl_pod(lab, "provider-client", access="provider")
    whoami = ["kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]
    # The provider's API server is not on a tenant pod's way until the terms lend it (the twin's NetworkPolicy).
    walled = in_pod(lab, "provider-client", "kubectl", "--request-timeout=5s", *whoami[1:])
    assert walled.returncode != 0, walled.stdout
    federation.grant_terms(lab, CONSUMER, PROVIDER, isolation={"egressToAPIServer": True})
    try:
        answer = wait_for(
            lambda: (a := in_pod(lab, "provider-client", *whoami)).returncode == 0 and a,
            what="the provider's API server answering once lent",
        )
        assert answer.stdout == f"system:serviceaccount:{TWIN}:default", answer.stderr
        # Bound to nothing on the provider: not even the twin's pods.
        listing = in_pod(lab, "provider-client", "kubectl", "get", "pods")
        assert listing.returncode != 0
        assert "Forbidden" in listing.stderr, listing.stderr
    finally:
        federation.grant_terms(lab, CONSUMER, PROVIDER)


def test_disabled_access_mounts_no_token_at_all(lab, home):
    kubectl_pod(lab, "no-client", access="disabled")
    listing = in_pod(lab, "no-client", "ls", "/var/run/secrets/kubernetes.io/serviceaccount")
    assert listing.returncode != 0, listing.stdout
    answer = in_pod(lab, "no-client", "kubectl", "get", "pods")
    assert answer.returncode != 0
