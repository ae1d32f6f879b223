"""A tenant's pods stay in their twin on the provider's network: the NetworkPolicy the provider's manager keeps in
every twin, enforced on the provider's real node by the lab's NetworkPolicy engine (kube-router), consumer cluster-1,
provider cluster-2 (docs/tenant-terms.md, *Network*).

From an offloaded pod running on the provider's real node, each destination is tried next to a control that shows it
answers others: its own twin's pod and Service and the cluster DNS answer; the provider's own pods and Services,
another twin's pods and a second tenant's (cluster-3), the node's kubelet port and the API server do not. (The
consumer's pods answer through the fabric: test_fabric.py, whose offloaded pods run under the same policy.) The tests
run in file order, on the package's peering, in namespaces `walled` and `walled-next`.
"""

from __future__ import annotations

import contextlib
import functools
import json

import pytest

from catamaran.constants import TENANT_TERMS_NAME, virtual_node_name

from .. import federation
from ..lab_access import get_json, require_real_node, wait_for
from ..manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, http_service, real_pod
from . import CONSUMER, PROVIDER

pytestmark = pytest.mark.integration

NAMESPACE, NEXT = "walled", "walled-next"
TWIN, NEXT_TWIN = f"{NAMESPACE}-{CONSUMER}", f"{NEXT}-{CONSUMER}"
SECOND = "cluster-3"  # a second tenant of the same provider
SECOND_TWIN = f"{NAMESPACE}-{SECOND}"
PRIVATE = "provider-private"
TOLERATE_VIRTUAL_NODE = {"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}
SERVE = 'mkdir -p /tmp/www && echo "$MESSAGE" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www'


def web_pod(name: str, remote: bool = True) -> dict:
    """A web pod answering with its name; remote: for the virtual node, which the provider's placement (its real
    node) takes over."""
    pod = real_pod(name, ["sh", "-c", SERVE], container={"env": [{"name": "MESSAGE", "value": name}]})
    if remote:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": virtual_node_name(PROVIDER)}
        pod["spec"]["tolerations"] = [TOLERATE_VIRTUAL_NODE]
    return pod


def running_ip(lab, cluster: str, namespace: str, name: str) -> str:
    def ready():
        result = lab.kubectl(cluster, "-n", namespace, "get", "pod", name, "-o", "json", check=False)
        status = json.loads(result.stdout).get("status", {}) if result.returncode == 0 else {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        return ready and status.get("podIP")

    return wait_for(ready, timeout=90, what=f"{cluster} {namespace}/{name} Ready")


@pytest.fixture(scope="module")
def walled(lab, lab_config_in_use, peering, tmp_path_factory):
    """Offloaded pods in two twins and a provider namespace of its own, all on the provider's real node (its
    placement). Yields the addresses by name, and kubectl with the tenant's token."""
    require_real_node(lab_config_in_use.cluster(PROVIDER))
    tenant = federation.tenant_kubectl(lab, CONSUMER, PROVIDER, tmp_path_factory.mktemp("walled"), duration="30m")
    federation.place(lab, CONSUMER, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    try:
        with (
            federation.offloaded(lab, CONSUMER, PROVIDER, NAMESPACE),
            federation.offloaded(lab, CONSUMER, PROVIDER, NEXT),
            second_tenant(lab),
        ):
            lab.kubectl(PROVIDER, "create", "namespace", PRIVATE)
            try:
                yield _populated(lab, lab_config_in_use), tenant
            finally:
                lab.kubectl(PROVIDER, "delete", "namespace", PRIVATE, "--wait=false", check=False)
    finally:
        federation.grant_terms(lab, CONSUMER, PROVIDER, field_manager="tests")  # the placement taken back


@contextlib.contextmanager
def second_tenant(lab):
    """cluster-3 peered with the same provider, served by the package's provider manager and a virtual kubelet of its
    own, its namespace `walled` offloaded there too."""
    federation.install_crds(lab, SECOND)
    federation.peer(lab, SECOND, PROVIDER)
    federation.place(lab, SECOND, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    processes = [federation.virtual_kubelet(lab, SECOND, PROVIDER)]
    with federation.running(lab, SECOND, PROVIDER, processes), federation.offloaded(lab, SECOND, PROVIDER, NAMESPACE):
        yield


def cluster_ip(lab, namespace: str, name: str) -> str | None:
    result = lab.kubectl(PROVIDER, "-n", namespace, "get", "service", name, "-o", "json", check=False)
    return json.loads(result.stdout)["spec"].get("clusterIP") if result.returncode == 0 else None


def _populated(lab, lab_config) -> dict:
    apply = ["apply", "-f", "-"]
    lab.kubectl(
        CONSUMER,
        "-n",
        NAMESPACE,
        *apply,
        input=federation.as_list([web_pod("client"), web_pod("peer"), http_service("peer")]),
    )
    lab.kubectl(CONSUMER, "-n", NEXT, *apply, input=federation.as_list([web_pod("other"), web_pod("other-peer")]))
    lab.kubectl(SECOND, "-n", NAMESPACE, *apply, input=federation.as_list([web_pod("third"), web_pod("third-peer")]))
    wait_for(lambda: lab.kubectl(PROVIDER, "-n", PRIVATE, "get", "sa", "default", check=False).returncode == 0)
    own = [web_pod("private", remote=False), web_pod("neighbor", remote=False), http_service("private")]
    lab.kubectl(PROVIDER, "-n", PRIVATE, *apply, input=federation.as_list(own))
    placed = (
        ("client", TWIN),
        ("peer", TWIN),
        ("other", NEXT_TWIN),
        ("other-peer", NEXT_TWIN),
        ("third", SECOND_TWIN),
        ("third-peer", SECOND_TWIN),
    )
    addresses = {
        name: running_ip(lab, PROVIDER, namespace, name)
        for name, namespace in (*placed, ("private", PRIVATE), ("neighbor", PRIVATE))
    }
    for name, namespace in (("peer", TWIN), ("private", PRIVATE)):
        addresses[f"{name}-service"] = wait_for(
            functools.partial(cluster_ip, lab, namespace, name), what=f"Service {namespace}/{name} on the provider"
        )
    addresses["node"] = lab_config.cluster(PROVIDER).real_node.node_ip
    addresses["api-server"] = get_json(lab, PROVIDER, "service", "-n", "default", "kubernetes")["spec"]["clusterIP"]
    return addresses


def fetch(lab, namespace: str, pod: str, url: str) -> tuple[bool, str]:
    """From `pod` on the provider: whether a server answered (a page, or an HTTP error such as the answer of a TLS
    port to plain HTTP), and what wget said."""
    result = lab.kubectl(
        PROVIDER, "-n", namespace, "exec", pod, "--", "timeout", "5", "wget", "-qO-", url, check=False, timeout=30
    )
    said = (result.stdout + result.stderr).strip()
    return result.returncode == 0 or "server returned error" in said, said


def test_the_twin_holds_the_providers_policy_which_the_tenant_cannot_change(lab, walled):
    _, tenant = walled
    policy = get_json(lab, PROVIDER, "networkpolicy", "-n", TWIN, TENANT_TERMS_NAME)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    deleted = tenant("-n", TWIN, "delete", "networkpolicy", TENANT_TERMS_NAME)
    assert deleted.returncode != 0
    assert "forbidden" in deleted.stderr.lower(), deleted.stderr
    opened = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "open", "namespace": TWIN},
    }
    opened["spec"] = {"podSelector": {}, "ingress": [{}], "egress": [{}]}
    created = tenant("create", "-f", "-", input=json.dumps(opened))
    assert created.returncode != 0
    assert "forbidden" in created.stderr.lower(), created.stderr


def test_a_tenant_pod_reaches_its_twin_and_the_cluster_dns(lab, walled):
    addresses, _ = walled
    assert fetch(lab, TWIN, "client", f"http://{addresses['peer']}:8080/") == (True, "peer")
    assert fetch(lab, TWIN, "client", f"http://{addresses['peer-service']}/") == (True, "peer")
    by_name = fetch(lab, TWIN, "client", f"http://peer.{TWIN}.svc.cluster.local/")  # the cluster DNS answers
    assert by_name == (True, "peer"), by_name


@pytest.mark.parametrize(
    ("target", "url"),
    [
        ("a pod of the provider's own", "http://{private}:8080/"),
        ("a Service of the provider's own", "http://{private-service}/"),
        ("a pod of another twin", "http://{other}:8080/"),
        ("the node's kubelet port", "http://{node}:10250/"),
        ("the provider's API server", "http://{api-server}:443/"),
    ],
)
def test_nothing_else_of_the_provider_answers_a_tenant_pod_but_answers_others(lab, walled, target, url):
    addresses, _ = walled
    url = url.format(**addresses)
    # The control: the destination answers a pod of the provider's own (no policy of its own), or, for another
    # twin's pod, a pod of that twin.
    where = (NEXT_TWIN, "other-peer") if target == "a pod of another twin" else (PRIVATE, "neighbor")
    answered, said = fetch(lab, *where, url)
    assert answered, f"{target} ({url}) does not answer {where}: {said}"
    refused, said = fetch(lab, TWIN, "client", url)
    assert not refused, f"a tenant pod reached {target} ({url}): {said}"


@pytest.mark.parametrize(
    ("twin", "pod", "peer"), [(NEXT_TWIN, "other", "other-peer"), (SECOND_TWIN, "third", "third-peer")]
)
def test_another_twin_and_another_tenant_are_walled_off_both_ways(lab, walled, twin, pod, peer):
    addresses, _ = walled
    assert fetch(lab, twin, peer, f"http://{addresses[pod]}:8080/") == (True, pod), "the control: its own twin"
    assert fetch(lab, TWIN, "client", f"http://{addresses['peer']}:8080/") == (True, "peer"), "the control"
    reached, said = fetch(lab, TWIN, "client", f"http://{addresses[pod]}:8080/")
    assert not reached, f"a pod of {TWIN} reached one of {twin}: {said}"
    reached, said = fetch(lab, twin, pod, f"http://{addresses['peer']}:8080/")
    assert not reached, f"a pod of {twin} reached one of {TWIN}: {said}"


def test_a_lent_namespace_is_reachable_and_taken_back(lab, walled):
    addresses, _ = walled
    federation.grant_terms(lab, CONSUMER, PROVIDER, isolation={"egressToNamespaces": [PRIVATE]})
    try:
        wait_for(
            lambda: fetch(lab, TWIN, "client", f"http://{addresses['private-service']}/")[0],
            what="the lent namespace's Service answering the tenant pod",
        )
    finally:
        federation.grant_terms(lab, CONSUMER, PROVIDER)
    wait_for(
        lambda: not fetch(lab, TWIN, "client", f"http://{addresses['private-service']}/")[0],
        what="the namespace taken back",
    )
