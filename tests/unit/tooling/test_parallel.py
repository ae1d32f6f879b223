"""How integration tests are grouped, ordered and given labs side by side (tests/parallel.py)."""

from __future__ import annotations

import pytest

from catamaran_lab import paths
from tests import parallel


def test_a_package_is_one_group_and_a_module_otherwise():
    module = "tests/integration/test_fabric.py"
    assert parallel.group_of(f"{module}::test_x[cluster-1]") == parallel.group_of(f"{module}::t@g") == module
    assert parallel.group_of("tests/integration/tenancy/test_terms.py::test_y") == "tests/integration/tenancy/"
    assert parallel.group_of("tests/unit/test_lab_config.py::test_w") == "tests/unit/test_lab_config.py"


def test_the_lab_contract_comes_first_then_the_longest():
    groups = ["a.py", "b.py", parallel.FIRST_GROUPS[1], "c.py", parallel.FIRST_GROUPS[0]]
    costs = {"a.py": 10.0, "b.py": 300.0, "c.py": 50.0}
    ordered = parallel.ordered_groups(groups, costs)
    assert ordered[:2] == [parallel.FIRST_GROUPS[0], parallel.FIRST_GROUPS[1]]
    assert ordered[2:] == ["b.py", "c.py", "a.py"]
    assert parallel.ordered_groups(["new.py", "a.py"], costs) == ["new.py", "a.py"], "unknown: a federation's cost"


def test_every_recorded_group_still_exists():
    """durations.json names groups as group_of() makes them; a renamed or removed one is a stale cost."""
    missing = [group for group in parallel.recorded_costs() if not (parallel.REPO_ROOT / group).exists()]
    assert not missing


def test_each_worker_has_a_lab_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("CATAMARAN_LAB_DIR", str(tmp_path / ".lab"))
    monkeypatch.delenv("CATAMARAN_LAB_BASE_PORT", raising=False)
    assert parallel.worker_lab_environment(0) == {}
    second = parallel.worker_lab_environment(1)
    assert second == {"CATAMARAN_LAB_DIR": str(tmp_path / ".lab-gw1"), "CATAMARAN_LAB_BASE_PORT": "26100"}
    overlap = parallel.overlap_lab_environment()
    assert overlap["CATAMARAN_LAB_OVERLAP"] == "1"
    ports = {int(parallel.worker_lab_environment(n).get("CATAMARAN_LAB_BASE_PORT", 26000)) for n in range(8)}
    assert len(ports | {int(overlap["CATAMARAN_LAB_BASE_PORT"])}) == paths.MAX_TEST_WORKERS + 1
    dirs = {parallel.worker_lab_environment(n).get("CATAMARAN_LAB_DIR") for n in range(1, 8)}
    covered = {str(d) for d in paths.labs_of_make_test()[1:]}
    assert dirs | {overlap["CATAMARAN_LAB_DIR"]} == covered, "lab-down --all takes every one down"
    with pytest.raises(pytest.UsageError, match="at most 8 workers"):
        parallel.worker_lab_environment(paths.MAX_TEST_WORKERS)


def test_a_build_is_made_once_per_run_and_again_after_a_failure(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "SHARED_DIR", tmp_path)
    monkeypatch.setenv(parallel.RUN_VARIABLE, "run-1")

    builds = []

    def broken(directory):
        builds.append(directory)
        raise RuntimeError("the build broke")

    def made(directory):
        builds.append(directory)
        (directory / "made").write_text("1")

    with pytest.raises(RuntimeError):
        parallel.built_once("thing", broken)
    directory = parallel.built_once("thing", made)
    assert len(builds) == 2, "a failed build is not reused"
    again = parallel.built_once("thing", made)
    assert len(builds) == 2, "a build of this run is reused"
    assert again == directory
    assert (again / "made").read_text() == "1"
    monkeypatch.setenv(parallel.RUN_VARIABLE, "run-2")
    parallel.built_once("thing", made)
    assert len(builds) == 3, "another run builds anew"
