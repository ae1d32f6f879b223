"""A pod spec that meets Pod Security restricted, for the provider's tenant policy tests."""

from __future__ import annotations

import copy

from tests.integration.manifests import RESTRICTED_SECURITY_CONTEXT


def compliant_spec() -> dict:
    return {
        "containers": [{"name": "app", "image": "x", "securityContext": copy.deepcopy(RESTRICTED_SECURITY_CONTEXT)}],
        "volumes": [{"name": "config", "configMap": {"name": "c"}}, {"name": "scratch", "emptyDir": {}}],
    }
