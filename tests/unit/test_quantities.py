"""Quantities (quantities.py): exact parsing, shares rounded down, a pod's requests, free resources."""

from __future__ import annotations

from fractions import Fraction

import pytest

from catamaran import quantities


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("1", Fraction(1)),
        ("1.5", Fraction(3, 2)),
        ("1Gi", Fraction(2**30)),
        ("500Ki", Fraction(500 * 1024)),
        ("1e3", Fraction(1000)),
        ("2k", Fraction(2000)),
        ("250n", Fraction(250, 10**9)),
    ],
)
def test_quantities_parse_exactly(text, value):
    assert quantities.parse(text) == value


def test_garbage_quantity_is_rejected():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantities.parse("lots")


def test_share_rounds_down_and_names_what_vanished():
    capacity, vanished = quantities.share({"cpu": "3", "memory": "1001", "nvidia.com/gpu": "1", "pods": "10"}, 90)
    assert capacity == {"cpu": "2700m", "memory": "900", "nvidia.com/gpu": "0", "pods": "9"}
    assert vanished == ["nvidia.com/gpu"]


def test_share_of_whole_cpus_prints_whole_cpus():
    assert quantities.share({"cpu": "10"}, 50)[0] == {"cpu": "5"}


def test_pod_requests_count_init_containers_sidecars_and_overhead():
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "100m"}}}, {"resources": {"limits": {"cpu": "200m"}}}],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        ],
        "overhead": {"cpu": "10m"},
    }
    requests = quantities.pod_requests(spec)
    assert requests["cpu"] == Fraction(1) + Fraction(50, 1000) + Fraction(10, 1000)
    assert requests["memory"] == Fraction(2**30)


def test_free_resources_never_go_negative():
    free = quantities.free_resources([{"cpu": "1"}], [{"cpu": Fraction(3)}])
    assert free == {"cpu": Fraction(0)}


def test_pod_level_requests_count_when_larger_than_the_containers():
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "50m", "memory": "1Gi"}}}]}
    spec["resources"] = {"requests": {"cpu": "1500m"}}
    requests = quantities.pod_requests(spec)
    assert requests["cpu"] == Fraction(3, 2)
    assert requests["memory"] == 2**30  # the containers' where larger
    assert quantities.pod_requests({"containers": [], "resources": {"limits": {"cpu": "2"}}})["cpu"] == 2


def test_resources_compare_by_amount_as_the_api_server_writes_them():
    assert quantities.same_resources(
        {"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": {"memory": "1073741824"}},
        {"requests": {"cpu": "1", "memory": "1024Mi"}, "limits": {"memory": "1Gi"}},
    )
    assert not quantities.same_resources({"requests": {"cpu": "1"}}, {"requests": {"cpu": "2"}})
    assert not quantities.same_resources({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1", "memory": "1Gi"}})
    assert not quantities.same_resources(
        {"requests": {"cpu": "1"}}, {"requests": {"cpu": "1"}, "claims": [{"name": "x"}]}
    )
