"""What a provider reports of a pod, and the consumer's ranges it is checked against (vk/status_back.py)."""

from __future__ import annotations

from catamaran.vk import status_back, trust

API_SERVER = "172.31.40.165"


def running(pod_ip: str, **remote) -> dict:
    return {"pod": {"phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], **remote}}


APP = {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}


def local_status(shadow_status: dict, translate, local: dict | None = None, spec: dict | None = None) -> dict:
    return status_back.local_pod_status(
        local or {},
        shadow_status,
        node_ip="10.0.0.9",
        translate=translate,
        provider_reachable=True,
        now="t",
        spec=APP if spec is None else spec,
    )


def kinds(refusals: list[trust.Refusal]) -> set[str]:
    return {refusal.kind for refusal in refusals}
