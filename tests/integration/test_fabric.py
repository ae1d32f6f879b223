"""The network fabric: an application spans clusters through the peering's WireGuard tunnel, and only through it.

Consumer cluster-1 and provider cluster-2 peer in mode Fabric; each runs its gateway in its real
node's network namespace (userspace WireGuard here), and the lab's underlay routes no pod range, so
every request below that crosses clusters crossed the tunnel. With overlapping pod ranges
(CATAMARAN_LAB_OVERLAP=1) each side sees the other's pods in a remap range, translated by the
gateways. The tests run in file order and share one federation.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess

import pytest

from catamaran import networks
from catamaran.constants import (
    FABRIC_KEY_LABEL,
    FABRIC_NAMESPACE,
    NETWORK_READY_CONDITION,
    tenant_namespace,
    virtual_node_name,
)
from catamaran.fabric.plan import interface_name
from catamaran.vk.pod_ips import CONSENT_CONDITION, RANGES_NOT_CONSENTED
from catamaran_lab.host import wireguard_leftovers

from . import federation
from .lab_access import get_json, require_real_node, wait_for
from .manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, http_service, real_pod

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NODE = virtual_node_name(PROVIDER)
NAMESPACE = "fabric"  # offloaded: its Services and EndpointSlices are reflected into the twin
TWIN = f"{NAMESPACE}-{CONSUMER}"
LOCAL = "fabric-local"  # not offloaded: the consumer's own pods
TO_VIRTUAL_NODE = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": "virtual-node.catamaran.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}],
}
SERVE = 'mkdir -p /tmp/www && echo "$MESSAGE" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www'


def web_pod(name: str, message: str, labels: dict, remote: bool) -> dict:
    pod = real_pod(name, ["sh", "-c", SERVE], labels, container={"env": [{"name": "MESSAGE", "value": message}]})
    if remote:
        pod["spec"].update(TO_VIRTUAL_NODE)  # the provider's placement picks its real node
    return pod


def apply(lab, cluster: str, namespace: str, *items: dict) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": list(items)}
    lab.kubectl(cluster, "-n", namespace, "apply", "-f", "-", input=json.dumps(body))


def backends_and_client(lab, namespace: str, local: str) -> None:
    """Two web pods offloaded to the provider behind Service `backend` in `namespace`, and a client pod on the
    consumer's real node in its namespace `local`."""
    backends = [web_pod(f"backend-{n}", f"backend on {PROVIDER}", {"app": "backend"}, remote=True) for n in (1, 2)]
    apply(lab, CONSUMER, namespace, *backends, http_service("backend"))
    apply(lab, CONSUMER, local, real_pod("client", ["sleep", "3600"]))


def fetch(lab, cluster: str, namespace: str, pod: str, url: str):
    command = ["exec", pod, "--", "timeout", "5", "wget", "-qO-", url]
    return lab.kubectl(cluster, "-n", namespace, *command, check=False, timeout=30)


def answered(lab, url: str, what: str, where: tuple[str, str, str] | None = None, timeout: float = 30) -> str:
    """What `url` answers from a pod (`where`: cluster, namespace, pod; by default the consumer's client)."""
    cluster, namespace, pod = where or (CONSUMER, LOCAL, "client")
    found = wait_for(
        lambda: (r := fetch(lab, cluster, namespace, pod, url)).returncode == 0 and r,
        timeout=timeout,
        interval=1,
        what=what,
    )
    return found.stdout.strip()


def service_addresses(lab, cluster: str, namespace: str, service: str) -> set[str]:
    """Every endpoint address of `service`'s EndpointSlices in `namespace` on `cluster`."""
    slices = get_json(lab, cluster, "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}")
    return {a for s in slices["items"] for e in s.get("endpoints") or [] for a in e["addresses"]}


def foreign(lab) -> dict:
    return get_json(lab, CONSUMER, "foreigncluster", "-n", "catamaran-system", PROVIDER)


def seen_by_consumer(lab, provider_ip: str) -> str:
    """A provider pod's IP as the consumer sees it: in the remap range when the two clusters' ranges overlap."""
    remap = (foreign(lab)["spec"]["networking"] or {}).get("podCIDRRemap")
    pairs = [(lab.recorded_config().cluster(PROVIDER).pod_cidr, remap)] if remap else []
    return networks.remapper(pairs)(provider_ip)


def in_range(ip: str, cidr: str) -> bool:
    return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr)


def backend_ready(lab) -> tuple[str, str | None]:
    pod = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "backend-1")
    ready = next(c for c in pod["status"].get("conditions") or [] if c["type"] == "Ready")
    return ready["status"], ready.get("reason")


def network_ready(lab) -> dict | None:
    foreign = get_json(lab, CONSUMER, "foreigncluster", "-n", "catamaran-system", PROVIDER)
    return next(
        (c for c in (foreign.get("status") or {}).get("conditions") or [] if c["type"] == NETWORK_READY_CONDITION),
        None,
    )


@pytest.fixture(scope="module")
def fed(lab, lab_config_in_use):
    for name in (CONSUMER, PROVIDER):
        require_real_node(lab_config_in_use.cluster(name))
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER)
    federation.place(lab, CONSUMER, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    federation.connect_fabric(lab, CONSUMER, PROVIDER)
    gateways = {name: federation.gateway(lab, name) for name in (CONSUMER, PROVIDER)}
    processes = [federation.manager(lab, PROVIDER), federation.virtual_kubelet(lab, CONSUMER, PROVIDER)]
    lab.kubectl(CONSUMER, "create", "namespace", LOCAL)
    try:
        with federation.serving(lab, CONSUMER, PROVIDER, NAMESPACE, [*gateways.values(), *processes]):
            wait_for(lambda: lab.kubectl(CONSUMER, "-n", LOCAL, "get", "sa", "default", check=False).returncode == 0)
            yield gateways
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", LOCAL, "--wait=false", check=False)
        for name in (CONSUMER, PROVIDER):
            keys = ("-n", FABRIC_NAMESPACE, "delete", "secret", "-l", FABRIC_KEY_LABEL)
            lab.kubectl(name, *keys, check=False)


def test_the_tunnel_comes_up_and_says_so(lab, fed):
    condition = wait_for(
        lambda: (c := network_ready(lab)) and c["status"] == "True" and c,
        timeout=60,
        what="NetworkReady=True on the ForeignCluster",
    )
    assert condition["reason"] == "TunnelUp"
    peering = foreign(lab)
    provider_range = lab.recorded_config().cluster(PROVIDER).pod_cidr
    expected = peering["spec"]["networking"].get("podCIDRRemap") or provider_range
    assert lab.recorded_config().overlapping_pod_cidrs == (expected != provider_range)
    assert peering["status"]["network"]["remotePodCIDRs"] == [expected]


def test_a_consumer_pod_reaches_offloaded_pods_through_its_service(lab, fed):
    backends_and_client(lab, NAMESPACE, LOCAL)
    for name in ("backend-1", "backend-2"):
        wait_for(
            lambda n=name: get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, n)["status"].get("podIP"),
            timeout=90,
            what=f"{name} running remotely with its IP shown",
        )
    lab.kubectl(CONSUMER, "-n", LOCAL, "wait", "--for=condition=Ready", "pod/client", "--timeout=60s", timeout=90)
    remote_ip = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "backend-1")["status"]["podIP"]
    real_ip = get_json(lab, PROVIDER, "pod", "-n", TWIN, "backend-1")["status"]["podIP"]
    # As the consumer sees it (remapped when ranges overlap): nothing but the tunnel routes it here.
    assert remote_ip == seen_by_consumer(lab, real_ip)
    assert in_range(remote_ip, foreign(lab)["status"]["network"]["remotePodCIDRs"][0])
    # The EndpointSlice controller lists the pod's IP on its own time after the IP is shown (run 52 read it first).
    wait_for(
        lambda: remote_ip in service_addresses(lab, CONSUMER, NAMESPACE, "backend"),
        timeout=30,
        what=f"{remote_ip} among the backend Service's endpoints on the consumer",
    )
    for url in (f"http://{remote_ip}:8080/", f"http://backend.{NAMESPACE}/"):
        assert answered(lab, url, f"{url} from a consumer pod") == f"backend on {PROVIDER}"


def test_an_offloaded_pod_reaches_the_consumers_service_by_its_short_name(lab, fed):
    local_web = web_pod("home-1", f"home on {CONSUMER}", {"app": "home"}, remote=False)
    apply(lab, CONSUMER, NAMESPACE, local_web, http_service("home"))
    offloaded_client = real_pod("caller", ["sleep", "3600"])
    offloaded_client["spec"].update(TO_VIRTUAL_NODE)
    apply(lab, CONSUMER, NAMESPACE, offloaded_client)
    wait_for(
        lambda: get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "caller")["status"].get("phase") == "Running",
        timeout=90,
        what="the offloaded caller Running",
    )
    home_ip = wait_for(
        lambda: get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "home-1")["status"].get("podIP"), timeout=60
    )
    # The reflected EndpointSlice holds the consumer's pod as the provider sees it (remapped when ranges overlap).
    remap = networks.remap_pairs(foreign(lab)["spec"]["networking"].get("localPodCIDRRemap"))
    seen = networks.remapper(remap)(home_ip)
    assert (seen != home_ip) == lab.recorded_config().overlapping_pod_cidrs

    assert wait_for(
        lambda: seen in service_addresses(lab, PROVIDER, TWIN, "home"),
        timeout=60,
        what=f"{seen} in the twin's EndpointSlice for home",
    )
    # The reflected Service in the twin, its endpoints the consumer's pod: resolved by the provider's DNS.
    caller = (PROVIDER, TWIN, "caller")
    answer = answered(lab, "http://home/", "http://home/ from the offloaded pod", where=caller, timeout=60)
    assert answer == f"home on {CONSUMER}"


def test_the_tenant_reaches_no_pod_of_the_provider_but_its_own(lab, fed):
    native = "fabric-native"
    lab.kubectl(PROVIDER, "create", "namespace", native)
    try:
        wait_for(lambda: lab.kubectl(PROVIDER, "-n", native, "get", "sa", "default", check=False).returncode == 0)
        apply(lab, PROVIDER, native, web_pod("private", "provider only", {"app": "private"}, remote=False))
        lab.kubectl(PROVIDER, "-n", native, "wait", "--for=condition=Ready", "pod/private", "--timeout=60s", timeout=90)
        private_ip = seen_by_consumer(lab, get_json(lab, PROVIDER, "pod", "-n", native, "private")["status"]["podIP"])
        refused = fetch(lab, CONSUMER, LOCAL, "client", f"http://{private_ip}:8080/")
        assert refused.returncode != 0, f"the consumer reached {private_ip}, a pod of the provider's own"
        # The tenant's own pod on the same node still answers: the tunnel is up, the gateway refused.
        remote_ip = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "backend-1")["status"]["podIP"]
        assert fetch(lab, CONSUMER, LOCAL, "client", f"http://{remote_ip}:8080/").returncode == 0
        # A NetworkPolicy engine (kube-router, Calico) keeps its jump first in filter FORWARD and accepts there what
        # its policies allow, every pod no policy selects: as here, the gateway still refuses.
        with accepting_first_in_filter_forward(lab, PROVIDER):
            refused = fetch(lab, CONSUMER, LOCAL, "client", f"http://{private_ip}:8080/")
            assert refused.returncode != 0, f"with a CNI accepting first, the consumer reached {private_ip}"
            assert fetch(lab, CONSUMER, LOCAL, "client", f"http://{remote_ip}:8080/").returncode == 0
    finally:
        lab.kubectl(PROVIDER, "delete", "namespace", native, "--wait=false", check=False)


@contextlib.contextmanager
def accepting_first_in_filter_forward(lab, cluster: str):
    netns = federation.gateway_facts(lab, cluster)["network_namespace"]
    rule = ["FORWARD", "-m", "comment", "--comment", "a CNI accepting first", "-j", "ACCEPT"]
    subprocess.run(["ip", "netns", "exec", netns, "iptables", "-I", *rule[:1], "1", *rule[1:]], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "netns", "exec", netns, "iptables", "-D", *rule], check=True)


def test_the_provider_reaches_only_the_consumers_pods_it_shares(lab, fed):
    """Through the consumer's gateway the provider opens connections only to pods of namespaces extended to it: a
    provider workload reaches the consumer's Service in the offloaded namespace (the service offloading case), not a
    pod of a namespace the consumer keeps to itself."""
    native = "fabric-caller"
    apply(lab, CONSUMER, LOCAL, web_pod("hidden", "consumer only", {"app": "hidden"}, remote=False))
    lab.kubectl(PROVIDER, "create", "namespace", native)
    try:
        wait_for(lambda: lab.kubectl(PROVIDER, "-n", native, "get", "sa", "default", check=False).returncode == 0)
        apply(lab, PROVIDER, native, real_pod("caller", ["sleep", "3600"]))
        for cluster, namespace, pod in ((PROVIDER, native, "caller"), (CONSUMER, LOCAL, "hidden")):
            ready = ("-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=60s")
            lab.kubectl(cluster, *ready, timeout=90)
        remap = networks.remapper(
            networks.remap_pairs(foreign(lab)["spec"]["networking"].get("localPodCIDRRemap"))
        )  # the consumer's pods as the provider sees them

        def seen(namespace: str, pod: str) -> str:
            return remap(get_json(lab, CONSUMER, "pod", "-n", namespace, pod)["status"]["podIP"])

        shared = fetch(lab, PROVIDER, native, "caller", f"http://{seen(NAMESPACE, 'home-1')}:8080/")
        assert shared.stdout.strip() == f"home on {CONSUMER}", shared.stderr
        refused = fetch(lab, PROVIDER, native, "caller", f"http://{seen(LOCAL, 'hidden')}:8080/")
        assert refused.returncode != 0, "the provider reached a consumer pod of a namespace not extended to it"
    finally:
        lab.kubectl(PROVIDER, "delete", "namespace", native, "--wait=false", check=False)
        lab.kubectl(CONSUMER, "-n", LOCAL, "delete", "pod", "hidden", "--wait=false", check=False)


def consent_condition(lab) -> dict | None:
    conditions = (foreign(lab).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == CONSENT_CONDITION), None)


def announce(lab, pod_cidrs: list[str]) -> None:
    """The provider's administrator announcing pod ranges in the tenant's ResourceOffer (its manager writes them
    again only when what it computes changes)."""
    patch = json.dumps({"status": {"podCIDRs": pod_cidrs}})
    namespace = tenant_namespace(CONSUMER)
    lab.kubectl(
        PROVIDER, "-n", namespace, "patch", "resourceoffer", "resources", "--subresource=status", "--type=merge",
        "-p", patch,
    )  # fmt: skip


def gateway_node_holds(lab, cidr: str) -> dict:
    """What of `cidr` the consumer's gateway node holds: its routes, and the provider tunnel's WireGuard allowed IPs."""
    facts = federation.gateway_facts(lab, CONSUMER)
    netns, interface = facts["network_namespace"], interface_name(facts["interface_prefix"], f"to-{PROVIDER}")

    def run(*command: str) -> str:
        return subprocess.run(
            ["ip", "netns", "exec", netns, *command], capture_output=True, text=True, check=True, timeout=30
        ).stdout

    allowed = run("wg", "show", interface, "allowed-ips").split()
    routes = [json_route["dst"] for json_route in json.loads(run("ip", "-j", "route", "show") or "[]")]
    return {"routes": [r for r in routes if r == cidr], "allowed_ips": [a for a in allowed if a == cidr]}


def test_an_announced_range_outside_the_consent_is_refused_and_never_routed(lab, fed):
    """Issue 37: the provider announces 8.8.8.0/24 besides its own range. The consumer refuses it (a condition naming
    it, an Event), keeps it out of the ranges its gateway routes, and neither a route nor a WireGuard allowed IP for
    it appears on the gateway's node; traffic to the provider's pods goes on."""
    peering = foreign(lab)
    consented = peering["spec"]["networking"]["podCIDRs"]
    assert consented == [lab.recorded_config().cluster(PROVIDER).pod_cidr], "the peering records the consent"
    offer = get_json(lab, PROVIDER, "resourceoffer", "-n", tenant_namespace(CONSUMER), "resources")
    announced = offer["status"]["podCIDRs"]
    refused = "8.8.8.0/24"
    announce(lab, [*announced, refused])
    try:
        condition = wait_for(
            lambda: (c := consent_condition(lab)) and c["status"] == "True" and refused in c["message"] and c,
            timeout=60,
            what=f"{CONSENT_CONDITION}=True naming {refused}",
        )
        assert condition["reason"] == RANGES_NOT_CONSENTED
        assert "outside the consented ranges" in condition["message"]
        events = get_json(lab, CONSUMER, "events", "-n", "catamaran-system", "--field-selector",
                          f"involvedObject.name={PROVIDER},reason={RANGES_NOT_CONSENTED}")  # fmt: skip
        assert any(refused in event["message"] for event in events["items"]), "a Warning Event names the range"
        seen = foreign(lab)["status"]["network"]["remotePodCIDRs"]
        assert refused not in seen
        assert seen, "the consented range stays routed"
        # The gateway reconciles on every ForeignCluster change: give it a moment, then nothing of the range is there.
        wait_for(lambda: network_ready(lab)["status"] == "True", timeout=30, what="NetworkReady=True")
        assert gateway_node_holds(lab, refused) == {"routes": [], "allowed_ips": []}
        url = f"http://backend.{NAMESPACE}/"
        assert answered(lab, url, f"{url} from a consumer pod") == f"backend on {PROVIDER}"
    finally:
        announce(lab, announced)
    wait_for(
        lambda: (c := consent_condition(lab)) and c["status"] == "False" and c,
        timeout=60,
        what=f"{CONSENT_CONDITION}=False once the provider announces only its consented range again",
    )


def test_a_killed_gateway_turns_the_network_not_ready_and_its_restart_brings_traffic_back(lab, fed):
    fed[PROVIDER].stop()
    condition = wait_for(
        lambda: (c := network_ready(lab)) and c["status"] == "False" and c,
        timeout=60,
        what="NetworkReady=False once the provider's gateway is gone",
    )
    assert condition["reason"] in ("TunnelSilent", "NoHandshake"), condition
    # The other side's endpoints are not ready, so Services send nothing into the dead tunnel.
    wait_for(
        lambda: backend_ready(lab) == ("False", "NetworkUnreachable"),
        timeout=30,
        what="backend-1 not Ready (NetworkUnreachable) on the consumer",
    )
    remote_ip = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "backend-1")["status"]["podIP"]
    assert fetch(lab, CONSUMER, LOCAL, "client", f"http://{remote_ip}:8080/").returncode != 0
    fed[PROVIDER].start()
    wait_for(
        lambda: (c := network_ready(lab)) and c["status"] == "True",
        timeout=60,
        what="NetworkReady=True after the gateway's restart",
    )
    wait_for(lambda: backend_ready(lab)[0] == "True", timeout=30, what="backend-1 Ready again")
    answer = answered(lab, f"http://{remote_ip}:8080/", "the remote pod answering again")
    assert answer == f"backend on {PROVIDER}"


def test_a_dead_consumer_gateway_is_noticed_by_its_lease_and_its_restart_brings_traffic_back(lab, fed):
    """A gateway that dies writes no condition, so NetworkReady keeps its last word (True); its Lease lapses, and the
    virtual kubelet turns the other side's endpoints not ready until a gateway renews it again."""
    fed[CONSUMER].kill()
    wait_for(
        lambda: backend_ready(lab) == ("False", "NetworkUnreachable"),
        timeout=45,
        what="backend-1 not Ready (NetworkUnreachable) once the consumer's gateway stopped renewing its Lease",
    )
    pod = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "backend-1")
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert "has not renewed its Lease catamaran-fabric/catamaran-gateway" in ready["message"], ready
    fed[CONSUMER].start()
    wait_for(lambda: backend_ready(lab)[0] == "True", timeout=60, what="backend-1 Ready once the gateway runs again")
    answer = answered(lab, f"http://backend.{NAMESPACE}/", "the Service answering through the rebuilt tunnel")
    assert answer == f"backend on {PROVIDER}"


def test_a_stopped_gateway_leaves_nothing_of_the_fabric_on_its_node(lab, fed):
    """Stopped on purpose (teardown, uninstall: SIGTERM), a gateway removes its interfaces, their routes and
    userspace processes, and Catamaran's iptables chains with the jumps to them."""
    for cluster in (CONSUMER, PROVIDER):
        fed[cluster].stop()
        facts = federation.gateway_facts(lab, cluster)
        netns, prefix = facts["network_namespace"], facts["interface_prefix"]
        rules = subprocess.run(["ip", "netns", "exec", netns, "iptables-save"], capture_output=True, text=True)
        assert "CATAMARAN-FABRIC" not in rules.stdout, rules.stdout
        links = json.loads(subprocess.run(["ip", "-n", netns, "-j", "link", "show"], capture_output=True).stdout)
        assert [link["ifname"] for link in links if link["ifname"].startswith(prefix)] == []
        assert prefix not in subprocess.run(["ip", "-n", netns, "route", "show"], capture_output=True, text=True).stdout
        assert wireguard_leftovers(prefix) == ([], [])
