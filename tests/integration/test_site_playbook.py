"""playbooks/site.yml against the lab: converge, idempotence, check mode, pruning, bad input, secrecy.

The playbooks run as users run them: from the collection's artifact installed into an empty collections path
(catamaran.federation.site), so the artifact's roles, module_utils, CRDs and controller wheel are what is tested.
The tests share one federation (cluster-1 consumes cluster-2 and cluster-3, namespace demo
offloaded) and run in order; the module fixture tears it down with catamaran.federation.teardown.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from catamaran import certs
from tests.integration.lab_access import get_json, require_real_node, wait_for
from tests.integration.manifests import http_service, real_pod

from . import commands, playbooks
from .federation import gateway_facts, offload_namespace
from .federation import node_ready as node_ready_status
from .playbooks import hosts, lab_inventory, write_inventory
from .playbooks import run_playbook as run_from

CONSUMER = "cluster-1"
PROVIDERS = ("cluster-2", "cluster-3")
DEMO = playbooks.REPO_ROOT / "examples" / "lab" / "demo.sh"
REPLICAS = 4
INSTALLED: dict = {}  # set by the federation fixture: every playbook of this module runs from the installed artifact


@pytest.fixture(scope="module")
def federation(lab, installed_collections, tmp_path_factory):
    for provider in PROVIDERS:  # the lab inventory places the demo on the providers' real nodes
        require_real_node(lab.recorded_config().cluster(provider))
    INSTALLED["collections"] = installed_collections
    directory = tmp_path_factory.mktemp("site")
    inventory = write_inventory(directory, lab_inventory(), lab)
    yield {"inventory": inventory, "directory": directory}
    teardown = run_playbook(inventory, playbook="teardown.yml")
    lab.kubectl(CONSUMER, "delete", "namespace", "demo", "--wait=false", check=False)
    lab.kubectl(CONSUMER, "delete", "mutatingwebhookconfiguration", "catamaran-pod-offloading", check=False)
    assert teardown.returncode == 0, teardown.failures()


def run_playbook(inventory, *args, **options):
    return run_from(inventory, *args, collections=INSTALLED["collections"], **options)


def variant(lab, federation, name: str, change) -> str:
    inventory = lab_inventory()
    change(hosts(inventory))
    directory = federation["directory"] / name
    directory.mkdir(exist_ok=True)
    return write_inventory(directory, inventory, lab)


def snapshot(lab) -> dict:
    """What a failed or check-mode run must leave exactly as it was."""
    state = {}
    for cluster in (CONSUMER, *PROVIDERS):
        namespaces = get_json(lab, cluster, "namespaces")["items"]
        state[f"{cluster}/namespaces"] = sorted(n["metadata"]["name"] for n in namespaces)
        foreign = lab.kubectl(cluster, "get", "foreignclusters", "-A", "-o", "json", check=False)
        items = json.loads(foreign.stdout)["items"] if foreign.returncode == 0 else []
        state[f"{cluster}/foreignclusters"] = {f["metadata"]["name"]: f["spec"] for f in items}
        offloadings = lab.kubectl(cluster, "get", "namespaceoffloadings", "-A", "-o", "json", check=False)
        items = json.loads(offloadings.stdout)["items"] if offloadings.returncode == 0 else []
        state[f"{cluster}/offloadings"] = {o["metadata"]["namespace"]: o["spec"] for o in items}
    return state


def node_ready(lab, node: str) -> bool:
    return node_ready_status(lab, CONSUMER, node) == "True"


def test_converges_from_empty_and_runs_the_app_remotely(lab, federation):
    assert snapshot(lab)[f"{CONSUMER}/foreignclusters"] == {}, "the lab must start without peerings"
    run = run_playbook(federation["inventory"])
    assert run.returncode == 0, run.failures()
    for provider in PROVIDERS:
        assert node_ready(lab, f"catamaran-{provider}")
    offloading = get_json(lab, CONSUMER, "-n", "demo", "namespaceoffloading", "offloading")
    assert offloading["status"]["offloadingPhase"] == "Ready"
    # Every controller process runs from the wheel the installed artifact ships, in the role's virtual environment.
    installed = INSTALLED["collections"] / "ansible_collections" / "catamaran" / "federation"
    (wheel,) = (installed / "roles" / "controller" / "files").glob("catamaran_controller-*.whl")
    venv = lab.root / "controller" / "venv"  # the lab inventory's controller_state_dir
    assert (venv / f".catamaran-wheel-{hashlib.sha256(wheel.read_bytes()).hexdigest()}").is_file()
    for cluster in (CONSUMER, *PROVIDERS):
        supervisor = int((lab.root / "controller" / cluster / f"manager-{cluster}.pid").read_text())
        assert Path(f"/proc/{supervisor}/cmdline").read_bytes().split(b"\0")[0] == bytes(venv / "bin" / "python")

    # The demo as `make demo` runs it: real containers on the providers' real nodes.
    # Its rollouts wait up to 180 s and 120 s; showing waits up to 150 s for metrics-server's figures.
    deploy = commands.run([DEMO, "deploy"], env=dict(os.environ, CATAMARAN_LAB_DIR=str(lab.root)), timeout=420)
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr

    def running_remotely():
        pods = get_json(lab, CONSUMER, "-n", "demo", "pods", "-l", "app=hello")["items"]
        placed = [p["spec"].get("nodeName", "") for p in pods if p["status"].get("phase") == "Running"]
        return len(placed) == REPLICAS and all(node.startswith("catamaran-cluster-") for node in placed) and placed

    wait_for(running_remotely, timeout=120, what=f"{REPLICAS} demo pods Running on virtual nodes")
    remote = [
        pod
        for provider in PROVIDERS
        for pod in get_json(lab, provider, "-n", "demo-cluster-1", "pods", "-l", "app=hello")["items"]
    ]
    assert len(remote) == REPLICAS
    assert {pod["spec"]["nodeName"] for pod in remote} <= {f"{provider}-real" for provider in PROVIDERS}
    show = commands.run([DEMO, "show"], env=dict(os.environ, CATAMARAN_LAB_DIR=str(lab.root)), timeout=300)
    assert show.returncode == 0, show.stdout + show.stderr
    # What `make demo` prints ends with the pods' and the virtual nodes' metrics, and no error.
    printed = show.stdout + show.stderr
    assert "error:" not in printed.lower(), printed
    assert "no pod metrics" not in show.stdout, printed
    assert "no virtual node metrics" not in show.stdout, printed
    for pod in remote:
        cluster = pod["spec"]["nodeName"].removesuffix("-real")
        assert f"pod {pod['metadata']['name']} runs in {cluster}, on node {cluster}-real" in show.stdout


SERVE = 'mkdir -p /tmp/www && echo "served in $CLUSTER" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www'


@pytest.fixture(scope="module")
def across(lab, federation):
    """A pod offloaded to each provider (pinned to its virtual node), each serving its cluster's name behind a
    Service of its own: `served-in-2`, `served-in-3`. Yields their IPs as the consumer sees them."""
    items = []
    for provider in PROVIDERS:
        name = f"served-in-{provider.removeprefix('cluster-')}"
        pin = {"nodeSelector": {"kubernetes.io/hostname": f"catamaran-{provider}"}, "tolerations": []}
        env = {"env": [{"name": "CLUSTER", "value": provider}]}
        items.append(real_pod(name, ["sh", "-c", SERVE], container=env, **pin))
        items.append(http_service(name))
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    lab.kubectl(CONSUMER, "-n", "demo", "apply", "-f", "-", input=body)
    try:
        ips = {}
        for provider in PROVIDERS:
            name = f"served-in-{provider.removeprefix('cluster-')}"
            lab.kubectl(
                CONSUMER, "-n", "demo", "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=150
            )
            ips[provider] = get_json(lab, CONSUMER, "-n", "demo", "pod", name)["status"]["podIP"]
        yield ips
    finally:
        lab.kubectl(CONSUMER, "-n", "demo", "delete", "-f", "-", "--wait=false", input=body, check=False)


def fetch(lab, namespace: str, pod: str, url: str) -> tuple[int, str]:
    """GET from a pod's containers (an offloaded pod's exec goes through its virtual node)."""
    command = ["exec", pod, "--", "timeout", "5", "wget", "-qO-", url]
    fetched = lab.kubectl(CONSUMER, "-n", namespace, *command, check=False, timeout=30)
    return fetched.returncode, fetched.stdout.strip()


def test_an_offloaded_pod_on_one_provider_calls_a_service_on_the_other_by_name(lab, federation, across):
    """Provider to provider: a pod offloaded to cluster-2 calls, by name, a Service whose one endpoint runs in
    cluster-3. No tunnel joins the two providers: the consumer's gateway carries the request from one peering's
    tunnel into the other's, to the address cluster-1 sees the pod at (remapped when the ranges overlap)."""

    def reflected_into_2():
        slices = get_json(lab, "cluster-2", "-n", "demo-cluster-1", "endpointslices")["items"]
        return [
            address
            for item in slices
            if (item["metadata"].get("labels") or {}).get("kubernetes.io/service-name") == "served-in-3"
            for endpoint in item.get("endpoints") or []
            for address in endpoint["addresses"]
        ]

    # cluster-2 holds the endpoint at the address cluster-1 sees it at, which cluster-1 routes to cluster-3.
    seen_ip = across["cluster-3"]
    assert wait_for(reflected_into_2, timeout=60, what="served-in-3's endpoint reflected into cluster-2") == [seen_ip]
    # The twin is demo-cluster-1 (DefaultName): the short name is what resolves there. The Service was just reflected:
    # cluster-2's kube-proxy may not have programmed its ClusterIP yet.
    for url in ("http://served-in-3/", f"http://{seen_ip}:8080/"):
        wait_for(
            lambda url=url: fetch(lab, "demo", "served-in-2", url) == (0, "served in cluster-3"),
            timeout=30,
            interval=1,
            what=f"{url} answered from cluster-2 by cluster-3's pod",
        )


ONLY_ON_3 = "only-on-3"  # a consumer namespace extended to cluster-3 alone
OWN_2 = "own-2"  # a namespace of cluster-2's own, not a tenant's


@pytest.fixture
def not_shared_with_2(lab, federation):
    """A pod of consumer namespace only-on-3 (extended to cluster-3 alone) serving on cluster-3, and a pod of
    cluster-2's own on its real node. Yields the first's IP as the consumer sees it."""
    lab.kubectl(CONSUMER, "create", "namespace", ONLY_ON_3)
    lab.kubectl(PROVIDERS[0], "create", "namespace", OWN_2)
    try:
        to_3 = [{"key": "catamaran.io/remote-cluster-id", "operator": "In", "values": ["cluster-3"]}]
        offload_namespace(
            lab,
            CONSUMER,
            ONLY_ON_3,
            podOffloadingStrategy="Remote",
            clusterSelector={"nodeSelectorTerms": [{"matchExpressions": to_3}]},
        )
        pin = {"nodeSelector": {"kubernetes.io/hostname": "catamaran-cluster-3"}, "tolerations": []}
        env = {"env": [{"name": "CLUSTER", "value": "cluster-3"}]}
        served = real_pod("private", ["sh", "-c", SERVE], container=env, **pin)
        wait_for(lambda: lab.kubectl(CONSUMER, "-n", ONLY_ON_3, "get", "sa", "default", check=False).returncode == 0)
        lab.kubectl(CONSUMER, "-n", ONLY_ON_3, "apply", "-f", "-", input=json.dumps(served))
        own = real_pod("own", ["sleep", "3600"])
        wait_for(lambda: lab.kubectl(PROVIDERS[0], "-n", OWN_2, "get", "sa", "default", check=False).returncode == 0)
        lab.kubectl(PROVIDERS[0], "-n", OWN_2, "apply", "-f", "-", input=json.dumps(own))
        lab.kubectl(
            CONSUMER, "-n", ONLY_ON_3, "wait", "--for=condition=Ready", "pod/private", "--timeout=120s", timeout=150
        )
        lab.kubectl(
            PROVIDERS[0], "-n", OWN_2, "wait", "--for=condition=Ready", "pod/own", "--timeout=120s", timeout=150
        )
        yield get_json(lab, CONSUMER, "-n", ONLY_ON_3, "pod", "private")["status"]["podIP"]
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", ONLY_ON_3, "--timeout=90s", check=False, timeout=120)
        lab.kubectl(PROVIDERS[0], "delete", "namespace", OWN_2, "--wait=false", check=False)


def test_a_provider_reaches_no_consumer_pod_on_another_provider_of_a_namespace_not_extended_to_it(
    lab, federation, across, not_shared_with_2
):
    """Issue 37: through cluster-2's tunnel the consumer's gateway admits only pods of namespaces extended to
    cluster-2, wherever they run; never the rest of cluster-3's range. The same pod of cluster-2's own, by the same
    path, reaches demo's pod on cluster-3 (demo is extended to both) and not only-on-3's, which the consumer reaches."""
    front = lab.kubectl(CONSUMER, "-n", "demo-front", "get", "pods", "-l", "app=front", "-o", "name").stdout.split()[0]
    from_consumer = ["-n", "demo-front", "exec", front.removeprefix("pod/"), "--", "timeout", "5", "wget", "-qO-"]
    from_own_pod = ["-n", OWN_2, "exec", "own", "--", "timeout", "5", "wget", "-qO-"]
    private = f"http://{not_shared_with_2}:8080/"
    shared = f"http://{across['cluster-3']}:8080/"
    # The controls: the consumer reaches the private pod; cluster-2's own pod reaches the shared one through the hub.
    wait_for(
        lambda: (
            lab.kubectl(CONSUMER, *from_consumer, private, check=False, timeout=30).stdout.strip()
            == "served in cluster-3"
        ),
        timeout=30,
        interval=1,
        what=f"{private} answering the consumer",
    )
    wait_for(
        lambda: (
            lab.kubectl(PROVIDERS[0], *from_own_pod, shared, check=False, timeout=30).stdout.strip()
            == "served in cluster-3"
        ),
        timeout=30,
        interval=1,
        what=f"{shared} (demo, extended to both) answering cluster-2's own pod",
    )
    refused = lab.kubectl(PROVIDERS[0], *from_own_pod, private, check=False, timeout=30)
    assert refused.returncode != 0, refused.stdout
    assert "served" not in refused.stdout


def test_cutting_one_peerings_tunnel_stops_its_traffic_and_nothing_elses(lab, federation, across):
    """The underlay path of cluster-3's tunnel cut (its WireGuard packets dropped in cluster-1's gateway): cluster-3's
    pods are unreachable from the consumer and from cluster-2, as nothing but the fabric routes pod ranges, while
    cluster-2's peering carries on; restored, the tunnel carries cluster-3's traffic again."""
    front = lab.kubectl(CONSUMER, "-n", "demo-front", "get", "pods", "-l", "app=front", "-o", "name").stdout.split()[0]
    front = front.removeprefix("pod/")
    netns = gateway_facts(lab, CONSUMER)["network_namespace"]
    far_gateway = gateway_facts(lab, "cluster-3")["gateway_address"]
    cut = [
        ["OUTPUT", "-d", far_gateway, "-p", "udp", "-j", "DROP"],
        ["INPUT", "-s", far_gateway, "-p", "udp", "-j", "DROP"],
    ]

    def iptables(action: str, rule: list[str]) -> None:
        subprocess.run(["ip", "netns", "exec", netns, "iptables", action, *rule], check=True, capture_output=True)

    def network_ready(provider: str) -> str | None:
        foreign = get_json(lab, CONSUMER, "-n", "catamaran-system", "foreigncluster", provider)
        conditions = (foreign.get("status") or {}).get("conditions") or []
        return next((c["status"] for c in conditions if c["type"] == "NetworkReady"), None)

    for rule in cut:
        iptables("-I", rule)
    try:
        wait_for(lambda: network_ready("cluster-3") == "False", timeout=60, what="cluster-3's NetworkReady False")
        assert network_ready("cluster-2") == "True"
        assert fetch(lab, "demo-front", front, f"http://{across['cluster-2']}:8080/") == (0, "served in cluster-2")
        assert fetch(lab, "demo-front", front, f"http://{across['cluster-3']}:8080/")[0] != 0
        assert fetch(lab, "demo", "served-in-2", f"http://{across['cluster-3']}:8080/")[0] != 0
    finally:
        for rule in cut:
            iptables("-D", rule)
    wait_for(lambda: network_ready("cluster-3") == "True", timeout=60, what="cluster-3's NetworkReady True again")
    url = f"http://{across['cluster-3']}:8080/"
    for namespace, pod in (("demo-front", front), ("demo", "served-in-2")):
        wait_for(lambda n=namespace, p=pod: fetch(lab, n, p, url)[0] == 0, timeout=30, what=f"{url} answering {pod}")
        assert fetch(lab, namespace, pod, url) == (0, "served in cluster-3")


def test_second_run_changes_nothing(lab, federation):
    run = run_playbook(federation["inventory"])
    assert run.returncode == 0, run.failures()
    assert run.changed() == {"cluster-1": 0, "cluster-2": 0, "cluster-3": 0}


def test_check_diff_shows_changes_and_changes_nothing(lab, federation):
    def change(clusters):
        clusters[CONSUMER]["catamaran_peerings"][0]["sharing_percentage"] = 30
        clusters[CONSUMER]["catamaran_offloaded_namespaces"][0]["pod_offloading_strategy"] = "LocalAndRemote"

    inventory = variant(lab, federation, "check", change)
    before = snapshot(lab)
    run = run_playbook(inventory, "--check", "--diff", json_output=False)
    assert run.returncode == 0, run.output[-3000:]
    for line in (
        r"-\s+sharingPercentage: 50",
        r"\+\s+sharingPercentage: 30",
        r"\+\s+podOffloadingStrategy: LocalAndRemote",
    ):
        assert re.search(rf"^{line}$", run.output, re.MULTILINE), f"the diff lacks {line}"
    assert snapshot(lab) == before


@pytest.mark.parametrize(
    ("case", "change", "expected"),
    [
        (
            "refused-credential",
            lambda h: h["cluster-3"].update(catamaran_kubeconfig="{{ inventory_dir }}/refused.kubeconfig"),
            "cluster-3: GET the API server: Unauthorized",
        ),
        ("wrong-context", lambda h: h["cluster-2"].update(catamaran_context="cluster-9"), "context 'cluster-9' is not"),
        (
            "privileged-not-lent",
            lambda h: h[CONSUMER]["catamaran_peerings"][1].update(pod_security="privileged"),
            "pod_security privileged is not allowed by provider cluster-3 "
            "(host cluster-3: catamaran_allowed_pod_security is restricted, baseline)",
        ),
        (
            "bad-label-key",
            lambda h: h[CONSUMER]["catamaran_peerings"][1].update(node_labels={"tier/": "gold"}),
            "catamaran_peerings[1]: node_labels: label key 'tier/'",
        ),
        (
            "sharing-150",
            lambda h: h[CONSUMER]["catamaran_peerings"][1].update(sharing_percentage=150),
            "sharing_percentage must be an integer from 1 to 100, got 150",
        ),
        (
            "unknown-cluster",
            lambda h: h[CONSUMER]["catamaran_peerings"].append({"provider": "cluster-9"}),
            "no cluster with id 'cluster-9' in the inventory",
        ),
        (
            # One letter off each, read as nothing declared: this would un-peer both providers and stop offloading.
            "misspelt-variables",
            lambda h: h[CONSUMER].update(
                catamaran_peering=h[CONSUMER].pop("catamaran_peerings"),
                catamaran_offloaded_namespace=h[CONSUMER].pop("catamaran_offloaded_namespaces"),
            ),
            "the inventory has 2 errors:\n"
            "- host cluster-1: unknown variable catamaran_offloaded_namespace (did you mean "
            "catamaran_offloaded_namespaces?)\n"
            "- host cluster-1: unknown variable catamaran_peering (did you mean catamaran_peerings?)",
        ),
        (
            "emptied-offloading",
            lambda h: h[CONSUMER].update(catamaran_offloaded_namespaces=[]),
            "This run would remove every offloaded namespace (demo) of cluster-1: host cluster-1 declares none of them",
        ),
        (
            "untrusted-certificate",
            lambda h: h["cluster-3"].update(catamaran_kubeconfig="{{ inventory_dir }}/untrusted.kubeconfig"),
            "cluster-3: the TLS handshake with https://",
        ),
    ],
)
def test_bad_input_fails_before_any_change(lab, federation, case, change, expected):
    def bad(clusters):
        # A change that would be applied if the run got that far.
        clusters[CONSUMER]["catamaran_peerings"][0]["sharing_percentage"] = 20
        change(clusters)

    inventory = variant(lab, federation, case, bad)
    # A cluster that answers but refuses the credential is a configuration error, not an outage: it stops the run.
    refused = yaml.safe_load(lab.kubeconfig("cluster-3").read_text())
    refused["users"][0]["user"] = {"token": "not-a-valid-token"}
    (inventory.parent / "refused.kubeconfig").write_text(yaml.safe_dump(refused))
    # One that trusts another CA than the API server's: it answers, but may not be the cluster meant.
    untrusted = yaml.safe_load(lab.kubeconfig("cluster-3").read_text())
    untrusted["clusters"][0]["cluster"].pop("certificate-authority", None)
    untrusted["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        certs.make_ca("not the lab's CA")[1]
    ).decode()
    (inventory.parent / "untrusted.kubeconfig").write_text(yaml.safe_dump(untrusted))
    before = snapshot(lab)
    run = run_playbook(inventory)
    assert run.returncode != 0
    assert any(expected in message for message in run.failures()), run.failures()
    assert snapshot(lab) == before


def test_an_insecure_kubeconfig_is_honoured_with_a_warning(lab, federation):
    def insecure(clusters):
        clusters["cluster-3"]["catamaran_kubeconfig"] = "{{ inventory_dir }}/insecure.kubeconfig"

    inventory = variant(lab, federation, "insecure", insecure)
    document = yaml.safe_load(lab.kubeconfig("cluster-3").read_text())
    cluster = document["clusters"][0]["cluster"]
    for key in ("certificate-authority", "certificate-authority-data"):
        cluster.pop(key, None)
    cluster["insecure-skip-tls-verify"] = True
    (inventory.parent / "insecure.kubeconfig").write_text(yaml.safe_dump(document))
    run = run_playbook(inventory, playbook="validate.yml")
    assert run.returncode == 0, run.failures()
    document = json.loads(run.stdout[run.stdout.index("{") :])
    probe = next(t for p in document["plays"] for t in p["tasks"] if t["task"]["name"].startswith("Reach the cluster"))
    warnings = {host: result.get("warnings") or [] for host, result in probe["hosts"].items()}
    assert [w for w in warnings["cluster-3"] if "cluster-3: the API server's certificate is not verified" in w]
    assert warnings["cluster-1"] == warnings["cluster-2"] == []


def test_credentials_never_appear_even_with_vvv(lab, federation):
    token_b64 = lab.kubectl(
        "cluster-2",
        "-n",
        "catamaran-tenant-cluster-1",
        "get",
        "secret",
        "catamaran-tenant-credential",
        "-o",
        "jsonpath={.data.token}",
    ).stdout
    token = base64.b64decode(token_b64).decode()
    stored = lab.kubectl(
        CONSUMER,
        "-n",
        "catamaran-system",
        "get",
        "secret",
        "catamaran-credentials-cluster-2",
        "-o",
        "jsonpath={.data.kubeconfig}",
    ).stdout
    # Remove the credential so the run re-creates it and prints its diff.
    lab.kubectl(CONSUMER, "-n", "catamaran-system", "delete", "secret", "catamaran-credentials-cluster-2")
    run = run_playbook(federation["inventory"], "-vvv", "--diff", json_output=False)
    assert run.returncode == 0, run.output[-3000:]
    assert "create cluster-1: Secret catamaran-system/catamaran-credentials-cluster-2" in run.output
    assert "<redacted sha256:" in run.output
    for secret in (token, token_b64, stored, stored[:40]):
        assert secret not in run.output


def provider_credential(lab, provider: str) -> tuple[str, str]:
    """The tenant's credential Secret on a provider, minted by its manager: (uid, token)."""
    secret = get_json(lab, provider, "-n", "catamaran-tenant-cluster-1", "secret", "catamaran-tenant-credential")
    return secret["metadata"]["uid"], base64.b64decode(secret["data"]["token"]).decode()


def stored_token(lab, provider: str) -> str:
    """The token in the consumer's credential Secret for one provider."""
    secret = get_json(lab, CONSUMER, "-n", "catamaran-system", "secret", f"catamaran-credentials-{provider}")
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return kubeconfig["users"][0]["user"]["token"]


def test_rotating_credentials_hands_the_consumer_new_tokens(lab, federation):
    before = {provider: provider_credential(lab, provider) for provider in PROVIDERS}
    for provider in PROVIDERS:
        assert stored_token(lab, provider) == before[provider][1]

    run = run_playbook(federation["inventory"], "-e", "catamaran_rotate_credentials=true")
    assert run.returncode == 0, run.failures()
    assert run.changed()[CONSUMER] >= 1
    for provider in PROVIDERS:
        uid, token = provider_credential(lab, provider)
        assert uid != before[provider][0], f"{provider}: the credential Secret was not replaced"
        assert token != before[provider][1], f"{provider}: the manager did not mint a new token"
        assert stored_token(lab, provider) == token
        assert token not in run.output
        assert before[provider][1] not in run.output
        # The virtual kubelet swaps the new token in without a restart; its node stays (or turns back) Ready.
        wait_for(lambda p=provider: node_ready(lab, f"catamaran-{p}"), timeout=60, what=f"catamaran-{provider} Ready")

    again = run_playbook(federation["inventory"])
    assert again.returncode == 0, again.failures()
    assert again.changed() == {"cluster-1": 0, "cluster-2": 0, "cluster-3": 0}


def test_removing_a_provider_and_the_namespace_unpeers_cleanly(lab, federation):
    manual = {
        "apiVersion": "core.catamaran.io/v1alpha1",
        "kind": "ForeignCluster",
        "metadata": {"name": "cluster-9", "namespace": "catamaran-system"},
        "spec": {"clusterID": "cluster-9", "credentialsSecretRef": {"name": "not-managed"}},
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(manual))

    def change(clusters):
        clusters[CONSUMER]["catamaran_peerings"] = [{"provider": "cluster-2", "sharing_percentage": 50}]
        clusters[CONSUMER]["catamaran_offloaded_namespaces"] = []
        # Its only offloaded namespace goes: refused without this (test_bad_input_fails_before_any_change).
        clusters[CONSUMER]["catamaran_allow_prune_all"] = True

    inventory = variant(lab, federation, "removed", change)
    try:
        run = run_playbook(inventory)
        assert run.returncode == 0, run.failures()
        state = snapshot(lab)
        assert set(state[f"{CONSUMER}/foreignclusters"]) == {"cluster-2", "cluster-9"}, "unmanaged FC kept"
        assert state[f"{CONSUMER}/offloadings"] == {}
        assert lab.kubectl(CONSUMER, "get", "node", "catamaran-cluster-3", check=False).returncode != 0
        assert not [n for n in state["cluster-3/namespaces"] if n.startswith(("catamaran-tenant-", "demo-"))]
        assert "demo-cluster-1" not in state["cluster-2/namespaces"]
        assert "catamaran-tenant-cluster-1" in state["cluster-2/namespaces"]
        roles = lab.kubectl("cluster-3", "get", "clusterroles", "-o", "name").stdout
        assert "catamaran-tenant" not in roles
        secrets = lab.kubectl(CONSUMER, "-n", "catamaran-system", "get", "secrets", "-o", "name").stdout
        assert "catamaran-credentials-cluster-3" not in secrets
        assert not (lab.root / "controller" / CONSUMER / "vk-cluster-1-cluster-3.spec.json").exists()
        again = run_playbook(inventory)
        assert again.returncode == 0, again.failures()
        assert again.changed() == {"cluster-1": 0, "cluster-2": 0, "cluster-3": 0}
    finally:
        lab.kubectl(CONSUMER, "-n", "catamaran-system", "delete", "foreigncluster", "cluster-9", check=False)
