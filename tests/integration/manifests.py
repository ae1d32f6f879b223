"""Small manifest builders shared by the integration tests and the benchmarks."""

from __future__ import annotations

IMAGE = "registry.invalid/app:1"  # never pulled: kwok and the provider's kwok run nothing


def container(name: str = "app", cpu: str | None = None, memory: str | None = None) -> dict:
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value}
    return {"name": name, "image": IMAGE, **({"resources": {"requests": requests}} if requests else {})}


def deployment(name: str, replicas: int, pod_spec: dict | None = None, namespace: str | None = None) -> dict:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec or {"containers": [container()]}},
        },
    }
