"""Reflected PersistentVolumeClaims (vk/reflection/claims.py)."""

from __future__ import annotations

from catamaran.vk.reflection.claims import PersistentVolumeClaims
from catamaran.vk.reflection.kind import Context
from catamaran.vk.reflection.policy import ReflectionSettings
from catamaran.vk.reflection.volumes import volume_for
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_claims_are_reflected_once_the_scheduler_picked_this_virtual_node():
    claim = {
        "metadata": meta("data", annotations={"volume.kubernetes.io/selected-node": "catamaran-p"}),
        "spec": {
            "storageClassName": "catamaran",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeMode": "Filesystem",
        },
    }
    kind = PersistentVolumeClaims()
    assert not kind.skipped(claim, CONTEXT)
    elsewhere = {**claim, "metadata": meta("data", annotations={"volume.kubernetes.io/selected-node": "node-1"})}
    assert kind.skipped(elsewhere, CONTEXT)
    configured = Context(settings=ReflectionSettings(storage_class="fast"), own_nodes=frozenset({"catamaran-p"}))
    assert kind.content(claim, configured, local=True)["spec"]["storageClassName"] == "fast"
    assert "storageClassName" not in kind.content(claim, CONTEXT, local=True)["spec"]
    volume = volume_for({**claim, "metadata": {**claim["metadata"], "uid": "u-9"}}, "catamaran-p", "p", "shop-c")
    assert volume["metadata"]["name"] == "pvc-u-9"
    assert volume["spec"]["claimRef"]["uid"] == "u-9"
    assert volume["spec"]["capacity"] == {"storage": "1Gi"}
    assert volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "catamaran-p"
    ]
