"""Which ForeignCluster specs a virtual kubelet serves (vk/validation.py)."""

from __future__ import annotations

import pytest

from catamaran.vk.validation import foreign_spec_problems, home_api_server
from tests.unit.vk.offloading_scope import COSTLY


def test_a_valid_spec_has_no_problem():
    spec = {
        "clusterID": "cluster-2",
        "nodeLabels": {"topology.kubernetes.io/region": "region-b", "example.com/tier": "", "plain": "a.b_c-1"},
        "networking": {"podCIDRRemap": "10.200.0.0/16"},
    }
    assert foreign_spec_problems(spec) == []


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"bad key": "x"}, "spec.nodeLabels['bad key']: the key name 'bad key' must be"),
        ({"Example.COM/x": "y"}, "spec.nodeLabels['Example.COM/x']: the key prefix 'Example.COM' is not a DNS"),
        ({"/x": "y"}, "the key has an empty prefix"),
        ({"a/" + "n" * 64: "y"}, "must be 1 to 63 characters"),
        ({"region": "has space"}, "spec.nodeLabels['region']: the value 'has space' must be at most 63"),
        ({"region": "v" * 64}, "the value"),
        ({"region": "-edge"}, "starting and ending with a letter or digit"),
        ({"catamaran.io/type": "other"}, "spec.nodeLabels['catamaran.io/type']: the virtual kubelet sets this label"),
    ],
)
def test_invalid_node_labels_are_named(labels, fragment):
    problems = foreign_spec_problems({"nodeLabels": labels})
    assert len(problems) == 1
    assert fragment in problems[0]


def test_valid_node_taints_have_no_problem():
    spec = {
        "nodeTaints": [
            COSTLY,
            {"key": "example.com/costly", "effect": "NoExecute"},  # the same key with another effect
            {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
        ]
    }
    assert foreign_spec_problems(spec) == []


@pytest.mark.parametrize(
    ("taints", "fragment"),
    [
        ([{"key": "bad key", "effect": "NoSchedule"}], "spec.nodeTaints[0]: the key name 'bad key' must be"),
        ([{"key": "Example.COM/x", "effect": "NoSchedule"}], "spec.nodeTaints[0]: the key prefix 'Example.COM'"),
        ([{"effect": "NoSchedule"}], "spec.nodeTaints[0]: the key must be a non-empty string"),
        ([{"key": "k", "value": "has space", "effect": "NoSchedule"}], "spec.nodeTaints[0]: the value 'has space'"),
        ([{"key": "k", "value": 5, "effect": "NoSchedule"}], "spec.nodeTaints[0]: the value must be a string"),
        (
            [{"key": "k", "effect": "NoEntry"}],
            "spec.nodeTaints[0]: the effect 'NoEntry' is none of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        ([{"key": "k"}], "spec.nodeTaints[0]: the effect None is none of"),
        (
            [COSTLY, {"key": "example.com/costly", "value": "x", "effect": "NoSchedule"}],
            "spec.nodeTaints[1]: a taint with key 'example.com/costly' and effect NoSchedule is listed before",
        ),
        (
            [{"key": "virtual-node.catamaran.io/not-allowed", "effect": "NoSchedule"}],
            "spec.nodeTaints[0]: the virtual kubelet sets the taint virtual-node.catamaran.io/not-allowed itself",
        ),
        (["k=v:NoSchedule"], "spec.nodeTaints[0]: must be a mapping of key, value and effect"),
    ],
)
def test_invalid_node_taints_are_named(taints, fragment):
    problems = foreign_spec_problems({"nodeTaints": taints})
    assert len(problems) == 1
    assert fragment in problems[0]


def test_every_problem_is_reported_at_once():
    spec = {"nodeLabels": {"ok": "fine", "bad key": "x", "k": "bad value"}, "networking": {"podCIDRRemap": "nope"}}
    problems = foreign_spec_problems(spec)
    assert len(problems) == 3
    assert problems[-1].startswith("spec.networking.podCIDRRemap: 'nope' is not a CIDR")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://203.0.113.10:6443", ("203.0.113.10", 6443)),
        ("https://api.example.com", ("api.example.com", 443)),
        ("https://[2001:db8::1]:6443/", ("2001:db8::1", 6443)),
    ],
)
def test_the_home_api_server_is_a_host_and_port(url, expected):
    assert home_api_server({"homeAPIServer": url}) == expected
    assert foreign_spec_problems({"homeAPIServer": url}) == []


@pytest.mark.parametrize("url", ["http://203.0.113.10:6443", "https://203.0.113.10:port", "https://h/api", "h:6443"])
def test_a_home_api_server_in_cluster_clients_cannot_use_is_named(url):
    (problem,) = foreign_spec_problems({"homeAPIServer": url})
    assert problem.startswith(f"spec.homeAPIServer: {url!r}")
