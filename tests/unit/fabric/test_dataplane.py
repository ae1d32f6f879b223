"""Node routing (fabric/dataplane.py): current routes kept, stale ones removed."""

from __future__ import annotations

import asyncio
import json

from catamaran.fabric import dataplane
from catamaran.fabric.plan import ROUTE_METRIC, ROUTE_PROTOCOL


def test_node_routing_keeps_its_current_routes_and_removes_only_its_stale_ones(monkeypatch):
    """The commands NodeRouting.apply issues against what `ip` shows (a fake `run`: the host side is the lab's)."""
    shown = {
        ("ip", "-j", "route", "get", "172.31.0.2"): [
            {"dst": "172.31.0.2", "gateway": "172.30.0.1", "dev": "underlay0"}
        ],
        ("ip", "-j", "route", "show", "proto", str(ROUTE_PROTOCOL)): [
            {"dst": "10.9.0.5", "gateway": "172.30.0.1", "dev": "underlay0"},  # a /32, shown without its length
            {"dst": "10.2.0.0/16", "type": "unreachable"},  # a range no peering announces any more
        ],
    }
    issued = []

    async def run(*command, stdin=None, check=True):
        issued.append(command)
        return json.dumps(shown.get(command, []))

    async def succeeds(*command):
        return True

    monkeypatch.setattr(dataplane, "run", run)
    monkeypatch.setattr(dataplane, "succeeds", succeeds)
    asyncio.run(dataplane.NodeRouting().apply(["10.1.0.0/16", "10.9.0.5/32"], "172.31.0.2"))
    own = ("proto", str(ROUTE_PROTOCOL), "metric", str(ROUTE_METRIC))
    changes = [c for c in issued if c[:3] in (("ip", "route", "delete"), ("ip", "route", "replace"))]
    assert changes == [
        ("ip", "route", "delete", "10.2.0.0/16", *own),
        ("ip", "route", "replace", "10.1.0.0/16", "via", "172.30.0.1", "dev", "underlay0", *own),
        ("ip", "route", "replace", "10.9.0.5/32", "via", "172.30.0.1", "dev", "underlay0", *own),
    ]
    issued.clear()
    asyncio.run(dataplane.NodeRouting().apply(["10.1.0.0/16"], None))  # the gateway's pod between nodes
    assert ("ip", "route", "replace", "unreachable", "10.1.0.0/16", *own) in issued
