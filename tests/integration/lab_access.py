"""What integration tests use to read, wait on and act in the lab's clusters (fixtures stay in conftest.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from catamaran_lab.errors import LabError
from catamaran_lab.lab import Lab


def require_real_node(cluster):
    """The cluster's real node; a lab without one fails the test, naming why (never a silent skip)."""
    if cluster.real_node is None:
        pytest.fail(
            f"{cluster.name} has no real node (the lab runs with CATAMARAN_LAB_REAL_NODES=0), "
            "so this test, which needs real containers, could not run",
            pytrace=False,
        )
    return cluster.real_node


def wait_for(predicate, timeout: float = 60, interval: float = 0.5, what: str = "condition"):
    """Poll a test predicate until it returns a truthy value; the value is returned."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(LabError):
            last = predicate()
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


def get_json(lab: Lab, cluster: str, *args: str) -> dict:
    return json.loads(lab.kubectl(cluster, "get", *args, "-o", "json").stdout)


def apply_quota(lab: Lab, cluster: str, quota: dict) -> None:
    """Apply a ResourceQuota and wait until it is enforced: quota admission ignores a quota whose status.hard the
    quota controller has not written yet, so an object created before then is admitted."""
    lab.kubectl(cluster, "apply", "-f", "-", input=json.dumps(quota))
    namespace, name = quota["metadata"]["namespace"], quota["metadata"]["name"]

    def enforced() -> bool:
        applied = get_json(lab, cluster, "resourcequota", "-n", namespace, name)
        return (applied.get("status") or {}).get("hard") == applied["spec"]["hard"]  # both in the server's units

    wait_for(enforced, what=f"the quota controller to enforce ResourceQuota {namespace}/{name}")


def kill_container_process(container_id: str) -> int:
    """SIGKILL a real node's container's processes from the host, as the OOM killer would: found by their cgroup."""
    hex_id = container_id.split("://", 1)[1]
    killed = 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if hex_id in Path(f"/proc/{entry}/cgroup").read_text():
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
    return killed
