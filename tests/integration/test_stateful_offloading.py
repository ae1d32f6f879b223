"""A StatefulSet offloaded on the storage fabric: namespace `stateful` of cluster-1 offloaded to cluster-3, whose pods
run on its real node and whose claims its default class provisions (the lab's local-path-provisioner: no class is
named anywhere, neither by the peering nor by the provider's terms).

Its claims are of the consumer's virtual class `catamaran`: each is reflected to the provider once its pod is bound to
the virtual node, and provisioned there by the provider's default class on the node the remote pod runs on.
"""

from __future__ import annotations

import json

import pytest

from catamaran.constants import VIRTUAL_STORAGE_CLASS, virtual_node_name
from catamaran_lab.localpath import STORAGE_CLASS as PROVIDER_DEFAULT_CLASS  # the lab's default class

from . import federation
from .lab_access import get_json, require_real_node, wait_for
from .manifests import restricted_busybox

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-3"
NODE = virtual_node_name(PROVIDER)
NAMESPACE = "stateful"
TWIN = f"{NAMESPACE}-{CONSUMER}"
# The first start writes when it started, every later one appends that it found it.
SCRIPT = "date +%s%N >> /data/starts; cat /data/starts; exec sleep 3600"


@pytest.fixture(scope="module")
def fed(lab, lab_config_in_use):
    require_real_node(lab_config_in_use.cluster(PROVIDER))
    with federation.remotely_offloaded(lab, CONSUMER, PROVIDER, NAMESPACE) as processes:
        yield processes


def stateful_set(replicas: int, name: str = "db", when_deleted: str = "Delete") -> dict:
    pod_spec = restricted_busybox(
        ["sh", "-c", SCRIPT], name="db", volumeMounts=[{"name": "data", "mountPath": "/data"}]
    )
    pod_spec["terminationGracePeriodSeconds"] = 1
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            # Scaled down, the claims stay for the pods that come back; deleted, as `when_deleted` says.
            "persistentVolumeClaimRetentionPolicy": {"whenScaled": "Retain", "whenDeleted": when_deleted},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "storageClassName": VIRTUAL_STORAGE_CLASS,
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Mi"}},
                    },
                }
            ],
        },
    }


def apply(lab, obj: dict) -> None:
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(obj))


def found(lab, cluster: str, kind: str, namespace: str | None, name: str) -> dict | None:
    args = (kind, name, *(("-n", namespace) if namespace else ()), "-o", "json", "--ignore-not-found")
    text = lab.kubectl(cluster, "get", *args).stdout.strip()
    return json.loads(text) if text else None


def running_db(lab, not_uid: str | None = None, name: str = "db-0") -> dict | None:
    pod = found(lab, CONSUMER, "pod", NAMESPACE, name)
    if not pod or pod["metadata"]["uid"] == not_uid or pod["metadata"].get("deletionTimestamp"):
        return None
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
    return pod if ready else None


def starts(lab) -> list[str]:
    """What the running db-0 has in its volume: one line per start that found it (kubectl exec, through the
    virtual node)."""
    out = lab.kubectl(CONSUMER, "-n", NAMESPACE, "exec", "db-0", "--", "cat", "/data/starts").stdout
    return out.split()


def test_a_stateful_set_runs_offloaded_its_data_kept_across_recreations_and_its_claims_as_its_policy_says(lab, fed):
    apply(lab, stateful_set(1))
    first = wait_for(lambda: running_db(lab), timeout=180, what="db-0 Running offloaded with its claim")
    assert first["spec"]["nodeName"] == NODE

    local_claim = found(lab, CONSUMER, "pvc", NAMESPACE, "data-db-0")
    assert local_claim["status"]["phase"] == "Bound"
    assert local_claim["spec"]["storageClassName"] == VIRTUAL_STORAGE_CLASS
    remote_claim = found(lab, PROVIDER, "pvc", TWIN, "data-db-0")
    assert remote_claim["status"]["phase"] == "Bound"
    assert remote_claim["spec"]["storageClassName"] == PROVIDER_DEFAULT_CLASS, "the provider's default class"
    volume = remote_claim["spec"]["volumeName"]
    provider_volume = found(lab, PROVIDER, "pv", None, volume)
    node_terms = provider_volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert node_terms[0]["matchExpressions"][0]["values"] == [f"{PROVIDER}-real"], "on the provider's real node"
    assert len(starts(lab)) == 1

    # The pod deleted: the StatefulSet makes it again, the new pod finds the data the first one wrote.
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "pod", "db-0")
    wait_for(lambda: running_db(lab, not_uid=first["metadata"]["uid"]), timeout=120, what="db-0 made again")
    assert len(starts(lab)) == 2
    assert found(lab, PROVIDER, "pvc", TWIN, "data-db-0")["spec"]["volumeName"] == volume, "the same volume"

    # Scaled to zero, the claim stays (whenScaled: Retain), on both sides; scaled back, the data is there.
    apply(lab, stateful_set(0))
    wait_for(lambda: found(lab, CONSUMER, "pod", NAMESPACE, "db-0") is None, timeout=60, what="db-0 gone")
    assert found(lab, CONSUMER, "pvc", NAMESPACE, "data-db-0") is not None
    assert found(lab, PROVIDER, "pvc", TWIN, "data-db-0")["spec"]["volumeName"] == volume
    apply(lab, stateful_set(1))
    wait_for(lambda: running_db(lab), timeout=120, what="db-0 back after scaling up")
    assert len(starts(lab)) == 3

    # Deleted, the StatefulSet takes its claims along (whenDeleted: Delete): the provider's claim and volume go too.
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "statefulset", "db")
    wait_for(
        lambda: found(lab, CONSUMER, "pvc", NAMESPACE, "data-db-0") is None,
        timeout=90,
        what="the local claim deleted with its StatefulSet",
    )
    wait_for(lambda: found(lab, PROVIDER, "pvc", TWIN, "data-db-0") is None, timeout=60, what="the provider's claim")
    wait_for(lambda: found(lab, PROVIDER, "pv", None, volume) is None, timeout=60, what="the provider's volume")


def test_un_offloading_says_which_claims_and_data_it_deletes_on_the_provider_before_it_does(lab, fed):
    """Last: the namespace stops being offloaded. Its StatefulSet, scaled to zero, keeps its claim here; the provider's
    copy, and the data of its volume there, go with the twin, and a Warning Event on the NamespaceOffloading says so
    when the drain starts."""
    apply(lab, stateful_set(1, name="keep", when_deleted="Retain"))
    wait_for(lambda: running_db(lab, name="keep-0"), timeout=180, what="keep-0 Running offloaded with its claim")
    volume = found(lab, PROVIDER, "pvc", TWIN, "data-keep-0")["spec"]["volumeName"]
    apply(lab, stateful_set(0, name="keep", when_deleted="Retain"))
    wait_for(lambda: found(lab, CONSUMER, "pod", NAMESPACE, "keep-0") is None, timeout=60, what="keep-0 gone")

    lab.kubectl(CONSUMER, "-n", NAMESPACE, "delete", "namespaceoffloading", "offloading", "--wait=false")

    def said():
        events = get_json(lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", "reason=TwinDataDeleted")[
            "items"
        ]
        return events[0] if events else None

    event = wait_for(said, timeout=60, what="the Warning Event that un-offloading deletes the provider's claims")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "NamespaceOffloading"
    assert "data-keep-0" in event["message"]
    assert f"cluster {PROVIDER}" in event["message"]
    wait_for(lambda: found(lab, PROVIDER, "pvc", TWIN, "data-keep-0") is None, timeout=90, what="the provider's claim")
    wait_for(lambda: found(lab, PROVIDER, "pv", None, volume) is None, timeout=60, what="the provider's volume")
    assert found(lab, CONSUMER, "pvc", NAMESPACE, "data-keep-0") is not None, "the consumer's claim stays (Retain)"
