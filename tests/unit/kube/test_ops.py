"""kube/ops.py against a fake API server: writers of different conditions of one object keep each other's."""

from __future__ import annotations

import asyncio

from lightkube.resources.core_v1 import Namespace

from catamaran.kube.ops import patch_status_if_unchanged
from catamaran.kube.resources import ForeignCluster
from catamaran.objects import set_condition
from tests.unit.fakes.kube import FakeCluster


def test_two_writers_of_different_conditions_both_land():
    cluster = FakeCluster("consumer")
    cluster.add(Namespace, {"metadata": {"name": "catamaran-system"}})
    cluster.add(ForeignCluster, {"metadata": {"name": "p1", "namespace": "catamaran-system"}, "spec": {}})
    client = cluster.client()

    def setting(kind: str):
        def change(foreign: dict) -> dict | None:
            current = (foreign.get("status") or {}).get("conditions") or []
            return {"conditions": set_condition(current, kind, "True", "Because")}

        return patch_status_if_unchanged(client, ForeignCluster, "p1", "catamaran-system", change)

    async def scenario():
        await asyncio.gather(setting("Ready"), setting("NetworkPolicyEnforced"))

    asyncio.run(scenario())
    stored = cluster.read(ForeignCluster, "p1", "catamaran-system")
    assert {c["type"] for c in stored["status"]["conditions"]} == {"Ready", "NetworkPolicyEnforced"}
    patches = [a for a in cluster.actions if a.verb == "patch"]
    assert len(patches) == 3  # the second writer's first patch met the first's write (409) and was made again


def test_nothing_to_write_or_nothing_there_writes_nothing():
    cluster = FakeCluster("consumer")
    cluster.add(Namespace, {"metadata": {"name": "catamaran-system"}})
    client = cluster.client()
    gone = patch_status_if_unchanged(client, ForeignCluster, "p1", "catamaran-system", lambda foreign: {"x": 1})
    assert asyncio.run(gone) is None
    cluster.add(ForeignCluster, {"metadata": {"name": "p1", "namespace": "catamaran-system"}, "spec": {}})
    same = patch_status_if_unchanged(client, ForeignCluster, "p1", "catamaran-system", lambda foreign: None)
    assert asyncio.run(same) is None
    assert [a for a in cluster.actions if a.verb == "patch"] == []
