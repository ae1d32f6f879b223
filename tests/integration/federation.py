"""Peer lab clusters and run Catamaran's processes against them, for integration tests.

The Ansible collection does the peering for users; tests build the same objects from the
controller's own manifest functions, so both paths share one source of truth.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import yaml

from catamaran import networks, tenancy
from catamaran.constants import (
    ANNOTATION_ALLOWED_SERVICE_TYPES,
    DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    FABRIC_KEY_FROM_CONSUMER_PREFIX,
    FABRIC_KEY_LABEL,
    FABRIC_KEY_TO_PROVIDER_PREFIX,
    FABRIC_NAMESPACE,
    FABRIC_PRIVATE_KEY,
    LABEL_REMOTE_CLUSTER_ID,
    LABEL_TYPE,
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    TENANT_SERVICE_ACCOUNT,
    TENANT_TOKEN_BINDING_SECRET,
    TYPE_VIRTUAL_NODE,
    tenant_namespace,
    virtual_node_name,
)
from catamaran.fabric import keys
from catamaran_lab.errors import LabError
from catamaran_lab.lab import Lab
from catamaran_lab.paths import REPO_ROOT

from .lab_access import get_json, wait_for
from .manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION

CRD_DIR = REPO_ROOT / "controller" / "crds"
WEBHOOK = "catamaran-pod-offloading"


def as_list(items: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def install_crds(lab: Lab, cluster: str) -> None:
    """What the collection's roles put on every cluster before any process starts: the CRDs, and the namespace of
    Catamaran's own objects (a leader-electing replica's Lease is there)."""
    lab.kubectl(cluster, "create", "namespace", SYSTEM_NAMESPACE, check=False)
    lab.kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
    lab.kubectl(cluster, "wait", "--for=condition=Established", "-f", str(CRD_DIR), "--timeout=60s")


def peer(lab: Lab, consumer: str, provider: str, **foreign_spec) -> None:
    """Tenant namespace and credential on the provider; Secret and ForeignCluster on the consumer."""
    lab.kubectl(provider, "apply", "--server-side", "-f", "-", input=as_list(tenancy.provider_cluster_objects()))
    lab.kubectl(provider, "apply", "--server-side", "-f", "-", input=as_list(tenancy.tenant_manifests(consumer)))
    announce_consumer(lab, consumer, provider, foreign_spec.get("homeAPIServer"))
    token = issue_credential(lab, consumer, provider)
    lab.kubectl(consumer, "create", "namespace", SYSTEM_NAMESPACE, check=False)
    store_credential(lab, consumer, provider, token)
    foreign = {
        "apiVersion": "core.catamaran.io/v1alpha1",
        "kind": "ForeignCluster",
        "metadata": {"name": provider, "namespace": SYSTEM_NAMESPACE},
        "spec": {"clusterID": provider, "credentialsSecretRef": {"name": credentials_secret(provider)}, **foreign_spec},
    }
    lab.kubectl(consumer, "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(foreign))


def tenant_kubectl(lab: Lab, consumer: str, provider: str, directory: Path, duration: str = "30m"):
    """kubectl on the provider with the tenant's own credential: a token of its ServiceAccount, as the consumer holds
    one. Returns run(*args, input=None) -> CompletedProcess (never raises on a refusal)."""
    token = lab.kubectl(
        provider, "create", "token", TENANT_SERVICE_ACCOUNT, "-n", tenant_namespace(consumer), f"--duration={duration}"
    ).stdout.strip()
    admin = yaml.safe_load(lab.kubeconfig(provider).read_text())["clusters"][0]["cluster"]
    kubeconfig = tenancy.tenant_kubeconfig(
        admin["server"], admin["certificate-authority-data"], token, provider, consumer
    )
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        command = [str(lab.cache.path("kubectl")), "--kubeconfig", str(path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, input=input, check=False)

    return run


def announce_consumer(lab: Lab, consumer: str, provider: str, home_api_server: str | None = None) -> None:
    """The consumer's pod range, and where its pods reach its API server, in the tenant's ResourceOffer, as the
    peering module announces them."""
    ranges = [lab.recorded_config().cluster(consumer).pod_cidr]
    home = {"consumerAPIServer": home_api_server} if home_api_server else {}
    grant_terms(lab, consumer, provider, field_manager="peering", consumerPodCIDRs=ranges, **home)


def grant_terms(lab: Lab, consumer: str, provider: str, field_manager: str = "terms", **terms) -> None:
    """Terms in the tenant's ResourceOffer spec, as the provider's side of the peering writes them (server-side apply
    by `field_manager`: a later call of the same manager replaces what it set before)."""
    offer = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "ResourceOffer",
        "metadata": {"name": RESOURCE_OFFER_NAME, "namespace": tenant_namespace(consumer)},
        "spec": {"clusterID": provider, **terms},
    }
    manager = f"--field-manager={field_manager}"
    lab.kubectl(provider, "apply", "--server-side", "--force-conflicts", manager, "-f", "-", input=json.dumps(offer))


def grant_terms_in_force(lab: Lab, consumer: str, provider: str, twin: str, **terms) -> None:
    """grant_terms, returning once the provider's manager acts on them: with NodePort Services lent too, which the
    manager writes onto the twin namespace from the same ResourceOffer (the terms of pods leave no other trace)."""
    grant_terms(lab, consumer, provider, services={"allowedTypes": ["NodePort"]}, **terms)

    def in_force() -> bool:
        annotations = get_json(lab, provider, "namespace", twin)["metadata"].get("annotations") or {}
        return "NodePort" in annotations.get(ANNOTATION_ALLOWED_SERVICE_TYPES, "")

    wait_for(in_force, what=f"the manager of {provider} acting on the granted terms")


def credentials_secret(provider: str) -> str:
    return f"{provider}-credentials"


def issue_credential(
    lab: Lab, consumer: str, provider: str, lifetime: int = DEFAULT_CREDENTIAL_LIFETIME_SECONDS
) -> str:
    """A bound token for the tenant, stored in its credential Secret on the provider, as the peering module does.

    The provider's manager adopts it and renews it from then on; tests often peer before it runs.
    """
    namespace = tenant_namespace(consumer)
    binding_uid = lab.kubectl(
        provider, "-n", namespace, "get", "secret", TENANT_TOKEN_BINDING_SECRET, "-o", "jsonpath={.metadata.uid}"
    ).stdout.strip()
    issued_at = time.time()
    answer = lab.kubectl(
        provider,
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{TENANT_SERVICE_ACCOUNT}/token",
        "-f",
        "-",
        input=json.dumps(tenancy.credential_token_request(binding_uid, lifetime)),
    )
    status = json.loads(answer.stdout)["status"]
    expires_at = tenancy.parse_timestamp(status["expirationTimestamp"])
    secret = tenancy.credential_secret(consumer, status["token"], issued_at, expires_at, lifetime, binding_uid)
    lab.kubectl(provider, "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(secret))
    return status["token"]


def store_credential(lab: Lab, consumer: str, provider: str, token: str) -> None:
    """The consumer-side credential Secret the ForeignCluster names: a kubeconfig with the tenant token."""
    provider_config = yaml.safe_load(lab.kubeconfig(provider).read_text())
    cluster = provider_config["clusters"][0]["cluster"]
    kubeconfig = tenancy.tenant_kubeconfig(
        cluster["server"], cluster["certificate-authority-data"], token, provider, consumer
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": credentials_secret(provider), "namespace": SYSTEM_NAMESPACE},
        "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
    }
    lab.kubectl(consumer, "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(secret))


class ChildProcess:
    """A program run as a child process, its log in the lab's logs directory (the benches run Liqo's this way)."""

    # Every one started and not stopped yet: what a group of tests left running is stopped before the next group.
    started: ClassVar[set[ChildProcess]] = set()

    def __init__(self, lab: Lab, name: str, argv: list[str], env: dict[str, str] | None = None):
        self.lab = lab
        self.name = name
        self._argv = argv
        self.env = env or {}
        self.log_path: Path = lab.root / "logs" / f"{name.replace(' ', '-').replace('/', '-')}.log"
        self.process: subprocess.Popen | None = None

    @property
    def argv(self) -> list[str]:
        return self._argv

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **self.env)
            )
        ChildProcess.started.add(self)
        time.sleep(0.5)
        if self.process.poll() is not None:
            raise LabError(f"{self.name} exited at once with {self.process.returncode}; see {self.log_path}")

    def stop(self) -> None:
        ChildProcess.started.discard(self)
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        ChildProcess.started.discard(self)
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class ControllerProcess(ChildProcess):
    """`python -m catamaran ...` as a child process; `wrapper` runs before it (nsenter)."""

    def __init__(self, lab: Lab, name: str, args: list[str], wrapper: tuple[str, ...] = ()):
        super().__init__(lab, name, [], {"PYTHONUNBUFFERED": "1"})
        self.args = args
        self.wrapper = wrapper

    @property
    def argv(self) -> list[str]:
        return [*self.wrapper, sys.executable, "-m", "catamaran", *self.args]


def manager(lab: Lab, cluster: str, metrics_port: int = 0) -> ControllerProcess:
    """A provider's manager, serving its tenants' pod counters on a free local port the API server reaches.

    With a real node, the API server dials aggregated APIs at their endpoints, which may not be loopback: it reaches
    this host at the host end of the node's link instead."""
    spec = lab.recorded_config().cluster(cluster)
    args = ["--kubeconfig", str(lab.kubeconfig(cluster)), "--cluster-id", cluster, "--metrics-port", str(metrics_port)]
    counters = [
        "--counters-port",
        str(free_port()),
        "--counters-external-name",
        spec.real_node.host_ip if spec.real_node else "127.0.0.1",
        "--cert-dir",
        str(lab.root / "certs" / f"manager-{cluster}"),
    ]
    return ControllerProcess(lab, f"manager-{cluster}", [*args, "manager", *counters])


def consumer_manager(lab: Lab, cluster: str) -> ControllerProcess:
    """The consumer's manager with its pod webhook, served on a free local port the API server calls."""
    port = free_port()
    return ControllerProcess(
        lab,
        f"manager-{cluster}",
        [
            "--kubeconfig",
            str(lab.kubeconfig(cluster)),
            "--cluster-id",
            cluster,
            "manager",
            "--webhook-port",
            str(port),
            "--webhook-url",
            f"https://127.0.0.1:{port}/mutate-pods",
            "--cert-dir",
            str(lab.root / "webhook-certs"),
        ],
    )


def webhook_registered(lab: Lab, cluster: str) -> None:
    wait_for(
        lambda: lab.kubectl(cluster, "get", "mutatingwebhookconfiguration", WEBHOOK, check=False).returncode == 0,
        what="the webhook registration",
    )


def virtual_kubelet(
    lab: Lab, consumer: str, provider: str, metrics_port: int = 0, extra: tuple[str, ...] = ()
) -> ControllerProcess:
    """A virtual kubelet whose kubelet API takes a free port (several share the host) and publishes it."""
    return ControllerProcess(
        lab,
        f"vk-{consumer}-{provider}",
        [
            "--kubeconfig",
            str(lab.kubeconfig(consumer)),
            "--cluster-id",
            consumer,
            "--metrics-port",
            str(metrics_port),
            "virtual-kubelet",
            "--foreign-cluster",
            provider,
            "--kubelet-port",
            "0",
            "--kubelet-cert-dir",
            str(lab.root / "kubelet-certs" / f"{consumer}-{provider}"),
            *extra,
        ],
    )


def gateway_facts(lab: Lab, cluster: str) -> dict:
    """Where the cluster's gateway runs: its real node's network, as deployment mode runs it on a node's host network
    (the lab writes them; the lab's inventory reads the same file)."""
    return json.loads(lab.gateway_facts_file(cluster).read_text())


def gateway(lab: Lab, cluster: str, wireguard_go: str | None = None) -> ControllerProcess:
    facts = gateway_facts(lab, cluster)
    args = ["--kubeconfig", facts["kubeconfig"], "--cluster-id", cluster, "gateway"]
    args += ["--interface-prefix", facts["interface_prefix"], "--wireguard-go", wireguard_go or facts["wireguard_go"]]
    netns = f"--net=/run/netns/{facts['network_namespace']}"
    return ControllerProcess(lab, f"gateway-{cluster}", args, wrapper=("nsenter", netns, "--"))


FABRIC_PORT = 51820


def connect_fabric(lab: Lab, consumer: str, provider: str, port: int = FABRIC_PORT) -> None:
    """What the peering exchanges for mode Fabric: a key per side, each in a Secret of its own cluster, the other
    side's public key, the provider gateway's address and port, and (as the peering module allocates them, with the
    same function) the ranges each side sees the other's overlapping pods at."""
    consumer_key, provider_key = keys.generate_private_key(), keys.generate_private_key()
    for cluster, name, key in (
        (consumer, FABRIC_KEY_TO_PROVIDER_PREFIX + provider, consumer_key),
        (provider, FABRIC_KEY_FROM_CONSUMER_PREFIX + consumer, provider_key),
    ):
        lab.kubectl(cluster, "create", "namespace", FABRIC_NAMESPACE, check=False)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": FABRIC_NAMESPACE, "labels": {FABRIC_KEY_LABEL: "true"}},
            "data": {FABRIC_PRIVATE_KEY: base64.b64encode(key.encode()).decode()},
        }
        lab.kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(secret))
    endpoint = f"{gateway_facts(lab, provider)['gateway_address']}:{port}"
    config = lab.recorded_config()
    consumer_range, provider_range = config.cluster(consumer).pod_cidr, config.cluster(provider).pod_cidr
    provider_seen = networks.seen_as([provider_range], taken=[consumer_range])
    consumer_seen = networks.seen_as([consumer_range], taken=[provider_range])
    network = {"mode": "Fabric", "gateway": {"listenPort": port, "publicKey": keys.public_key(consumer_key)}}
    networking = {"mode": "Fabric", "gateway": {"endpoint": endpoint, "publicKey": keys.public_key(provider_key)}}
    # The consent the peering module records at the first peering: the provider's pod range as it announces it.
    networking["podCIDRs"] = [provider_range]
    if remapped := [{"podCIDR": real, "seenAs": seen} for real, seen in provider_seen if real != seen]:
        network["localPodCIDRRemap"] = remapped
        networking["podCIDRRemap"] = remapped[0]["seenAs"]
    if remapped := [{"podCIDR": real, "seenAs": seen} for real, seen in consumer_seen if real != seen]:
        networking["localPodCIDRRemap"] = remapped
    announced = [seen for _, seen in consumer_seen]
    grant_terms(lab, consumer, provider, field_manager="fabric", network=network)
    grant_terms(lab, consumer, provider, field_manager="peering", consumerPodCIDRs=announced)
    foreign = {
        "apiVersion": "core.catamaran.io/v1alpha1",
        "kind": "ForeignCluster",
        "metadata": {"name": provider, "namespace": SYSTEM_NAMESPACE},
        "spec": {
            "clusterID": provider,
            "credentialsSecretRef": {"name": credentials_secret(provider)},
            "networking": networking,
        },
    }
    manager = "--field-manager=fabric"
    lab.kubectl(consumer, "apply", "--server-side", "--force-conflicts", manager, "-f", "-", input=json.dumps(foreign))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def unpeer(lab: Lab, consumer: str, provider: str) -> None:
    """Test cleanup once the processes are stopped: nothing of the peering is left on either side."""
    namespace = tenant_namespace(consumer)
    requests = lab.kubectl(provider, "-n", namespace, "get", "twinnamespaces", "-o", "name", check=False)
    for request in requests.stdout.split():
        lab.kubectl(
            provider,
            "-n",
            namespace,
            "patch",
            request,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            check=False,
        )
    lab.kubectl(
        provider,
        "delete",
        "namespace",
        "-l",
        f"catamaran.io/managed-by=catamaran,catamaran.io/origin-cluster-id={consumer}",
        "--timeout=90s",
        check=False,
        timeout=120,
    )
    # The peering's nodes: its one node, or its pools' (catamaran-<provider>.<pool>).
    nodes = f"{LABEL_REMOTE_CLUSTER_ID}={provider},{LABEL_TYPE}={TYPE_VIRTUAL_NODE}"
    lab.kubectl(consumer, "delete", "node", "-l", nodes, "--timeout=30s", check=False)
    lab.kubectl(consumer, "-n", SYSTEM_NAMESPACE, "delete", "foreigncluster", provider, "--timeout=30s", check=False)
    lab.kubectl(consumer, "-n", SYSTEM_NAMESPACE, "delete", "secret", credentials_secret(provider), check=False)


def place(lab: Lab, consumer: str, provider: str, node_selector: dict, tolerations: list[dict]) -> None:
    """The provider's side of a peering decides where the tenant's pods run (as the peering module does)."""
    grant_terms(lab, consumer, provider, field_manager="tests", nodeSelector=node_selector, tolerations=tolerations)


def lease_holder(lab: Lab, cluster: str, lease: str) -> str | None:
    """The identity holding a Lease of the controller namespace; None when there is no Lease or no holder."""
    result = lab.kubectl(cluster, "-n", SYSTEM_NAMESPACE, "get", "lease", lease, "-o", "json", check=False)
    return json.loads(result.stdout)["spec"].get("holderIdentity") if result.returncode == 0 else None


def pod_uids(lab: Lab, cluster: str, namespace: str) -> dict[str, str]:
    """Pod name -> UID in `namespace`: a pod recreated under its name shows a new UID."""
    listed = json.loads(lab.kubectl(cluster, "get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in listed}


def node_ready(lab: Lab, cluster: str, node: str) -> str | None:
    """The node's Ready status ("True", "False", "Unknown"), None when it is not there."""
    result = lab.kubectl(cluster, "get", "node", node, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def offload_namespace(lab: Lab, consumer: str, namespace: str, **spec) -> None:
    """A NamespaceOffloading for `namespace`: only the pods of offloaded namespaces leave the consumer."""
    offloading = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": namespace},
        "spec": spec,
    }
    lab.kubectl(consumer, "apply", "-f", "-", input=json.dumps(offloading))


def twin_ready(lab: Lab, consumer: str, provider: str, namespace: str) -> bool:
    """Has the virtual kubelet of `provider` reported the namespace's twin Ready on its NamespaceOffloading?"""
    result = lab.kubectl(
        consumer, "-n", namespace, "get", "namespaceoffloading", "offloading", "-o", "json", check=False
    )
    if result.returncode != 0:
        return False
    clusters = json.loads(result.stdout).get("status", {}).get("clusters") or []
    return any(c.get("clusterID") == provider and c.get("phase") == "Ready" for c in clusters)


@contextlib.contextmanager
def one_peering(lab: Lab, consumer: str, provider: str, namespace: str, **foreign_spec):
    """CRDs on both, `consumer` peered with `provider`, its manager and virtual kubelet serving with `namespace`
    offloaded (see serving()); the processes by role."""
    with peered(lab, consumer, provider, **foreign_spec) as processes, offloaded(lab, consumer, provider, namespace):
        yield processes


@contextlib.contextmanager
def peered(lab: Lab, consumer: str, provider: str, **foreign_spec):
    """CRDs on both, `consumer` peered with `provider`, the provider's manager and the virtual kubelet running (see
    running()); the processes by role. Namespaces are offloaded with offloaded()."""
    for cluster in (consumer, provider):
        install_crds(lab, cluster)
    peer(lab, consumer, provider, **foreign_spec)
    processes = {"manager": manager(lab, provider), "vk": virtual_kubelet(lab, consumer, provider)}
    with running(lab, consumer, provider, list(processes.values())):
        yield processes


@contextlib.contextmanager
def one_real_peering(lab: Lab, consumer: str, provider: str, namespace: str, **foreign_spec):
    """As one_peering, with the remote pods on the provider's real node and the consumer's manager running too (its
    pod webhook, and the approval of the virtual node's serving certificate: logs and exec reach the pods)."""
    for cluster in (consumer, provider):
        install_crds(lab, cluster)
    peer(lab, consumer, provider, **foreign_spec)
    place(lab, consumer, provider, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    processes = peering_processes(lab, consumer, provider)
    with serving(lab, consumer, provider, namespace, processes):
        yield processes


@contextlib.contextmanager
def remotely_offloaded(lab: Lab, consumer: str, provider: str, namespace: str):
    """one_real_peering with `namespace` offloaded by the pod webhook (strategy Remote), once its twin is Ready."""
    with one_real_peering(lab, consumer, provider, namespace) as processes:
        webhook_registered(lab, consumer)
        offload_namespace(lab, consumer, namespace, podOffloadingStrategy="Remote")
        deadline = time.monotonic() + 60
        while not twin_ready(lab, consumer, provider, namespace):
            if time.monotonic() > deadline:
                raise AssertionError(f"the twin of {namespace} on {provider} was not Ready after 60 s")
            time.sleep(0.5)
        yield processes


def peering_processes(lab: Lab, consumer: str, provider: str) -> list[ControllerProcess]:
    """The consumer's manager (its pod webhook, the virtual node's serving certificate), the provider's manager and
    the peering's virtual kubelet, not started."""
    return [consumer_manager(lab, consumer), manager(lab, provider), virtual_kubelet(lab, consumer, provider)]


@contextlib.contextmanager
def serving(lab: Lab, consumer: str, provider: str, namespace: str, processes: list[ControllerProcess]):
    """Run the peering's processes until the virtual node is Ready and `namespace` is offloaded to the provider
    (a NamespaceOffloading selecting every cluster, its twin Ready); undo all of it after (running, offloaded)."""
    with running(lab, consumer, provider, processes), offloaded(lab, consumer, provider, namespace):
        yield


@contextlib.contextmanager
def running(lab: Lab, consumer: str, provider: str, processes: list[ControllerProcess]):
    """Run the peering's processes until the virtual node is Ready; after, delete every twin of the consumer while
    they still run (so finalizers and remote pods are handled), stop them and unpeer."""
    node = virtual_node_name(provider)
    for process in processes:
        process.start()
    try:
        wait_for(lambda: node_ready(lab, consumer, node) == "True", timeout=60, what=f"virtual node {node} Ready")
        yield
    finally:
        try:
            lab.kubectl(
                provider, "-n", tenant_namespace(consumer), "delete", "twinnamespaces", "--all",
                "--timeout=60s", check=False, timeout=90,
            )  # fmt: skip
        finally:  # stopped and unpeered even when the twins' deletion did not finish in time
            stop(lab, consumer, processes)
            unpeer(lab, consumer, provider)


def stop(lab: Lab, consumer: str, processes: list[ControllerProcess]) -> None:
    """Stop the processes; a consumer's manager among them leaves its pod webhook registered (the API server would
    then call a port nothing serves), so the registration goes too: the lab as the group found it."""
    for process in processes:
        process.stop()
    if any("--webhook-port" in process.args for process in processes):
        lab.kubectl(consumer, "delete", "mutatingwebhookconfiguration", WEBHOOK, "--ignore-not-found", check=False)


@contextlib.contextmanager
def offloaded(lab: Lab, consumer: str, provider: str, namespace: str, **spec):
    """`namespace` made on the consumer and offloaded (a NamespaceOffloading with `spec`, by default selecting every
    cluster) until its twin on `provider` is Ready; deleted after, while the peering's processes still run."""
    lab.kubectl(consumer, "create", "namespace", namespace)
    try:
        offload_namespace(lab, consumer, namespace, **spec)
        wait_for(lambda: lab.kubectl(consumer, "-n", namespace, "get", "sa", "default", check=False).returncode == 0)
        wait_for(lambda: twin_ready(lab, consumer, provider, namespace), timeout=60, what=f"{namespace}'s twin Ready")
        yield
    finally:
        lab.kubectl(consumer, "delete", "namespace", namespace, "--timeout=60s", check=False, timeout=90)


@contextlib.contextmanager
def watching(lab: Lab, consumer: str, nodes: str | tuple[str, ...], namespace: str):
    """Sample every second, until the block ends, the virtual nodes' Ready condition and the phase of every pod of
    `namespace`: yields the count of samples and when each was taken (monotonic), the NotReady ones (time, node,
    status, reason, sample number), the pods seen going back from Running, and the reads that failed (no sample)."""
    nodes = (nodes,) if isinstance(nodes, str) else nodes
    seen: dict = {"samples": 0, "times": [], "not_ready": [], "backwards": [], "errors": []}
    done = threading.Event()
    last: dict[str, str] = {}

    def sample():
        while not done.is_set():
            try:
                listed_nodes = lab.kubectl(consumer, "get", "nodes", *nodes, "-o", "json").stdout
                listed = lab.kubectl(consumer, "get", "pods", "-n", namespace, "-o", "json")
            except (LabError, subprocess.TimeoutExpired) as error:  # a failed read is no sample, not a NotReady one
                seen["errors"].append(str(error)[:200])
                time.sleep(1)
                continue
            index = seen["samples"]
            seen["times"].append(time.monotonic())
            listed_nodes = json.loads(listed_nodes)  # one name gives the object, several a List
            for node in listed_nodes.get("items", [listed_nodes]):
                ready = next((c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), {})
                if ready.get("status") != "True":
                    name, reason = node["metadata"]["name"], ready.get("reason")
                    seen["not_ready"].append((time.strftime("%H:%M:%S"), name, ready.get("status"), reason, index))
            for pod in json.loads(listed.stdout)["items"]:
                name, phase = pod["metadata"]["name"], pod["status"].get("phase")
                if last.get(name) == "Running" and phase != "Running":
                    seen["backwards"].append((name, phase))
                last[name] = phase
            seen["samples"] += 1
            time.sleep(1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(timeout=30)


def longest_not_ready(seen: dict, node: str) -> float:
    """The longest stretch `watching` saw `node` NotReady, in seconds: from the last sample before it that found the
    node Ready (or the first sample) to the first one after it that did (or the last sample), so at least as long as
    the stretch was."""
    indices = sorted({sample[4] for sample in seen["not_ready"] if sample[1] == node})
    times, longest, start = seen["times"], 0.0, None
    for position, index in enumerate(indices):
        start = index if start is None else start
        if position + 1 == len(indices) or indices[position + 1] != index + 1:
            longest = max(longest, times[min(index + 1, len(times) - 1)] - times[max(start - 1, 0)])
            start = None
    return longest
