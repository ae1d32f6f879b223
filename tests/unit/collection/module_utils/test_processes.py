"""Controller process settings (plugins/module_utils/processes.py)."""

from __future__ import annotations

import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.processes import (
    SupervisedProcess,
    liveness_problem,
    name_problem,
)


@pytest.mark.parametrize("name", ["manager-cluster-1", "vk-c1-p2", "a", "x.y_z"])
def test_good_process_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "-lead", "with space", "x" * 101])
def test_bad_process_names_are_refused_naming_the_field(name):
    assert name_problem(name).startswith("name: ")


def test_liveness_settings_must_be_positive():
    assert liveness_problem(None) is None
    assert liveness_problem({"period": 10, "timeout": 5, "failure_threshold": 3}) is None
    assert liveness_problem({"period": -1, "timeout": 5, "failure_threshold": 3}).startswith("liveness.period:")
    assert liveness_problem({"period": 1, "timeout": 5, "failure_threshold": 0}).startswith(
        "liveness.failure_threshold:"
    )


def test_the_health_url_file_goes_to_the_supervisor_and_before_the_subcommand():
    process = SupervisedProcess("/state", "vk-a", "/py")
    args = process.supervisor_args(
        ["--cluster-id", "c", "virtual-kubelet"], {"period": 2, "timeout": 1, "failure_threshold": 3}
    )
    child = args[args.index("--") + 1 :]
    assert child == [
        "/py",
        "-m",
        "catamaran",
        "--health-url-file",
        "/state/vk-a.health-url",
        "--cluster-id",
        "c",
        "virtual-kubelet",
    ]
    assert args[args.index("--liveness-url-file") + 1] == "/state/vk-a.health-url"
    assert args[args.index("--liveness-failures") + 1] == "3"
    plain = process.supervisor_args(["manager"], None)
    assert "--liveness-url-file" not in plain
    assert plain[plain.index("--") + 1 :] == ["/py", "-m", "catamaran", "manager"]
