"""The reflection context and object metadata the reflection tests share."""

from __future__ import annotations

from catamaran.vk.reflection.kind import Context
from catamaran.vk.reflection.policy import ReflectionSettings

CONTEXT = Context(settings=ReflectionSettings(), own_nodes=frozenset({"catamaran-p"}))


def meta(name="web", namespace="shop", **extra):
    return {"name": name, "namespace": namespace, "uid": "u-1", **extra}
