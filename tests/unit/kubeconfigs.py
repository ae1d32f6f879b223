"""A provider kubeconfig as the peering writes it, holding a tenant token."""

from __future__ import annotations

import yaml

from catamaran import tenancy


def kubeconfig_text(token: str, ca_data: str = "Q0E=") -> str:
    return yaml.safe_dump(tenancy.tenant_kubeconfig("https://10.0.0.1:6443", ca_data, token, "p1", "c1"))
