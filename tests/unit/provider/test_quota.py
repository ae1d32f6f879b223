"""The tenant's quota and its reservations (provider/quota.py)."""

from __future__ import annotations

import random
from fractions import Fraction

from catamaran import quantities
from catamaran.provider import quota


def test_quota_is_the_share_of_the_allocatable_rounded_down():
    cap = quota.tenant_quota([{"cpu": "3", "pods": "11", "memory": "1001"}, {"cpu": "500m", "pods": "10"}], 50)
    assert cap == {"cpu": Fraction(7, 4), "pods": Fraction(10), "memory": Fraction(500)}
    assert quota.formatted(cap) == {"cpu": "1750m", "memory": "500", "pods": "10"}


def test_excess_names_each_resource_with_its_numbers():
    cap = {"cpu": Fraction(1), "pods": Fraction(10)}
    used = {"cpu": Fraction(9, 10), "pods": Fraction(3)}
    wanted = quota.pod_usage({"cpu": Fraction(1, 5), "nvidia.com/gpu": Fraction(1)})
    assert quota.excess(cap, used, wanted) == [
        "cpu (requested 200m, in use 900m, quota 1)",
        "nvidia.com/gpu (requested 1, in use 0, quota 0)",
    ]
    assert quota.excess(cap, used, quota.pod_usage({"cpu": Fraction(1, 10)})) == []


def test_reservations_stop_concurrent_admissions_from_overshooting():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(1), "pods": Fraction(10)}
    half = {"cpu": Fraction(1, 2)}
    assert ledger.admit(("t", "a"), "c", half, cap) == []
    assert ledger.admit(("t", "b"), "c", half, cap) == []
    # Neither pod is visible yet; the third would take the tenant past its quota.
    assert ledger.admit(("t", "c"), "c", half, cap) == ["cpu (requested 500m, in use 1, quota 1)"]
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(2)}
    # Another tenant's quota is its own.
    assert ledger.admit(("u", "a"), "other", half, cap) == []

    ledger.observe(("t", "a"), "c", half)  # the informer sees a pod: its reservation is settled, not counted twice
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(2)}
    ledger.release(("t", "b"))  # its creation failed
    assert ledger.used("c") == {"cpu": Fraction(1, 2), "pods": Fraction(1)}
    assert ledger.admit(("t", "c"), "c", half, cap) == []
    ledger.observe(("t", "a"), None, None)  # gone
    ledger.observe(("t", "c"), "c", half)
    assert ledger.used("c") == {"cpu": Fraction(1, 2), "pods": Fraction(1)}


def test_a_pod_being_replaced_does_not_count_against_its_replacement():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(1), "pods": Fraction(1)}
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1)})
    assert ledger.admit(("t", "a"), "c", {"cpu": Fraction(1)}, cap) == []
    assert ledger.admit(("t", "b"), "c", {"cpu": Fraction(0)}, cap) == ["pods (requested 1, in use 1, quota 1)"]


def test_a_resize_is_reserved_until_the_pod_is_seen_resized():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(2), "pods": Fraction(10)}
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1, 2)})
    ledger.observe(("t", "b"), "c", {"cpu": Fraction(1, 2)})
    # a's resize is judged without a's own use, and what it adds is held for it.
    assert ledger.admit(("t", "a"), "c", {"cpu": Fraction(1)}, cap) == []
    assert ledger.used("c") == {"cpu": Fraction(3, 2), "pods": Fraction(2)}
    assert ledger.admit(("t", "b"), "c", {"cpu": Fraction(3, 2)}, cap) == ["cpu (requested 1500m, in use 1, quota 2)"]
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1, 2)})  # its status changed, not yet its spec: still held
    assert ledger.used("c") == {"cpu": Fraction(3, 2), "pods": Fraction(2)}
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1)})  # seen resized: settled, counted once
    assert ledger.used("c") == {"cpu": Fraction(3, 2), "pods": Fraction(2)}
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1, 4)})  # resized down later: nothing held
    assert ledger.used("c") == {"cpu": Fraction(3, 4), "pods": Fraction(2)}


def test_a_pod_beyond_every_node_says_by_how_much_and_one_that_fits_a_node_passes():
    nodes = [{"cpu": "8", "memory": "32Gi", "pods": "110"}, {"cpu": "4", "memory": "64Gi", "pods": "110"}]
    fits = {"cpu": quantities.parse("6"), "memory": quantities.parse("16Gi")}
    assert quota.beyond_every_node(nodes, fits) == []
    too_big = {"cpu": quantities.parse("10"), "nvidia.com/gpu": quantities.parse("1")}
    assert quota.beyond_every_node(nodes, too_big) == [
        "cpu (requested 10, the most one node has 8)",
        "nvidia.com/gpu (requested 1, the most one node has 0)",
    ]


def test_a_pod_whose_resources_each_fit_some_node_but_never_one_together_is_beyond_every_node():
    nodes = [{"cpu": "8", "memory": "8Gi", "pods": "110"}, {"cpu": "2", "memory": "64Gi", "pods": "110"}]
    wanted = {"cpu": quantities.parse("6"), "memory": quantities.parse("32Gi")}
    assert quota.beyond_every_node(nodes, wanted) == ["no one node has all of cpu, memory, pods"]


def test_each_pool_of_a_tenant_is_its_own_bucket_apart_from_the_tenants_own():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(1), "pods": Fraction(10)}
    one = {"cpu": Fraction(1)}
    ledger.observe(("t", "own"), "c", one)  # the tenant's own bucket is full
    assert ledger.admit(("t", "more"), "c", one, cap) == ["cpu (requested 1, in use 1, quota 1)"]
    # A pool's pods are held to the pool's quota, whatever the tenant's own pods use.
    assert ledger.admit(("t", "g1"), "c", one, cap, pool="gpu") == []
    assert ledger.admit(("t", "g2"), "c", one, cap, pool="gpu") == ["cpu (requested 1, in use 1, quota 1)"]
    assert ledger.admit(("t", "s1"), "c", one, cap, pool="small") == []
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(1)}
    assert ledger.used("c", pool="gpu") == {"cpu": Fraction(1), "pods": Fraction(1)}
    assert ledger.used("other", pool="gpu") == {}, "another tenant's pool of the same name is its own"

    ledger.observe(("t", "g1"), "c", one, pool="gpu")  # seen: its reservation settled, counted once, in the pool only
    assert ledger.used("c", pool="gpu") == {"cpu": Fraction(1), "pods": Fraction(1)}
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(1)}
    ledger.observe(("t", "g1"), None, None)  # gone: the pool's usage falls, the tenant's does not
    assert ledger.used("c", pool="gpu") == {}
    assert ledger.used("c") == {"cpu": Fraction(1), "pods": Fraction(1)}
    assert ledger.admit(("t", "g2"), "c", one, cap, pool="gpu") == []


def test_a_pod_of_a_pool_resized_is_judged_in_its_pool():
    ledger = quota.Ledger()
    cap = {"cpu": Fraction(2), "pods": Fraction(10)}
    ledger.observe(("t", "a"), "c", {"cpu": Fraction(1)}, pool="gpu")
    ledger.observe(("t", "b"), "c", {"cpu": Fraction(2)})  # the tenant's own, in its own bucket
    assert ledger.admit(("t", "a"), "c", {"cpu": Fraction(2)}, cap, pool="gpu") == []
    assert ledger.used("c", pool="gpu") == {"cpu": Fraction(2), "pods": Fraction(1)}
    assert ledger.used("c") == {"cpu": Fraction(2), "pods": Fraction(1)}
    assert ledger.admit(("t", "a"), "c", {"cpu": Fraction(3)}, cap, pool="gpu") == [
        "cpu (requested 3, in use 0, quota 2)"
    ]


def _used_summed_anew(ledger: quota.Ledger, tenant: str, excluding, pool) -> dict:
    """What `used` must answer, summed from the pods seen and the reservations held, as every admission once did."""
    bucket = (tenant, pool)
    total: dict = {}
    for key, (owner, usage) in ledger._seen.items():
        if owner == bucket and key != excluding:
            quantities.add(total, usage)
    for key, (owner, usage) in ledger._reserved.items():
        if owner != bucket or key == excluding:
            continue
        seen = ledger._seen[key][1] if key in ledger._seen and ledger._seen[key][0] == bucket else {}
        quantities.add(total, {r: v - seen.get(r, 0) for r, v in usage.items() if v > seen.get(r, 0)})
    return {r: v for r, v in total.items() if v}


def test_the_kept_totals_answer_as_a_sum_over_every_pod_and_reservation_would():
    """Random observations, admissions and releases of a few pods in two buckets: after each, `used` answers what
    summing every pod seen and every reservation held answers."""
    rng = random.Random(43)
    ledger = quota.Ledger()
    keys = [("twin", f"p{i}") for i in range(8)]
    buckets = [("c1", None), ("c1", "gpu")]
    roomy = {"cpu": Fraction(1000), "memory": Fraction(10**12), "pods": Fraction(1000)}
    for _ in range(3000):
        key = rng.choice(keys)
        tenant, pool = rng.choice(buckets)
        requests = {"cpu": Fraction(rng.randint(0, 4), 2), "memory": Fraction(rng.randint(1, 3) * 2**20)}
        action = rng.randrange(4)
        if action == 0:
            ledger.observe(key, tenant, requests, pool)
        elif action == 1:
            ledger.observe(key, None, None)
        elif action == 2:
            ledger.admit(key, tenant, requests, roomy, pool)
        else:
            ledger.release(key)
        for tenant, pool in buckets:
            for excluding in (None, key):
                assert ledger.used(tenant, excluding, pool) == _used_summed_anew(ledger, tenant, excluding, pool)
