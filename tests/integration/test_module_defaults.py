"""A playbook sets the connection once: `module_defaults` for the action group `catamaran.federation.all` and
K8S_AUTH_KUBECONFIG in the environment, and peers two lab clusters (consumer cluster-2, provider cluster-3) whose
tasks name at most a context; then un-peers them, leaving nothing.

The kubeconfig holds both clusters with its certificates in files named by paths RELATIVE to the kubeconfig's
directory, and the playbook runs from another directory: the modules must resolve them as kubectl does.
A second test reaches a cluster with a host, a token minted for the test and a CA file, no kubeconfig.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from catamaran.constants import (
    NODE_LEASE_NAMESPACE,
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    tenant_namespace,
    virtual_node_name,
)
from catamaran_lab.paths import REPO_ROOT

from . import federation
from .playbooks import PlaybookRun, ansible_env, ansible_playbook

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-2", "cluster-3"
NODE = virtual_node_name(PROVIDER)
TENANT = tenant_namespace(CONSUMER)
MODULE_SECRET = f"catamaran-credentials-{PROVIDER}"  # what the peering module names the consumer's credential
GROUP = "group/catamaran.federation.all"
TOKEN_ACCOUNT = "catamaran-module-defaults-test"


def relative_kubeconfig(lab, directory: Path) -> Path:
    """Both clusters in one kubeconfig whose CA, client certificate and key are files named relative to it."""
    merged = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for cluster in (CONSUMER, PROVIDER):
        one = yaml.safe_load(lab.kubeconfig(cluster).read_text())
        for section, field in (("clusters", "cluster"), ("users", "user")):
            for entry in one[section]:
                body = entry[field]
                for key in ("certificate-authority", "client-certificate", "client-key"):
                    if f"{key}-data" in body:
                        relative = Path("pki") / cluster / f"{key}.pem"
                        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
                        (directory / relative).write_bytes(base64.b64decode(body.pop(f"{key}-data")))
                        body[key] = str(relative)
                merged[section].append(entry)
        merged["contexts"] += one["contexts"]
    merged["current-context"] = PROVIDER  # never relied on: every task names its context or gets one by default
    path = directory / "federation.kubeconfig"
    path.write_text(yaml.safe_dump(merged))
    path.chmod(0o600)
    assert "certificate-authority: pki/" in path.read_text()  # the test proves nothing with inline data
    return path


def play(tasks: list[dict], defaults: dict) -> list[dict]:
    return [
        {
            "name": "Catamaran with the connection set once",
            "hosts": "localhost",
            "gather_facts": False,
            "module_defaults": {GROUP: defaults},
            "tasks": tasks,
        }
    ]


def peering_tasks(state: str) -> list[dict]:
    """No task names the kubeconfig (K8S_AUTH_KUBECONFIG); the consumer's context comes from module_defaults."""
    crds = str(REPO_ROOT / "controller" / "crds")
    tasks = [
        {
            "name": "Reach both clusters",
            "catamaran.federation.cluster_info": {"context": "{{ item }}"},
            "loop": [CONSUMER, PROVIDER],
            "register": "reached",
        },
        {"name": "CRDs on the consumer (its context from module_defaults)", "catamaran.federation.crds": {"src": crds}},
        {"name": "CRDs on the provider", "catamaran.federation.crds": {"context": PROVIDER, "src": crds}},
        {
            "name": f"Peering {state}",
            "catamaran.federation.peering": {
                "consumer": {},
                "provider": {"context": PROVIDER},
                "consumer_id": CONSUMER,
                "provider_id": PROVIDER,
                "state": state,
                "sharing_percentage": 50,
                "wait": state == "present",
                "wait_timeout": 90,
            },
            "register": "peered",
        },
        {"name": "Peerings of the consumer", "catamaran.federation.peering_info": {}, "register": "peerings"},
    ]
    return tasks


def run(directory: Path, name: str, document: list[dict], **environment: str) -> PlaybookRun:
    """ansible-playbook on localhost from a directory that is neither the repository nor the kubeconfig's."""
    playbook = directory / f"{name}.yml"
    playbook.write_text(yaml.safe_dump(document, sort_keys=False))
    inventory = directory / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                        }
                    }
                }
            }
        )
    )
    cwd = directory / "elsewhere"
    cwd.mkdir(exist_ok=True)
    env = ansible_env(
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        **environment,
    )
    for variable in ("K8S_AUTH_CONTEXT", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY", "KUBECONFIG"):
        env.pop(variable, None)  # only what the test sets
    return ansible_playbook(inventory, str(playbook), cwd=cwd, env=env)


def results(outcome: PlaybookRun) -> dict[str, dict]:
    """Each task's result on localhost, by task name."""
    document = json.loads(outcome.stdout[outcome.stdout.index("{") :])
    return {task["task"]["name"]: task["hosts"]["localhost"] for task in document["plays"][0]["tasks"]}


def exists(lab, cluster: str, *args: str) -> bool:
    return lab.kubectl(cluster, "get", *args, check=False).returncode == 0


def leftovers(lab) -> list[str]:
    """Anything of the cluster-2 -> cluster-3 peering still on either side."""
    checks = {
        f"{CONSUMER}: ForeignCluster {PROVIDER}": (CONSUMER, "-n", SYSTEM_NAMESPACE, "foreigncluster", PROVIDER),
        f"{CONSUMER}: Secret {MODULE_SECRET}": (CONSUMER, "-n", SYSTEM_NAMESPACE, "secret", MODULE_SECRET),
        f"{CONSUMER}: node {NODE}": (CONSUMER, "node", NODE),
        f"{CONSUMER}: Lease {NODE}": (CONSUMER, "-n", NODE_LEASE_NAMESPACE, "lease", NODE),
        f"{PROVIDER}: namespace {TENANT}": (PROVIDER, "namespace", TENANT),
    }
    found = [what for what, (cluster, *args) in checks.items() if exists(lab, cluster, *args)]
    twins = lab.kubectl(
        PROVIDER, "get", "namespaces", "-l", f"catamaran.io/origin-cluster-id={CONSUMER}", "-o", "name"
    ).stdout.split()
    return found + [f"{PROVIDER}: {twin}" for twin in twins]


def clean(lab) -> None:
    federation.unpeer(lab, CONSUMER, PROVIDER)
    lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "delete", "secret", MODULE_SECRET, check=False)
    lab.kubectl(PROVIDER, "delete", "namespace", TENANT, "--timeout=90s", check=False, timeout=120)


@pytest.fixture(scope="module")
def federation_processes(lab):
    """The provider's manager (it mints the tenant's credential) and the consumer's virtual kubelet."""
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    clean(lab)
    manager = federation.manager(lab, PROVIDER)
    kubelet = federation.virtual_kubelet(lab, CONSUMER, PROVIDER)
    try:
        manager.start()
        kubelet.start()
        yield manager, kubelet
    finally:
        kubelet.stop()
        manager.stop()
        clean(lab)


def test_module_defaults_and_k8s_auth_kubeconfig_peer_two_clusters_then_unpeer_them(
    lab, federation_processes, tmp_path
):
    kube = tmp_path / "kube"
    kube.mkdir()
    kubeconfig = relative_kubeconfig(lab, kube)
    defaults = {"context": CONSUMER, "request_timeout": 30}

    present = run(tmp_path, "peer", play(peering_tasks("present"), defaults), K8S_AUTH_KUBECONFIG=str(kubeconfig))
    assert present.returncode == 0, present.failures() or present.output[-3000:]
    tasks = results(present)
    reached = {item["item"]: item["cluster"] for item in tasks["Reach both clusters"]["results"]}
    assert reached[CONSUMER]["context"] == CONSUMER
    assert reached[PROVIDER]["context"] == PROVIDER
    assert reached[CONSUMER]["server"] != reached[PROVIDER]["server"]
    peered = tasks["Peering present"]
    assert peered["changed"] is True
    assert peered["peering"]["virtual_node_ready"] is True
    (peering,) = [p for p in tasks["Peerings of the consumer"]["peerings"] if p["provider_id"] == PROVIDER]
    assert peering["managed_by_ansible"] is True, peering
    assert peering["virtual_node"]["ready"] is True, peering

    # The peering exists on both sides, made by the module through the relative-path kubeconfig.
    assert exists(lab, CONSUMER, "-n", SYSTEM_NAMESPACE, "foreigncluster", PROVIDER)
    assert exists(lab, PROVIDER, "-n", TENANT, "resourceoffer", RESOURCE_OFFER_NAME)
    assert federation.node_ready(lab, CONSUMER, NODE) == "True"
    # The consumer's credential carries the provider's CA, read from the file the kubeconfig names relatively.
    secret = json.loads(
        lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "get", "secret", MODULE_SECRET, "-o", "json").stdout
    )
    credential = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    provider_ca = (kube / "pki" / PROVIDER / "certificate-authority.pem").read_bytes()
    assert base64.b64decode(credential["clusters"][0]["cluster"]["certificate-authority-data"]) == provider_ca
    assert credential["clusters"][0]["cluster"]["server"] == reached[PROVIDER]["server"]

    absent = run(tmp_path, "unpeer", play(peering_tasks("absent"), defaults), K8S_AUTH_KUBECONFIG=str(kubeconfig))
    assert absent.returncode == 0, absent.failures() or absent.output[-3000:]
    assert results(absent)["Peering absent"]["changed"] is True
    assert leftovers(lab) == []
    assert not [p for p in results(absent)["Peerings of the consumer"]["peerings"] if p["provider_id"] == PROVIDER]


def test_a_host_a_token_and_a_ca_file_reach_a_cluster_without_any_kubeconfig(lab, tmp_path):
    kube = tmp_path / "kube"
    kube.mkdir()
    relative_kubeconfig(lab, kube)
    ca = kube / "pki" / PROVIDER / "certificate-authority.pem"
    server = yaml.safe_load(lab.kubeconfig(PROVIDER).read_text())["clusters"][0]["cluster"]["server"]
    lab.kubectl(PROVIDER, "-n", "default", "create", "serviceaccount", TOKEN_ACCOUNT, check=False)
    lab.kubectl(
        PROVIDER, "create", "clusterrole", TOKEN_ACCOUNT, "--verb=get,list",
        "--resource=customresourcedefinitions.apiextensions.k8s.io", check=False,
    )  # fmt: skip
    lab.kubectl(
        PROVIDER, "create", "clusterrolebinding", TOKEN_ACCOUNT, f"--clusterrole={TOKEN_ACCOUNT}",
        f"--serviceaccount=default:{TOKEN_ACCOUNT}", check=False,
    )  # fmt: skip
    try:
        token = lab.kubectl(
            PROVIDER, "-n", "default", "create", "token", TOKEN_ACCOUNT, "--duration=10m"
        ).stdout.strip()
        tasks = [
            {
                "name": "With a token",
                "catamaran.federation.cluster_info": {"host": server, "api_key": token, "ca_cert": str(ca)},
                "register": "with_token",
            },
            {
                "name": "With a refused token",
                "catamaran.federation.cluster_info": {"host": server, "api_key": "not-a-token", "ca_cert": str(ca)},
                "register": "refused",
                "ignore_errors": True,
            },
        ]
        # module_defaults and K8S_AUTH_KUBECONFIG name the consumer: a host with a token needs no kubeconfig and wins.
        environment = {"K8S_AUTH_KUBECONFIG": str(kube / "missing.kubeconfig")}
        outcome = run(tmp_path, "token", play(tasks, {"context": CONSUMER}), **environment)
        assert outcome.returncode == 0, outcome.failures() or outcome.output[-3000:]
        found = results(outcome)
        assert found["With a token"]["cluster"]["server"] == server
        assert found["With a token"]["cluster"]["version"].startswith("v")
        refused = found["With a refused token"]
        assert refused["failed"] is True
        assert refused["msg"].startswith(f"{server}: GET the API server: "), refused["msg"]
        assert refused["status"] == 401
        assert token not in outcome.output  # never printed
    finally:
        lab.kubectl(PROVIDER, "delete", "clusterrolebinding", TOKEN_ACCOUNT, check=False)
        lab.kubectl(PROVIDER, "delete", "clusterrole", TOKEN_ACCOUNT, check=False)
        lab.kubectl(PROVIDER, "-n", "default", "delete", "serviceaccount", TOKEN_ACCOUNT, check=False)
