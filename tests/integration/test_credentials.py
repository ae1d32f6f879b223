"""The tenant credential is a bound, expiring token: renewed by the provider's manager and picked up by the
virtual kubelet in place; revoked, it turns the virtual node NotReady until the peering brings a new one.

Consumer cluster-1, provider cluster-3. The tenant's tokens live 600 s (the API server's minimum) and the
manager renews them after 10 % of their life, so one renewal happens within the test. The tests run in file
order and share one federation and one virtual kubelet process, whose PID must never change.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from catamaran import tenancy
from catamaran.constants import (
    RESOURCE_OFFER_NAME,
    SYSTEM_NAMESPACE,
    TENANT_CREDENTIAL_SECRET,
    TENANT_TOKEN_BINDING_SECRET,
    VIRTUAL_NODE_TAINT_KEY,
    tenant_namespace,
    virtual_node_name,
)

from . import federation
from .lab_access import get_json, wait_for
from .manifests import container

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-3"
NODE = virtual_node_name(PROVIDER)
NAMESPACE = "credentials"
TENANT = tenant_namespace(CONSUMER)
LIFETIME = 600
RENEW_FRACTION = 0.1  # renewal after 60 s
HEALTH = {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3}


@pytest.fixture(scope="module")
def fed(lab):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER, healthCheck=HEALTH)
    # The provider's terms for this tenant (written by the peering's provider side; read-only for the tenant).
    offer = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "ResourceOffer",
        "metadata": {"name": RESOURCE_OFFER_NAME, "namespace": TENANT},
        "spec": {"clusterID": PROVIDER, "credentialLifetimeSeconds": LIFETIME},
    }
    lab.kubectl(PROVIDER, "apply", "--server-side", "--field-manager=tests", "-f", "-", input=json.dumps(offer))
    manager = federation.ControllerProcess(
        lab,
        f"manager-{PROVIDER}",
        [
            "--kubeconfig",
            str(lab.kubeconfig(PROVIDER)),
            "--cluster-id",
            PROVIDER,
            "manager",
            "--credential-renew-fraction",
            str(RENEW_FRACTION),
        ],
    )
    processes = {"manager": manager, "vk": federation.virtual_kubelet(lab, CONSUMER, PROVIDER)}
    with federation.serving(lab, CONSUMER, PROVIDER, NAMESPACE, list(processes.values())):
        yield processes


def provider_credential(lab) -> dict | None:
    result = lab.kubectl(PROVIDER, "-n", TENANT, "get", "secret", TENANT_CREDENTIAL_SECRET, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def binding_uid(lab) -> str | None:
    result = lab.kubectl(
        PROVIDER, "-n", TENANT, "get", "secret", TENANT_TOKEN_BINDING_SECRET, "-o", "json", check=False
    )
    return json.loads(result.stdout)["metadata"]["uid"] if result.returncode == 0 else None


def consumer_token(lab) -> str:
    """The token in the consumer-side Secret the ForeignCluster names (what a restarted virtual kubelet uses)."""
    secret = get_json(lab, CONSUMER, "secret", "-n", SYSTEM_NAMESPACE, federation.credentials_secret(PROVIDER))
    config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return config["users"][0]["user"]["token"]


def annotation(secret: dict, key: str) -> str:
    return secret["metadata"]["annotations"][key]


def issued_with_lifetime(lab, lifetime: int) -> dict | None:
    """The provider's credential Secret once it holds a token minted with `lifetime`."""
    secret = provider_credential(lab)
    if secret and annotation(secret, tenancy.ANNOTATION_CREDENTIAL_LIFETIME) == str(lifetime):
        return secret
    return None


def offloaded_pod(name: str) -> str:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {"catamaran.io/type": "virtual-node"},
            "tolerations": [{"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}],
            "containers": [container(cpu="10m", memory="16Mi")],
        },
    }
    return json.dumps(pod)


def running_both_sides(lab, name: str) -> bool:
    local = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, name)
    remote = lab.kubectl(PROVIDER, "-n", f"{NAMESPACE}-{CONSUMER}", "get", "pod", name, "-o", "json", check=False)
    return (
        local["spec"].get("nodeName") == NODE
        and local["status"].get("phase") == "Running"
        and remote.returncode == 0
        and json.loads(remote.stdout)["status"].get("phase") == "Running"
    )


def ready_condition(lab, kind: str, name: str, *namespace: str) -> dict:
    conditions = get_json(lab, CONSUMER, kind, *namespace, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def never_logged(process: federation.ControllerProcess, tokens: list[str]) -> None:
    text = process.log_path.read_text(errors="replace")
    for token in tokens:
        assert token not in text, f"a token appears in {process.log_path}"


def test_token_is_renewed_by_the_manager_and_swapped_in_place(lab, fed):
    vk_pid = fed["vk"].process.pid
    # The manager replaces the day-long token of the peering with one of the tenant's terms (600 s)...
    first = wait_for(lambda: issued_with_lifetime(lab, LIFETIME), timeout=30, what="a 600 s token")
    first_token = tenancy.credential_token(first)
    issued = tenancy.parse_timestamp(annotation(first, tenancy.ANNOTATION_CREDENTIAL_ISSUED_AT))
    expires = tenancy.parse_timestamp(annotation(first, tenancy.ANNOTATION_CREDENTIAL_EXPIRES_AT))
    assert 590 <= expires - issued <= 610
    assert annotation(first, tenancy.ANNOTATION_CREDENTIAL_BOUND_TO) == binding_uid(lab)
    # ...which the virtual kubelet takes and writes back for its own restarts.
    wait_for(lambda: consumer_token(lab) == first_token, timeout=30, what="the 600 s token in the consumer Secret")
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=offloaded_pod("before-renewal"))
    wait_for(lambda: running_both_sides(lab, "before-renewal"), timeout=60, what="a pod offloaded before renewal")

    # After 10 % of its life the manager renews it, with no help from anyone.
    renewed = wait_for(
        lambda: (s := provider_credential(lab)) and tenancy.credential_token(s) != first_token and s,
        timeout=120,
        what="the manager to renew the token",
    )
    renewed_token = tenancy.credential_token(renewed)
    renewed_at = tenancy.parse_timestamp(annotation(renewed, tenancy.ANNOTATION_CREDENTIAL_ISSUED_AT))
    assert renewed_at >= issued + RENEW_FRACTION * LIFETIME - 2
    assert annotation(renewed, tenancy.ANNOTATION_CREDENTIAL_LIFETIME) == str(LIFETIME)
    wait_for(lambda: consumer_token(lab) == renewed_token, timeout=30, what="the renewed token in the consumer Secret")

    lab.kubectl(CONSUMER, "apply", "-f", "-", input=offloaded_pod("after-renewal"))
    wait_for(lambda: running_both_sides(lab, "after-renewal"), timeout=60, what="a pod offloaded after renewal")
    assert running_both_sides(lab, "before-renewal")
    assert fed["vk"].running
    assert fed["vk"].process.pid == vk_pid
    assert "provider credential replaced in place" in fed["vk"].log_path.read_text(errors="replace")
    for process in fed.values():
        never_logged(process, [first_token, renewed_token])


def test_revoked_token_turns_the_node_not_ready_until_the_peering_brings_a_new_one(lab, fed):
    vk_pid = fed["vk"].process.pid
    revoked_binding = binding_uid(lab)
    revoked_token = consumer_token(lab)
    lab.kubectl(PROVIDER, "-n", TENANT, "delete", "secret", TENANT_TOKEN_BINDING_SECRET)

    node = wait_for(
        lambda: (c := ready_condition(lab, "node", NODE)) and c["reason"] == "CredentialRejected" and c,
        # The API server may honour a revoked token for a while (its authentication cache).
        timeout=120,
        what="the virtual node NotReady for its rejected credential",
    )
    assert node["status"] == "False"
    foreign = wait_for(
        lambda: (
            (c := ready_condition(lab, "foreigncluster", PROVIDER, "-n", SYSTEM_NAMESPACE))
            and c["reason"] == "CredentialRejected"
            and c
        ),
        timeout=30,
        what="the ForeignCluster's Ready condition to name the rejected credential",
    )
    assert foreign["status"] == "False"

    # The manager re-created the binding and re-issued a token bound to it; the virtual kubelet does not
    # take it from the Secret it watched with its revoked token: the peering hands it over.
    reissued = wait_for(
        lambda: (
            (s := provider_credential(lab))
            and annotation(s, tenancy.ANNOTATION_CREDENTIAL_BOUND_TO) not in (revoked_binding, "")
            and annotation(s, tenancy.ANNOTATION_CREDENTIAL_BOUND_TO) == binding_uid(lab)
            and s
        ),
        timeout=30,
        what="a token bound to the new binding",
    )
    assert consumer_token(lab) == revoked_token
    assert ready_condition(lab, "node", NODE)["reason"] == "CredentialRejected"
    new_token = tenancy.credential_token(reissued)
    federation.store_credential(lab, CONSUMER, PROVIDER, new_token)  # as the peering module does

    wait_for(lambda: federation.node_ready(lab, CONSUMER, NODE) == "True", timeout=90, what="the node Ready again")
    wait_for(
        lambda: ready_condition(lab, "foreigncluster", PROVIDER, "-n", SYSTEM_NAMESPACE).get("status") == "True",
        timeout=30,
        what="the ForeignCluster Ready again",
    )
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=offloaded_pod("after-revocation"))
    wait_for(lambda: running_both_sides(lab, "after-revocation"), timeout=90, what="a pod offloaded after recovery")
    assert fed["vk"].running
    assert fed["vk"].process.pid == vk_pid
    for process in fed.values():
        never_logged(process, [revoked_token, new_token])
