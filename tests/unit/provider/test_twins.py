"""Twin namespaces (provider/twins.py): reserved names, Pod Security labels, endpoint ranges, and the origin a
twin belongs to (issue 37).
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube.resources.core_v1 import Pod

from catamaran.kube.events import EventRecorder
from catamaran.provider.twins import pod_security_labels, reserved_name
from tests.unit.twin_cases import CONSUMER, TENANT, TWIN, Recorder, twin_namespace


def test_a_provider_pod_range_change_recomputes_every_twins_endpoint_ranges():
    from catamaran.provider.twins import TwinNamespaceController

    twins = TwinNamespaceController(None, "p", tenants=None, events=None)
    for key in (("catamaran-tenant-a", "web-a"), ("catamaran-tenant-b", "db-b")):
        twins.twins._store(key, {"metadata": {"name": key[1]}})
    twins.pod_ranges_changed()
    assert len(twins.queue) == 2


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("default", True),
        ("kube-system", True),
        ("kube-anything", True),
        ("catamaran-system", True),
        ("catamaran-fabric", True),  # the fabric's keys: a consumer whose id is `fabric` gets another twin name
        ("catamaran-tenant-cluster-2", True),
        ("shop-cluster-1", False),
        ("kubeflow", False),
        ("catamaran-demo", False),
    ],
)
def test_reserved_twin_names(name, reserved):
    assert reserved_name(name) is reserved


def test_twins_enforce_warn_and_audit_the_level_at_the_latest_version():
    assert pod_security_labels("baseline") == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "baseline",
        "pod-security.kubernetes.io/audit": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn-version": "latest",
        "pod-security.kubernetes.io/audit-version": "latest",
    }


def test_a_twin_namespace_is_owned_by_the_twinnamespace_of_its_recorded_origin_only():
    from catamaran.provider.twins import owned_by

    twin_of = f"{TENANT}/{TWIN}"
    assert owned_by(twin_namespace("victim"), twin_of, "victim")
    assert not owned_by(twin_namespace("victim"), twin_of, "evil")
    assert owned_by(twin_namespace("victim"), twin_of)  # made for this TwinNamespace's name, whatever its origin
    assert owned_by(twin_namespace(None), twin_of, "evil")  # made before origins were recorded: adopted, recorded
    assert not owned_by(twin_namespace("victim"), f"catamaran-tenant-other/{TWIN}", "victim")


def test_what_a_twinnamespace_may_never_use_is_named_with_its_reason():
    from catamaran.provider.offers import TenantTerms
    from catamaran.provider.twins import name_refusal, ownership_conflict

    twin_of = f"{TENANT}/{TWIN}"
    assert name_refusal("kube-system", CONSUMER, TenantTerms())[0] == "ReservedName"
    assert name_refusal("shop-elsewhere", CONSUMER, TenantTerms())[0] == "TwinNameNotAllowed"
    assert name_refusal(f"shop-{CONSUMER}", CONSUMER, TenantTerms()) is None
    assert ownership_conflict(None, TWIN, twin_of, "victim") is None
    assert ownership_conflict(twin_namespace("victim"), TWIN, twin_of, "victim") is None
    assert ownership_conflict(twin_namespace("victim"), TWIN, twin_of, "evil")[0] == "TwinNamespaceTaken"
    assert ownership_conflict({"metadata": {"name": TWIN}}, TWIN, twin_of, "victim")[0] == "NamespaceConflict"


def twin_controller(existing: dict, origin: str, deleting: bool = False):
    from catamaran.kube.informer import Informer
    from catamaran.provider.twins import TwinNamespaceController

    client = Recorder()
    tenants = Informer(client, Pod, name="tenants")
    tenants._store((None, TENANT), CONSUMER)
    controller = TwinNamespaceController(client, "p1", tenants=tenants, events=EventRecorder(client, "test"))
    meta = {"name": TWIN, "namespace": TENANT, "uid": "twin-uid", "finalizers": ["catamaran.io/twin-namespace"]}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-01T00:00:00Z"
    controller.twins._store((TENANT, TWIN), {"metadata": meta, "spec": {"originNamespace": origin}})
    controller.namespaces._store((None, TWIN), existing)
    return controller, client


def test_the_provider_refuses_a_twinnamespace_of_another_origin_for_an_existing_twin():
    controller, client = twin_controller(twin_namespace("victim"), "evil")
    asyncio.run(controller.reconcile((TENANT, TWIN)))
    [event] = [call[2] for call in client.calls if call[1] == "Event"]
    assert (event.reason, event.involvedObject.name) == ("TwinNamespaceTaken", TWIN)
    statuses = [call[4]["status"] for call in client.calls if call[0] == "patch" and "status" in call[4]]
    assert statuses[-1]["phase"] == "Conflict"
    assert not [call for call in client.calls if call[0] in ("apply", "delete")]  # no rights granted, nothing removed


def test_deleting_a_twinnamespace_of_another_origin_never_removes_the_twin():
    controller, client = twin_controller(twin_namespace("victim"), "evil", deleting=True)
    asyncio.run(controller.reconcile((TENANT, TWIN)))
    assert not [call for call in client.calls if call[0] == "delete"]


def test_a_twin_made_before_origins_were_recorded_gets_its_origin_recorded():
    controller, client = twin_controller(twin_namespace(None), "victim")
    asyncio.run(controller.reconcile((TENANT, TWIN)))
    [patch] = [call[4] for call in client.calls if call[0] == "patch" and call[2] == TWIN and "metadata" in call[4]][
        -1:
    ]
    assert patch["metadata"]["annotations"]["catamaran.io/origin-namespace"] == "victim"
