"""The lab's OCI registry (catamaran_lab/registry.py): images pushed to it are pulled by the real nodes' containerd, as
from a private registry, over TLS verified against the registry's own CA and only with an imagePullSecret.

The lab's busybox image is pushed under a repository of the test's own; a pod on a real node runs it, pulled
(`imagePullPolicy: Always`) from the address under which that cluster's node reaches the registry, with a
kubernetes.io/dockerconfigjson Secret holding the credentials of the cluster's registry facts. A wrong password, or
no Secret at all, is refused: the registry answers 401 and the kubelet reports the pull failing.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
import uuid

import pytest

from catamaran_lab.images import ensure_images
from catamaran_lab.paths import GO_MODULE_DIR
from catamaran_lab.registry import USERNAME, dockerconfigjson

from .lab_access import get_json, require_real_node, wait_for
from .manifests import BUSYBOX, real_pod
from .test_fabric import apply

pytestmark = pytest.mark.integration

PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff")
MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def _registry_request(facts: dict, method: str, path: str, password: str | None = None, **headers):
    """An HTTPS request to the registry from the host (127.0.0.1), verified with its CA: (status, headers, body)."""
    port = facts["address"].rsplit(":", 1)[1]
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", method=method, headers=headers)
    if password is not None:
        token = base64.b64encode(f"{facts['username']}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=facts["ca"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def _pull_secret(name: str, address: str, username: str, password: str) -> dict:
    config = dockerconfigjson(address, username, password)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()},
    }


def _pod(name: str, image: str, secret: str | None) -> dict:
    secrets = {"imagePullSecrets": [{"name": secret}]} if secret else {}
    return real_pod(name, ["sleep", "3600"], container={"image": image, "imagePullPolicy": "Always"}, **secrets)


def _waiting(lab, cluster: str, namespace: str, pod: str) -> dict | None:
    statuses = get_json(lab, cluster, "pod", "-n", namespace, pod).get("status", {}).get("containerStatuses") or []
    return statuses[0]["state"].get("waiting") if statuses else None


@pytest.fixture(scope="module")
def cluster(lab_config_in_use):
    cluster = lab_config_in_use.clusters[-1]  # not the first: its address is not the registry's first
    require_real_node(cluster)
    return cluster


@pytest.fixture(scope="module")
def pushed(lab, cluster):
    """The lab's busybox, pushed under a repository of this run's own: (repository, tag, manifest digest)."""
    (busybox,) = [
        image
        for image in ensure_images(lab.cache.dir, lab.cache.pins.kubernetes, GO_MODULE_DIR, lambda _: None)
        if image.name == BUSYBOX
    ]
    repository = f"catamaran-test/busybox-{uuid.uuid4().hex[:8]}"
    tag = lab.push_image(busybox, repository)
    assert tag == BUSYBOX.rsplit(":", 1)[1]
    facts = lab.registry_facts(cluster.name)
    status, headers, _ = _registry_request(
        facts, "HEAD", f"/v2/{repository}/manifests/{tag}", facts["password"], Accept=MANIFEST_TYPES
    )
    assert status == 200, f"the registry does not hold {repository}:{tag} after the push ({status})"
    digest = headers["Docker-Content-Digest"]
    yield repository, tag, digest
    deleted, _, body = _registry_request(facts, "DELETE", f"/v2/{repository}/manifests/{digest}", facts["password"])
    assert deleted == 202, f"deleting {repository}@{digest}: {deleted} {body[:200]!r}"


@pytest.fixture(scope="module")
def namespace(lab, cluster):
    name = f"registry-{uuid.uuid4().hex[:8]}"
    lab.kubectl(cluster.name, "create", "namespace", name)
    wait_for(lambda: lab.kubectl(cluster.name, "-n", name, "get", "sa", "default", check=False).returncode == 0)
    yield name
    lab.kubectl(cluster.name, "-n", name, "delete", "pods", "--all", "--timeout=120s", check=False, timeout=150)
    lab.kubectl(cluster.name, "delete", "namespace", name, "--timeout=120s", check=False, timeout=150)


def test_the_registry_answers_only_over_its_tls_and_with_its_credentials(lab, cluster):
    facts = lab.registry_facts(cluster.name)
    assert facts["address"] == f"{cluster.real_node.host_ip}:{lab.recorded_config().registry_port}"
    assert facts["username"] == USERNAME
    assert lab.registry_facts_file(cluster.name).stat().st_mode & 0o777 == 0o600
    anonymous, headers, _ = _registry_request(facts, "GET", "/v2/")
    assert anonymous == 401
    assert headers["WWW-Authenticate"].startswith("Basic ")
    assert _registry_request(facts, "GET", "/v2/", facts["password"] + "x")[0] == 401
    assert _registry_request(facts, "GET", "/v2/", facts["password"])[0] == 200
    port = facts["address"].rsplit(":", 1)[1]
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"https://127.0.0.1:{port}/v2/", context=ssl.create_default_context(), timeout=10)


def test_a_pod_pulls_a_pushed_image_with_an_image_pull_secret(lab, cluster, pushed, namespace):
    repository, tag, digest = pushed
    facts = lab.registry_facts(cluster.name)
    image = f"{facts['address']}/{repository}:{tag}"
    secret = _pull_secret("registry-credentials", facts["address"], facts["username"], facts["password"])
    items = [secret, _pod("pulled", image, "registry-credentials")]
    apply(lab, cluster.name, namespace, *items)
    lab.kubectl(
        cluster.name, "-n", namespace, "wait", "--for=condition=Ready", "pod/pulled", "--timeout=120s", timeout=150
    )
    pod = get_json(lab, cluster.name, "pod", "-n", namespace, "pulled")
    assert pod["spec"]["nodeName"] == cluster.real_node.name
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"] == image
    # The digest the registry serves for the tag: containerd pulled it from there, not from its own images.
    assert status["imageID"] == f"{facts['address']}/{repository}@{digest}", status
    ran = lab.kubectl(cluster.name, "-n", namespace, "exec", "pulled", "--", "busybox", "true", check=False)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.parametrize("secret", ["wrong-password", None], ids=["wrong-password", "no-secret"])
def test_a_pull_without_the_right_credentials_is_refused(lab, cluster, pushed, namespace, secret):
    repository, tag, _ = pushed
    facts = lab.registry_facts(cluster.name)
    image = f"{facts['address']}/{repository}:{tag}"
    name = f"refused-{secret or 'anonymous'}"
    items = [_pod(name, image, secret)]
    if secret:
        items.insert(0, _pull_secret(secret, facts["address"], facts["username"], facts["password"] + "-wrong"))
    apply(lab, cluster.name, namespace, *items)

    seen: list[dict] = []

    def refused() -> dict | None:
        waiting = _waiting(lab, cluster.name, namespace, name) or {}
        seen.append(waiting)
        message = waiting.get("message", "").lower()
        return waiting if waiting.get("reason") in PULL_FAILURES and "401 unauthorized" in message else None

    try:
        wait_for(refused, timeout=90, interval=1, what=f"the pull of {image} by {name} to be refused")
    except AssertionError as error:
        raise AssertionError(f"{error}; the container's last waiting states: {seen[-3:]}") from None
    pod = get_json(lab, cluster.name, "pod", "-n", namespace, name)
    assert pod["status"]["phase"] == "Pending"
    assert not pod["status"]["containerStatuses"][0]["ready"]


def test_a_node_trusts_the_registry_under_another_clusters_address(lab, lab_config_in_use, cluster, pushed, namespace):
    """An image reference naming another cluster's registry address (the same registry) pulls too: every node's
    containerd trusts each of the lab's addresses."""
    other = next(c for c in lab_config_in_use.clusters if c.name != cluster.name and c.real_node)
    repository, tag, digest = pushed
    address = lab.registry_facts(other.name)["address"]
    assert address != lab.registry_facts(cluster.name)["address"]
    facts = lab.registry_facts(cluster.name)
    items = [
        _pull_secret("other-address", address, facts["username"], facts["password"]),
        _pod("other-address", f"{address}/{repository}:{tag}", "other-address"),
    ]
    apply(lab, cluster.name, namespace, *items)
    lab.kubectl(
        cluster.name,
        "-n",
        namespace,
        "wait",
        "--for=condition=Ready",
        "pod/other-address",
        "--timeout=120s",
        timeout=150,
    )
    (status,) = get_json(lab, cluster.name, "pod", "-n", namespace, "other-address")["status"]["containerStatuses"]
    assert status["imageID"] == f"{address}/{repository}@{digest}", status
