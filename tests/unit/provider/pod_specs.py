"""A pod spec that meets Pod Security restricted, for the provider's tenant policy tests."""

from __future__ import annotations

import copy

RESTRICTED_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def compliant_spec() -> dict:
    return {
        "containers": [{"name": "app", "image": "x", "securityContext": copy.deepcopy(RESTRICTED_CONTEXT)}],
        "volumes": [{"name": "config", "configMap": {"name": "c"}}, {"name": "scratch", "emptyDir": {}}],
    }
