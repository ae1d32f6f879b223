"""What a ForeignCluster's spec must satisfy before a virtual kubelet serves it. Pure.

The CRD's schema checks types and ranges; what it cannot say (label and taint syntax, keys the
virtual kubelet sets itself) is checked here, so a bad spec is reported on the ForeignCluster, naming the
field, instead of a virtual node that can never be created while the peering looks Ready.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from ..constants import LABEL_REMOTE_CLUSTER_ID, LABEL_TYPE, TAINT_EFFECTS, VIRTUAL_NODE_TAINT_KEY

# Kubernetes' own rules (apimachinery validation: IsQualifiedName, IsValidLabelValue, IsDNS1123Subdomain).
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Labels the virtual kubelet sets on its node whatever the provider suggests.
OWN_NODE_LABELS = (
    LABEL_TYPE,
    LABEL_REMOTE_CLUSTER_ID,
    "kubernetes.io/role",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
)


def label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "has an empty prefix before '/'"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"prefix {prefix!r} is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253)"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (
            f"name {name!r} must be 1 to 63 characters, letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if value == "":
        return None
    if len(value) > 63 or not _NAME.match(value):
        return (
            "must be at most 63 characters, letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def foreign_spec_problems(spec: dict) -> list[str]:
    """Every problem of a ForeignCluster spec, each naming its field; empty when it can be served."""
    problems = []
    labels = spec.get("nodeLabels") or {}
    for key, value in sorted(labels.items()):
        field = f"spec.nodeLabels[{key!r}]"
        if (problem := label_key_problem(key)) is not None:
            problems.append(f"{field}: the key {problem}")
        elif key in OWN_NODE_LABELS:
            problems.append(f"{field}: the virtual kubelet sets this label itself; remove it")
        if not isinstance(value, str):
            problems.append(f"{field}: the value must be a string")
        elif (problem := label_value_problem(value)) is not None:
            problems.append(f"{field}: the value {value!r} {problem}")
    problems += taint_problems(spec.get("nodeTaints") or [])
    remap = (spec.get("networking") or {}).get("podCIDRRemap")
    if remap:
        try:
            ipaddress.ip_network(remap, strict=False)
        except ValueError as error:
            problems.append(f"spec.networking.podCIDRRemap: {remap!r} is not a CIDR ({error})")
    for index, cidr in enumerate((spec.get("networking") or {}).get("podCIDRs") or []):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except (TypeError, ValueError) as error:
            problems.append(f"spec.networking.podCIDRs[{index}]: {cidr!r} is not a CIDR ({error})")
    if spec.get("homeAPIServer"):
        try:
            home_api_server(spec)
        except ValueError as error:
            problems.append(f"spec.homeAPIServer: {error}")
    return problems


def taint_problems(taints: list) -> list[str]:
    """Problems of spec.nodeTaints: a taint as the API server accepts it on a Node, each key and effect once, and
    not the virtual kubelet's own taint."""
    problems = []
    seen = set()
    for index, taint in enumerate(taints):
        field = f"spec.nodeTaints[{index}]"
        if not isinstance(taint, dict):
            problems.append(f"{field}: must be a mapping of key, value and effect")
            continue
        key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
        if not isinstance(key, str) or not key:
            problems.append(f"{field}: the key must be a non-empty string")
        elif (problem := label_key_problem(key)) is not None:
            problems.append(f"{field}: the key {problem}")
        elif key == VIRTUAL_NODE_TAINT_KEY:
            problems.append(f"{field}: the virtual kubelet sets the taint {key} itself; remove it")
        if value is not None:
            if not isinstance(value, str):
                problems.append(f"{field}: the value must be a string")
            elif (problem := label_value_problem(value)) is not None:
                problems.append(f"{field}: the value {value!r} {problem}")
        if effect not in TAINT_EFFECTS:
            problems.append(f"{field}: the effect {effect!r} is none of {', '.join(TAINT_EFFECTS)}")
        if isinstance(key, str) and isinstance(effect, str):
            if (key, effect) in seen:
                problems.append(f"{field}: a taint with key {key!r} and effect {effect} is listed before")
            seen.add((key, effect))
    return problems


def home_api_server(spec: dict) -> tuple[str, int] | None:
    """(host, port) where the provider's pods reach this cluster's API server (spec.homeAPIServer), None if unset."""
    url = spec.get("homeAPIServer")
    if not url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port or 443
    except ValueError:
        raise ValueError(f"{url!r} has no valid port") from None
    if parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"{url!r} is not https://host[:port] (in-cluster clients speak TLS to a host and port)")
    return parts.hostname, port
