"""The user guide's federation, run by the guide's commands, and its network fabric in deployment mode.

The fixture runs docs/guide's shell blocks in order (tests/integration/guide.py) from a fresh user's home: the
collection installed from its artifact, the controller's image pushed to the lab's registry with skopeo, the gateway
nodes labelled, the guide's inventory validated, planned and converged by site.yml (no controller_mode: deployment,
the default), the guide's Deployment offloaded and checked with kubectl; after the tests, the guide's uninstall
(un-peering through site.yml, then teardown.yml). The inventory is the guide's file with what only the lab needs
(`guide_inventory` says each). Then, for consumer cluster-1 and provider cluster-2:
  - every Catamaran process is a pod on its cluster's real node, its image pulled from the registry with the role's
    pull Secret;
  - each gateway is one pod on the host network of the labelled node, as root with only NET_ADMIN (not privileged),
    in namespace catamaran-fabric, whose only Secrets are their keys. The lab's underlay routes no pod range, so
    every request below that crosses clusters went through the tunnel the two gateway pods built;
  - the provider's gateway is exposed through a NodePort Service: the peering publishes the node's address and the
    node port it read back, and the tunnel comes through kube-proxy's node port rule;
  - a consumer pod reaches offloaded pods through their Service, by name;
  - an offloaded pod reaches the consumer's Service through its reflected copy, by short name;
  - a gateway whose process is killed is restarted by the kubelet, and traffic resumes;
  - a gateway turned off (controller_gateway: false) is gone, with its rights, and its node keeps nothing of it;
    without its Lease, the virtual kubelet turns the offloaded endpoints not ready;
  - the uninstall leaves no gateway, interface, route or rule on the nodes (checked by the fixture, after it).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from catamaran.constants import FABRIC_NAMESPACE, NETWORK_READY_CONDITION, SYSTEM_NAMESPACE, virtual_node_name
from catamaran.fabric.plan import NODE_CHAIN, ROUTE_PROTOCOL
from catamaran_lab.config import REAL_NODE_TAINT, SECOND_NODE_TAINT
from catamaran_lab.images import Image
from catamaran_lab.paths import REPO_ROOT

from . import federation
from .guide import GUIDE, Guide, StandIn, fenced_blocks, user_environment
from .lab_access import get_json, kill_container_process, require_real_node, wait_for
from .manifests import BUSYBOX, REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, http_service, real_pod
from .playbooks import ansible_env, hosts, run_playbook, write_inventory
from .test_fabric import TO_VIRTUAL_NODE, answered, apply, backends_and_client, fetch, foreign, web_pod

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
CLUSTERS = (CONSUMER, PROVIDER)
NAMESPACE = "fabric-deployed"  # offloaded to the provider: its Services are reflected into the twin
TWIN = f"{NAMESPACE}-{CONSUMER}"
LOCAL = "fabric-deployed-local"  # the consumer's own pods
GATEWAY_SELECTOR = "app.kubernetes.io/component=gateway"
GUIDE_INVENTORY = GUIDE / "inventory.yml"
GUIDE_NAMESPACE = "shop"  # the guide's offloaded namespace
GUIDE_IMAGE = "busybox:1.36"  # the guide's Deployment's image, from Docker Hub
GATEWAY_NODE_LABEL = "catamaran.example.com/gateway"  # the guide's controller_gateway_node_selector
ROUTE_AGENT_SELECTOR = "app.kubernetes.io/component=route-agent"


def guide_inventory(lab, image: str, registry: dict, gateway: bool = True) -> dict:
    """The guide's inventory (docs/guide/inventory.yml) with what only the lab needs, each said why; the guide's
    kubeconfigs (`~/.kube/<cluster>.kubeconfig`) are the user's home's."""
    inventory = yaml.safe_load(GUIDE_INVENTORY.read_text())
    clusters = hosts(inventory)
    inventory["catamaran_clusters"]["vars"].update(
        controller_image=image,  # where install.md's commands pushed it
        # The guide's commented line: the lab's registry wants credentials.
        controller_image_pull_credentials=[
            {"registry": registry["address"], "username": registry["username"], "password": registry["password"]}
        ],
        # The lab's real nodes are tainted (its kwok nodes run no container): the controller asks for them.
        controller_tolerations=[REAL_NODE_TOLERATION],
        controller_gateway=gateway,
    )
    for name in CLUSTERS:
        clusters[name]["controller_node_selector"] = {"kubernetes.io/hostname": first_real_node(lab, name)}
    # The guide's commented lines: the kubeconfigs name 127.0.0.1, which pods do not reach.
    clusters[CONSUMER]["catamaran_home_api_server"] = lab.recorded_config().cluster(CONSUMER).node_facing_server
    clusters[PROVIDER]["catamaran_api_server"] = lab.recorded_config().cluster(PROVIDER).node_facing_server
    consumer = clusters[CONSUMER]
    # Offloaded pods run on the provider's real node (its kwok nodes run no container).
    (peering,) = consumer["catamaran_peerings"]
    peering.update(provider_node_selector=REAL_NODE_SELECTOR, provider_tolerations=[REAL_NODE_TOLERATION])
    # The tests' own namespace beside the guide's `shop`: pods there run on either side.
    consumer["catamaran_offloaded_namespaces"].append(
        {"namespace": NAMESPACE, "pod_offloading_strategy": "LocalAndRemote"}
    )
    return inventory


def first_real_node(lab, cluster: str) -> str:
    return lab.recorded_config().cluster(cluster).real_node.name


def gateway_pod(lab, cluster: str) -> dict:
    pods = get_json(lab, cluster, "pods", "-n", FABRIC_NAMESPACE, "-l", GATEWAY_SELECTOR)["items"]
    assert len(pods) == 1, [pod["metadata"]["name"] for pod in pods]
    return pods[0]


def network_ready(lab) -> dict:
    foreign = get_json(lab, CONSUMER, "foreigncluster", "-n", SYSTEM_NAMESPACE, PROVIDER)
    conditions = (foreign.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == NETWORK_READY_CONDITION), {})


def node_network(lab, cluster: str) -> tuple[str, str]:
    """The real node's network namespace and the gateway's interface prefix there."""
    facts = federation.gateway_facts(lab, cluster)
    return facts["network_namespace"], facts["interface_prefix"]


@dataclass
class Deployed:
    """The guide's federation: its inventory (as run), the user's home and the lab's registry facts."""

    inventory: dict = field(repr=False)  # credentials: never in a test report
    home: Path
    image: str
    registry: dict = field(repr=False)


def guide_kubeconfig(home: Path, cluster: str) -> Path:
    """Where the guide's inventory has the cluster's kubeconfig: `~/.kube/<cluster>.kubeconfig`."""
    return home / ".kube" / f"{cluster}.kubeconfig"


def write_guide_inventory(workdir: Path, inventory: dict) -> None:
    (workdir / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))


def user_home(lab, home: Path, registry: dict) -> None:
    """What the guide assumes a user has: a kubeconfig per cluster (contexts named after the clusters), the
    registry's CA where skopeo looks (install.md), a password file."""
    (home / ".kube").mkdir(parents=True)
    for name in CLUSTERS:
        shutil.copy(lab.kubeconfig(name), guide_kubeconfig(home, name))
    trust = home / ".config" / "containers" / "certs.d" / registry["address"]
    trust.mkdir(parents=True)
    shutil.copy(registry["ca"], trust / "ca.crt")
    password = home / "registry-password"
    password.touch(mode=0o600)
    password.write_text(registry["password"])


def checkout(workdir: Path, artifact: Path, image: Image) -> None:
    """The directory install.md's commands run in, as `make collection` and `make image` leave a checkout."""
    (workdir / "dist").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "galaxy.yml", workdir)
    (workdir / "dist" / artifact.name).symlink_to(artifact)
    (workdir / "dist" / image.archive.name).symlink_to(image.archive)


def selector(labels: dict) -> str:
    return ",".join(f"{key}={value}" for key, value in labels.items())


def unlabel_gateway_node(lab, cluster: str, node: str) -> None:
    lab.kubectl(cluster, "label", "node", node, f"{GATEWAY_NODE_LABEL}-", check=False)


@pytest.fixture(scope="module")
def deployed(lab, lab_config_in_use, collection_artifact, controller_image_archive, tmp_path_factory):
    """docs/guide's commands, in order, against cluster-1 and cluster-2 of the lab: the collection installed into a
    fresh home, the controller's image pushed to the lab's registry and pulled from it with credentials, site.yml
    with the guide's inventory (deployment mode, as the guide leaves it, the default), a Deployment offloaded; after
    the module's tests, the guide's uninstall."""
    for name in CLUSTERS:
        require_real_node(lab_config_in_use.cluster(name))
    if lab_config_in_use.overlapping_pod_cidrs:
        pytest.fail("deployment mode needs a lab whose pod ranges do not overlap: the host, where the API servers run, "
                    "routes to the pods only then (unset CATAMARAN_LAB_OVERLAP)", pytrace=False)  # fmt: skip
    registry = lab.registry_facts(CONSUMER)  # the address cluster-1's node reaches it at; every node trusts it
    version = controller_image_archive.name.rpartition(":")[2]
    image = f"{registry['address']}/catamaran/controller:{version}"
    home = tmp_path_factory.mktemp("guide-home")
    workdir = home / "catamaran"
    user_home(lab, home, registry)
    checkout(workdir, collection_artifact, controller_image_archive)
    inventory = guide_inventory(lab, image, registry)
    write_guide_inventory(workdir, inventory)
    gateway_nodes = {name: first_real_node(lab, name) for name in CLUSTERS}
    built_once_by_make = "the run builds it once, with the same script (tests/integration/conftest.py), into dist/"
    kubeconfigs = [guide_kubeconfig(home, name) for name in CLUSTERS]
    environment = user_environment(home, lab.cache.path("kubectl"), kubeconfigs, Path(ansible_env()["TMPDIR"]))
    guide = Guide(
        workdir,
        environment,
        substitutions={
            "<registry>": registry["address"],
            "<user>": registry["username"],
            "<password file>": str(home / "registry-password"),
            **{f"<node of {name}>": node for name, node in gateway_nodes.items()},
        },
        stand_ins={
            "make collection": StandIn(built_once_by_make),
            "make image": StandIn(built_once_by_make),
            "ansible-playbook -i inventory.yml catamaran.federation.teardown -e catamaran_teardown_crds=true": StandIn(
                "the lab's clusters serve this worker's other tests, whose CRDs stay (the crds role's removal is "
                "proven by its Molecule scenario)"
            ),
        },
    )
    # The consumer's second node, where no gateway runs: its pods reach the provider through its route agent. It
    # pulls the controller's image from the registry like the first.
    lab.add_second_real_node(CONSUMER)
    try:
        guide.run("install.md")  # the collection, into the home's collections path
        guide.run("install.md")  # its Python libraries
        guide.run("install.md")  # the image, pushed to the lab's registry
        guide.run("peer.md")  # the gateway nodes labelled
        guide.run("peer.md")  # validate, plan, converge
        guide.run("peer.md", retry_for=60)  # the checks
        (web,) = [body for body in fenced_blocks("offload.md", "yaml") if "kind: Deployment" in body]
        (workdir / "web.yaml").write_text(web.replace(GUIDE_IMAGE, BUSYBOX))  # the lab has no Docker Hub
        guide.run("offload.md")  # applied, rolled out
        pods = get_json(lab, CONSUMER, "pods", "-n", GUIDE_NAMESPACE, "-l", "app=web")["items"]
        guide.substitutions["<pod>"] = pods[0]["metadata"]["name"]
        guide.run("offload.md", retry_for=90)  # the consumer's view (top once metrics have a sample)
        guide.run("offload.md", retry_for=30)  # the provider's
        guide.substitutions.update({"<provider>": PROVIDER, "<namespace>": GUIDE_NAMESPACE})
        for _ in range(3):  # the troubleshooting page's looks, on a federation that works
            guide.run("troubleshooting.md")
        assert registry["password"] not in "".join(guide.transcript), "the registry's password was printed"
        lab.kubectl(CONSUMER, "create", "namespace", LOCAL)
        wait_for(lambda: lab.kubectl(CONSUMER, "-n", LOCAL, "get", "sa", "default", check=False).returncode == 0)
        yield Deployed(inventory, home, image, registry)
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, LOCAL, "--timeout=120s", check=False, timeout=150)
        try:
            # uninstall.md: the provider removed from the consumer's peerings (and its namespaces, which need one).
            uninstalled = yaml.safe_load((workdir / "inventory.yml").read_text())
            consumer = hosts(uninstalled)[CONSUMER]
            consumer["catamaran_peerings"] = []
            del consumer["catamaran_offloaded_namespaces"]
            write_guide_inventory(workdir, uninstalled)
            # Every peering of the host going is refused, before any change, until the host says it means it.
            refused = guide.shell("ansible-playbook -i inventory.yml catamaran.federation.site --check", "no switch")
            assert refused.returncode != 0, "site.yml would remove every peering without catamaran_allow_prune_all"
            assert f"This run would remove every peering ({PROVIDER})" in refused.stdout, refused.stdout[-3000:]
            consumer["catamaran_allow_prune_all"] = True
            write_guide_inventory(workdir, uninstalled)
            plan = guide.run("uninstall.md")  # un-peer: the plan, then the run
            # The plan showed the ForeignCluster going (after: null).
            removal = rf"^\+\s+['\"]{CONSUMER}: ForeignCluster {SYSTEM_NAMESPACE}/{PROVIDER}['\"]: null"
            assert re.search(removal, plan, re.MULTILINE), plan[-6000:]
            guide.run("uninstall.md")  # teardown.yml
            guide.finish()
            for cluster in CLUSTERS:
                assert nothing_of_the_fabric_left(lab, cluster) == {}, cluster
            # The peering's Service in front of the provider's gateway went with the peering.
            services = get_json(lab, PROVIDER, "services", "-n", FABRIC_NAMESPACE)["items"]
            assert [service["metadata"]["name"] for service in services] == []
            assert nothing_of_the_fabric_left(lab, CONSUMER, second_node(lab).layout.netns) == {}, "second node"
        finally:
            lab.kubectl(CONSUMER, "delete", "namespace", GUIDE_NAMESPACE, "--wait=false", check=False)
            for name, node in gateway_nodes.items():
                unlabel_gateway_node(lab, name, node)
            lab.remove_second_real_node(CONSUMER)


def second_node(lab):
    return lab.second_node_of(lab.recorded_config().cluster(CONSUMER))


def in_netns(netns: str, *command: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, *command], capture_output=True, text=True, check=True).stdout


def nothing_of_the_fabric_left(lab, cluster: str, netns: str | None = None) -> dict:
    """What is left of the fabric: the gateway's and route agents' pods, and on a node (the gateway's by default)
    Catamaran's iptables chains, the gateway's interfaces and routes through them, and the route agent's routes."""
    gateway_netns, prefix = node_network(lab, cluster)
    netns = netns or gateway_netns
    links = json.loads(
        subprocess.run(["ip", "-n", netns, "-j", "link", "show"], capture_output=True, check=True).stdout
    )
    left = {
        "pods": [p["metadata"]["name"] for p in get_json(lab, cluster, "pods", "-n", FABRIC_NAMESPACE)["items"]],
        "rules": [line for line in in_netns(netns, "iptables-save").splitlines() if "CATAMARAN-" in line],
        "links": [link["ifname"] for link in links if link["ifname"].startswith(prefix)],
        "routes": [
            line
            for line in in_netns(netns, "ip", "route", "show").splitlines()
            if prefix in line or f"proto {ROUTE_PROTOCOL}" in line
        ],
    }
    return {what: found for what, found in left.items() if found}


def test_each_gateway_is_one_pod_on_its_node_with_net_admin_only(lab, deployed):
    for cluster in CLUSTERS:
        pod = wait_for(
            lambda cluster=cluster: (
                (pod := gateway_pod(lab, cluster))
                and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
                and pod
            ),
            timeout=120,
            what=f"{cluster}'s gateway pod Ready",
        )
        spec = pod["spec"]
        assert spec["hostNetwork"] is True
        assert spec["nodeName"] == first_real_node(lab, cluster)
        (container,) = spec["containers"]
        context = container["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
        assert not context.get("privileged")
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        # Its rights reach no Secret but its keys: none in the controller namespace, where the credentials are.
        account = f"system:serviceaccount:{FABRIC_NAMESPACE}:{spec['serviceAccountName']}"
        for namespace, allowed in ((FABRIC_NAMESPACE, "yes"), (SYSTEM_NAMESPACE, "no"), ("default", "no")):
            can = lab.kubectl(
                cluster, "auth", "can-i", "list", "secrets", "-n", namespace, "--as", account, check=False
            )
            assert can.stdout.strip() == allowed, (namespace, can.stdout, can.stderr)
    condition = wait_for(
        lambda: (c := network_ready(lab)).get("status") == "True" and c, timeout=90, what="NetworkReady=True"
    )
    assert condition["reason"] == "TunnelUp"


def test_every_catamaran_pod_runs_from_the_registrys_image_pulled_with_its_secret(lab, deployed):
    """No mode given (deployment, the default): every process is a pod of its cluster, its image pulled from the lab's
    registry (the digest the registry serves, not an image imported by hand) with the role's pull Secret."""
    repository = deployed.image.rpartition(":")[0]  # an imageID in it: pulled from the registry, not imported
    seen: dict = {}

    def every_pod_running() -> set | None:
        seen.clear()
        for cluster in CLUSTERS:
            # The route agents' DaemonSet covers the kwok nodes too, whose pods run no container.
            real_nodes = get_json(lab, cluster, "nodes", "-l", selector(REAL_NODE_SELECTOR))["items"]
            real_node_names = {node["metadata"]["name"] for node in real_nodes}
            for namespace in (SYSTEM_NAMESPACE, FABRIC_NAMESPACE):
                for pod in get_json(lab, cluster, "pods", "-n", namespace)["items"]:
                    if pod["spec"].get("nodeName") not in real_node_names | {None}:
                        continue
                    statuses = pod["status"].get("containerStatuses") or []
                    seen[f"{cluster}/{namespace}/{pod['metadata']['name']}"] = {
                        "component": pod["metadata"]["labels"].get("app.kubernetes.io/component"),
                        "phase": pod["status"].get("phase"),
                        "secrets": pod["spec"].get("imagePullSecrets", []),
                        "images": {(s["image"], s["imageID"].partition("@sha256:")[0]) for s in statuses},
                    }
        running = all(
            pod["phase"] == "Running" and pod["images"] and all(i for _, i in pod["images"]) for pod in seen.values()
        )
        return {(name.split("/")[0], pod["component"]) for name, pod in seen.items()} if running else None

    try:
        components = wait_for(every_pod_running, timeout=60, what="every Catamaran pod Running")
    except AssertionError as error:
        raise AssertionError(f"{error}: {seen}") from None
    for name, pod in seen.items():
        assert {"name": "catamaran-image-pull"} in pod["secrets"], (name, pod)
        assert pod["images"] == {(deployed.image, repository)}, (name, pod)
    expected = {"manager", "gateway", "route-agent"}
    assert {(CONSUMER, c) for c in (*expected, "virtual-kubelet")} | {(PROVIDER, c) for c in expected} <= components


def test_the_providers_gateway_is_reached_through_its_node_port(lab, deployed):
    """The consumer was told the node's address and the node port, never the gateway's own UDP port: a handshake can
    only have come through kube-proxy's rule for the node port, whose translation the node's conntrack holds."""
    service = get_json(lab, PROVIDER, "service", "-n", FABRIC_NAMESPACE, f"catamaran-gw-{CONSUMER}")
    assert (service["spec"]["type"], service["spec"]["externalTrafficPolicy"]) == ("NodePort", "Local")
    (port,) = service["spec"]["ports"]
    assert port["protocol"] == "UDP"
    assert port["nodePort"] != port["port"]
    # The gateway node's InternalIP, which the lab routes between clusters' nodes as one network does.
    endpoint = f"{lab.recorded_config().cluster(PROVIDER).real_node.node_ip}:{port['nodePort']}"
    assert foreign(lab)["spec"]["networking"]["gateway"]["endpoint"] == endpoint
    condition = wait_for(
        lambda: (c := network_ready(lab)).get("status") == "True" and c, timeout=90, what="NetworkReady=True"
    )
    assert endpoint in condition["message"], condition
    # The tunnel's flow: sent to the node port, answered from the gateway's own port (kube-proxy's DNAT, undone on
    # the way back, so the consumer's gateway keeps the endpoint it was given): replied, not UNREPLIED.
    flows = in_netns(
        node_network(lab, PROVIDER)[0], "conntrack", "-L", "-p", "udp", "--orig-port-dst", str(port["nodePort"])
    ).splitlines()
    answered_from_the_gateway = [
        flow
        for flow in flows
        if f"sport={port['port']} dport=" in flow.split(f"dport={port['nodePort']}", 1)[-1]
        and "[UNREPLIED]" not in flow
    ]
    assert answered_from_the_gateway, flows


def test_a_consumer_pod_reaches_offloaded_pods_by_service_name(lab, deployed):
    backends_and_client(lab, NAMESPACE, LOCAL)
    for namespace, pod in ((NAMESPACE, "backend-1"), (NAMESPACE, "backend-2"), (LOCAL, "client")):
        lab.kubectl(CONSUMER, "-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=120s")
    placed = {
        get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, name)["spec"]["nodeName"] for name in ("backend-1", "backend-2")
    }
    assert placed == {virtual_node_name(PROVIDER)}
    url = f"http://backend.{NAMESPACE}"
    answers = wait_for(
        lambda: (
            (done := [fetch(lab, CONSUMER, LOCAL, "client", url) for _ in range(4)])
            and all(r.returncode == 0 for r in done)
            and done
        ),
        timeout=60,
        what=f"4 answers from {url}",
    )
    assert {r.stdout.strip() for r in answers} == {f"backend on {PROVIDER}"}


def test_an_offloaded_pod_reaches_the_consumers_service_by_its_short_name(lab, deployed):
    apply(
        lab,
        CONSUMER,
        NAMESPACE,
        web_pod("frontend", f"frontend on {CONSUMER}", {"app": "frontend"}, remote=False),
        http_service("frontend"),
        real_pod("caller", ["sleep", "3600"], **TO_VIRTUAL_NODE),  # the provider's placement picks its real node
    )
    for pod in ("frontend", "caller"):
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=120s")
    # The caller runs on the provider; its Service copy there leads to the consumer's pod, through the tunnel.
    wait_for(
        lambda: lab.kubectl(PROVIDER, "-n", TWIN, "get", "service", "frontend", check=False).returncode == 0,
        what="the Service reflected into the twin",
    )
    answer = wait_for(
        lambda: (r := fetch(lab, CONSUMER, NAMESPACE, "caller", "http://frontend")).returncode == 0 and r,
        timeout=60,
        what="an answer from http://frontend on the provider",
    )
    assert answer.stdout.strip() == f"frontend on {CONSUMER}"


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def agent_routes(netns: str) -> list[dict]:
    return json.loads(in_netns(netns, "ip", "-j", "route", "show", "proto", str(ROUTE_PROTOCOL)) or "[]")


def test_pods_on_a_node_without_the_gateway_cross_through_its_route_agent_both_ways(lab, deployed):
    """The consumer's second node runs no gateway: its route agent sends the provider's pods to the gateway's node."""
    node = second_node(lab)
    agents = wait_for(
        lambda: (
            (pods := get_json(lab, CONSUMER, "pods", "-n", FABRIC_NAMESPACE, "-l", ROUTE_AGENT_SELECTOR)["items"])
            and all(map(ready, pods))
            and pods
        ),
        timeout=120,
        what="the consumer's route agents Ready",
    )
    # With the role's defaults: on every node, whatever its taints (kwok's run nothing), but the virtual node.
    placed = {p["spec"]["nodeName"] for p in agents}
    assert {first_real_node(lab, CONSUMER), node.spec.name} <= placed
    assert virtual_node_name(PROVIDER) not in placed
    (agent,) = [p for p in agents if p["spec"]["nodeName"] == node.spec.name]
    context = agent["spec"]["containers"][0]["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert not context.get("privileged")
    provider_seen = foreign(lab)["status"]["network"]["remotePodCIDRs"]
    routes = wait_for(
        lambda: (r := agent_routes(node.layout.netns)) and {route["dst"] for route in r} >= set(provider_seen) and r,
        what="the route agent's routes on the second node",
    )
    # Through the gateway's node, at its address on the link the two nodes share.
    assert {route["gateway"] for route in routes} == {lab.recorded_config().cluster(CONSUMER).real_node.underlay_ip}
    nat = in_netns(node.layout.netns, "iptables-save", "-t", "nat")
    assert all(f"-A {NODE_CHAIN} -d {cidr} -j ACCEPT" in nat for cidr in provider_seen), nat
    assert agent_routes(node_network(lab, CONSUMER)[0]) == []  # the gateway's node: the gateway routes its ranges

    on_second_node = {
        "nodeSelector": {"kubernetes.io/hostname": node.spec.name},
        "tolerations": [{**taint, "operator": "Equal"} for taint in (REAL_NODE_TAINT, SECOND_NODE_TAINT)],
    }
    backends_and_client(lab, NAMESPACE, LOCAL)
    apply(lab, CONSUMER, LOCAL, real_pod("client-2", ["sleep", "3600"], **on_second_node))
    frontend = web_pod("frontend-2", f"frontend on {node.spec.name}", {"app": "frontend-2"}, remote=False)
    frontend["spec"].update(on_second_node)
    caller = real_pod("caller", ["sleep", "3600"], **TO_VIRTUAL_NODE)  # as the test before made it
    apply(lab, CONSUMER, NAMESPACE, frontend, http_service("frontend-2"), caller)
    for namespace, pod in ((LOCAL, "client-2"), (NAMESPACE, "frontend-2"), (NAMESPACE, "caller")):
        lab.kubectl(CONSUMER, "-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=120s")
    # Out of the second node: its route agent's route to the gateway's node, then the tunnel.
    url = f"http://backend.{NAMESPACE}"
    client = (CONSUMER, LOCAL, "client-2")
    assert answered(lab, url, f"{url} from the second node", client, timeout=60) == f"backend on {PROVIDER}"
    # Into the second node: an offloaded pod calls a Service whose one endpoint is there; the replies take the route.
    wait_for(
        lambda: lab.kubectl(PROVIDER, "-n", TWIN, "get", "service", "frontend-2", check=False).returncode == 0,
        what="the Service reflected into the twin",
    )
    answer = answered(
        lab, "http://frontend-2", "the second node's pod from the provider", (CONSUMER, NAMESPACE, "caller"), 60
    )
    assert answer == f"frontend on {node.spec.name}"
    # An agent restarted while its DaemonSet stays (an upgrade rolling through) leaves its node's routes in place.
    before = agent_routes(node.layout.netns)
    name = agent["metadata"]["name"]
    lab.kubectl(CONSUMER, "-n", FABRIC_NAMESPACE, "delete", "pod", name, "--timeout=60s", timeout=90)
    assert agent_routes(node.layout.netns) == before
    assert answered(lab, url, f"{url} from the second node, its agent restarting", client) == f"backend on {PROVIDER}"


def test_a_killed_gateway_is_restarted_by_the_kubelet_and_traffic_resumes(lab, deployed):
    pod = gateway_pod(lab, CONSUMER)
    (status,) = pod["status"]["containerStatuses"]
    restarts = status["restartCount"]
    assert kill_container_process(status["containerID"]) > 0
    killed = time.monotonic()
    wait_for(
        lambda: (
            (s := gateway_pod(lab, CONSUMER)["status"]["containerStatuses"][0])["restartCount"] > restarts
            and s.get("ready")
        ),
        timeout=120,
        what="the consumer's gateway container restarted and Ready",
    )
    assert gateway_pod(lab, CONSUMER)["metadata"]["uid"] == pod["metadata"]["uid"]  # the same pod, restarted
    wait_for(lambda: network_ready(lab).get("status") == "True", timeout=90, what="NetworkReady=True after the restart")
    answers = wait_for(
        lambda: (r := fetch(lab, CONSUMER, LOCAL, "client", f"http://backend.{NAMESPACE}")).returncode == 0 and r,
        timeout=60,
        what="an answer through the rebuilt tunnel",
    )
    assert answers.stdout.strip() == f"backend on {PROVIDER}"
    print(f"gateway killed: traffic through the rebuilt tunnel {time.monotonic() - killed:.1f}s after")


def test_a_gateway_turned_off_goes_with_its_rights_and_leaves_its_node_clean(
    lab, deployed, installed_collections, tmp_path
):
    inventory = copy.deepcopy(deployed.inventory)
    inventory["catamaran_clusters"]["vars"]["controller_gateway"] = False
    for name in CLUSTERS:  # the guide's home's kubeconfigs, for a run outside that home
        hosts(inventory)[name]["catamaran_kubeconfig"] = str(guide_kubeconfig(deployed.home, name))
    run = run_playbook(write_inventory(tmp_path, inventory, lab), collections=installed_collections)
    assert run.returncode == 0, f"site.yml: {run.failures()}"
    assert nothing_of_the_fabric_left(lab, CONSUMER, second_node(lab).layout.netns) == {}, "second node"
    parts = "app.kubernetes.io/component in (gateway,route-agent)"
    for cluster in CLUSTERS:
        assert nothing_of_the_fabric_left(lab, cluster) == {}, cluster
        rights = lab.kubectl(cluster, "get", "clusterrole,clusterrolebinding", "-o", "name", "-l", parts).stdout.split()
        accounts = lab.kubectl(cluster, "get", "serviceaccounts,roles,rolebindings", "-A", "-o", "name",
                               "-l", parts).stdout.split()  # fmt: skip
        assert (rights, accounts) == ([], []), cluster
    # With no gateway renewing its Lease, the virtual kubelet takes the tunnel for down: the offloaded endpoints are not
    # ready, so the Service sends nothing into it (whatever NetworkReady last said).
    ready = wait_for(
        lambda: (
            (pod := get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "backend-1"))
            and (c := next(c for c in pod["status"]["conditions"] if c["type"] == "Ready"))["status"] == "False"
            and c
        ),
        timeout=45,
        what="backend-1 not Ready on the consumer without a gateway",
    )
    assert ready["reason"] == "NetworkUnreachable", ready
    assert "network gateway is not running" in ready["message"], ready
