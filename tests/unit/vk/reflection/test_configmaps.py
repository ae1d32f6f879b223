"""Reflected ConfigMaps (vk/reflection/configmaps.py)."""

from __future__ import annotations

from catamaran.vk.reflection.configmaps import ConfigMaps
from catamaran.vk.reflection.kind import digest
from tests.unit.vk.reflection.contexts import CONTEXT, meta


def test_a_copy_read_back_compares_equal_to_its_local_object():
    local = {
        "metadata": meta(labels={"app": "web"}, annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
        "data": {"a": "1"},
    }
    copy = {
        "metadata": meta(
            namespace="shop-c",
            uid="remote",
            resourceVersion="9",
            labels={"app": "web", "catamaran.io/managed-by": "reflection", "catamaran.io/origin-cluster-id": "c"},
            annotations={"catamaran.io/local-uid": "u-1"},
        ),
        "data": {"a": "1"},
    }
    kind = ConfigMaps()
    reflected = kind.content(local, CONTEXT, local=True)
    assert reflected == {"metadata": {"labels": {"app": "web"}}, "data": {"a": "1"}}
    assert digest(kind.content(copy, CONTEXT, local=False)) == digest(reflected)
    copy["data"]["b"] = "tampered"
    assert digest(kind.content(copy, CONTEXT, local=False)) != digest(reflected)


def test_the_consumers_root_ca_gets_its_own_name_and_the_providers_maps_to_nothing():
    kind = ConfigMaps()
    assert kind.remote_name("kube-root-ca.crt") == "catamaran-root-ca.crt"
    assert kind.local_name("catamaran-root-ca.crt") == "kube-root-ca.crt"
    assert kind.local_name("kube-root-ca.crt") is None
