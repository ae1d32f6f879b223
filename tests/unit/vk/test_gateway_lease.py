"""A virtual kubelet takes its cluster's fabric tunnels for down when the gateway stops renewing its Lease, on its own
clock: a NetworkReady=True the gone gateway left behind no longer counts."""

from __future__ import annotations

from catamaran.vk.assembly import network_problem
from catamaran.vk.gateway_lease import GatewayLease, Renewal


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lease(clock: Clock) -> GatewayLease:
    gateway = GatewayLease(None, clock=clock)  # type: ignore[arg-type]  # no call is made
    gateway.informer.synced.set()
    return gateway


FABRIC = {
    "spec": {"networking": {"mode": "Fabric"}},
    "status": {"conditions": [{"type": "NetworkReady", "status": "True", "reason": "TunnelUp"}]},
}


def test_renewed_in_time_the_gateway_runs_and_the_condition_decides():
    clock = Clock()
    gateway = lease(clock)
    gateway.observe(Renewal("t1", "node-a", 15.0))
    clock.now += 10
    gateway.observe(Renewal("t2", "node-a", 15.0))
    clock.now += 14
    assert gateway.problem() is None
    assert network_problem(FABRIC, gateway.problem()) is None


def test_a_lapsed_lease_takes_the_tunnels_down_whatever_the_condition_says():
    clock = Clock()
    gateway = lease(clock)
    gateway.observe(Renewal("t1", "node-a", 15.0))
    gateway.observe(Renewal("t1", "node-a", 15.0))  # the same record again: not a renewal
    clock.now += 16
    problem = network_problem(FABRIC, gateway.problem())
    assert problem is not None
    assert "node-a" in problem
    assert "has not renewed its Lease catamaran-fabric/catamaran-gateway since t1 (lapsed after 15 s)" in problem
    clock.now += 30
    assert network_problem(FABRIC, gateway.problem()) == problem  # the same words: pods are not rewritten each second


def test_no_lease_is_no_gateway_but_nothing_is_said_before_the_first_list():
    clock = Clock()
    gateway = GatewayLease(None, clock=clock)  # type: ignore[arg-type]
    assert gateway.problem() is None  # not synced yet
    gateway.informer.synced.set()
    assert "not running (no Lease catamaran-fabric/catamaran-gateway)" in (gateway.problem() or "")


def test_flat_peerings_need_no_gateway():
    clock = Clock()
    flat = {"spec": {"networking": {"mode": "Flat"}}}
    assert network_problem(flat, lease(clock).problem()) is None
