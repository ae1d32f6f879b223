"""Offloaded pods as in-cluster API clients: a real client (kubectl, from the lab's image built from the pinned
kubernetes module) with nothing but its in-cluster configuration, offloaded to a provider's real node.

The peering declares where the provider's pods reach the consumer's API server (spec.homeAPIServer; in the lab, a
host address every real node reaches); the virtual kubelet points the pod's KUBERNETES_SERVICE_* there, and the pod's
token and CA are the consumer's (reflected). So the client speaks to its home API server as its own service account,
held to the consumer's RBAC. A pod may choose the provider's API server or none (catamaran.io/api-server-access).
"""

from __future__ import annotations

import base64
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
    "subjects": [
        {"kind": "ServiceAccount", "name": "default", "namespace": NAMESPACE},
        {"kind": "ServiceAccount", "name": "shared", "namespace": NAMESPACE},
    ],
}
SHARED_ACCOUNT = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "shared"}}
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@pytest.fixture(scope="module")
def home(lab, lab_config_in_use):
    for name in (CONSUMER, PROVIDER):
        require_real_node(lab_config_in_use.cluster(name))
    url = federation.gateway_facts(lab, CONSUMER)["api_server"]
    with federation.one_real_peering(lab, CONSUMER, PROVIDER, NAMESPACE, homeAPIServer=url):
        body = {"apiVersion": "v1", "kind": "List", "items": [POD_READER, READS_PODS, SHARED_ACCOUNT]}
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(body))
        yield url


def kubectl_pod(lab, name: str, access: str | None = None, account: str | None = None) -> None:
    """An offloaded pod holding kubectl, idle until the test runs it (kubectl exec, through the virtual node)."""
    pod = real_pod(
        name,
        ["sleep", "3600"],
        container={"image": kubectl_image_name(read_pins().kubernetes), "env": [{"name": "HOME", "value": "/tmp"}]},
        **TO_VIRTUAL_NODE,
        **({"serviceAccountName": account} if account else {}),
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


def token_review(lab, token: str) -> dict:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    return json.loads(lab.kubectl(CONSUMER, "create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout)[
        "status"
    ]


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_pods_of_one_service_account_share_its_token_until_its_last_pod_leaves(lab, home):
    """The pods of a service account on a virtual node share one token per audience and lifetime, issued by the
    consumer and bound to a binding Secret of the virtual kubelet's: valid while any of them runs there, with the
    pods' own lifetime, refreshed before 80 % of it, bound anew at once when its binding is deleted under them,
    revoked when the last one goes."""
    binding = f"catamaran-token-binding.{PROVIDER}.shared"
    kubectl_pod(lab, "shared-1", account="shared")
    kubectl_pod(lab, "shared-2", account="shared")
    tokens = {}
    for pod in ("shared-1", "shared-2"):
        read = in_pod(lab, pod, "cat", TOKEN_PATH)
        assert read.returncode == 0, read.stderr
        tokens[pod] = read.stdout.strip()
        whoami = in_pod(lab, pod, "kubectl", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert (whoami.returncode, whoami.stdout) == (0, f"system:serviceaccount:{NAMESPACE}:shared"), whoami.stderr
    assert tokens["shared-1"] == tokens["shared-2"], "the account's pods share its token"
    token = tokens["shared-1"]

    # Bound to the binding Secret on the consumer (not to a pod), with the lifetime the pods' projection asks for.
    found = json.loads(lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "secret", binding, "-o", "json").stdout)
    assert found["type"] == "catamaran.io/token-binding"
    assert "data" not in found, "the binding holds nothing"
    issued = claims(token)
    bound = issued["kubernetes.io"]
    assert bound["secret"] == {"name": binding, "uid": found["metadata"]["uid"]}
    assert "pod" not in bound
    assert issued["exp"] - issued["iat"] == 3607
    status = token_review(lab, token)
    assert status["authenticated"] is True, status
    assert status["user"]["username"] == f"system:serviceaccount:{NAMESPACE}:shared"
    # One Secret in the twin for the account, to be refreshed at 80 % of the lifetime.
    shared = json.loads(
        lab.kubectl(PROVIDER, "-n", TWIN, "get", "secret", "catamaran-token.sa.shared", "-o", "json").stdout
    )
    refresh_at = int(shared["metadata"]["annotations"]["catamaran.io/token-refresh-at"])
    assert abs(refresh_at - (issued["iat"] + 0.8 * 3607)) <= 10, (refresh_at, issued["iat"])
    assert base64.b64decode(shared["data"]["token.3607s"]).decode() == token

    # Tampered with on the provider, the Secret is rewritten with a fresh token, as at its refresh time.
    lab.kubectl(
        PROVIDER,
        "-n",
        TWIN,
        "annotate",
        "--overwrite",
        "secret",
        "catamaran-token.sa.shared",
        "catamaran.io/token-refresh-at=0",
    )

    def reissued(*before: str) -> str | None:
        secret = json.loads(
            lab.kubectl(PROVIDER, "-n", TWIN, "get", "secret", "catamaran-token.sa.shared", "-o", "json").stdout
        )
        newest = base64.b64decode(secret["data"]["token.3607s"]).decode()
        return newest if newest not in before else None

    fresh = wait_for(lambda: reissued(token), timeout=30, what="the account's token reissued")
    assert token_review(lab, fresh)["authenticated"] is True

    # Its binding deleted on the consumer, by anyone, the tokens bound to it are refused at once. The virtual kubelet
    # writes the account's Secret again now, bound to a new binding, not at its refresh time 48 minutes later.
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "secret", binding, "--wait=true", timeout=60)
    wait_for(
        lambda: (s := token_review(lab, fresh)).get("authenticated") is not True and s,
        timeout=30,
        what="the token refused once its binding is deleted",
    )
    renewed = wait_for(lambda: reissued(token, fresh), timeout=30, what="the token written again, bound anew")
    again = json.loads(lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "secret", binding, "-o", "json").stdout)
    assert again["metadata"]["uid"] != found["metadata"]["uid"]
    assert claims(renewed)["kubernetes.io"]["secret"] == {"name": binding, "uid": again["metadata"]["uid"]}
    assert token_review(lab, renewed)["authenticated"] is True

    # One pod gone, the token is still good: the other pod of the account runs on.
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "shared-1", "--wait=true", timeout=120)
    assert token_review(lab, renewed)["authenticated"] is True
    assert lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "secret", binding, check=False).returncode == 0
    # The last one gone, the binding goes and both tokens with it.
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "shared-2", "--wait=true", timeout=120)
    wait_for(
        lambda: lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "secret", binding, check=False).returncode != 0,
        timeout=30,
        what="the binding Secret deleted with the account's last pod",
    )
    wait_for(
        lambda: (
            lab.kubectl(PROVIDER, "-n", TWIN, "get", "secret", "catamaran-token.sa.shared", check=False).returncode != 0
        ),
        timeout=30,
        what="the account's token Secret deleted from the twin",
    )
    status = wait_for(
        lambda: (s := token_review(lab, renewed)).get("authenticated") is not True and s,
        timeout=30,
        what="the token refused once its binding is gone",
    )
    assert status.get("error"), status  # the API server says why
