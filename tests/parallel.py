"""Integration tests side by side: pytest-xdist workers, each with a lab of its own, each running whole groups.

- **A lab per worker.** Worker `gw0` uses the lab as configured (`.lab/`, ports 26000+); worker `gwN` the lab
  `<that directory>-gwN/`, ports 100*N higher, whose clusters take pod ranges, links and an underlay of their own
  (catamaran_lab.config). Same cluster names, so a test never knows which lab it has; nothing is shared but the
  host's kernel, and `make lab-down` takes every lab down.
- **Groups.** A group runs whole on one worker, in order, so module and package fixtures (a federation) are built
  once: a package of tests/integration (its modules share the federation its conftest.py builds), else a module.
- **Order.** The lab's own contract groups first (a broken lab fails within minutes), then the longest first
  (the recorded costs in durations.json), so the workers finish together. A worker gets its next group only when
  it has run the one before (xdist would queue a second group behind a long one).
- **Built once per run.** What a run builds from the checkout (the collection's artifact, the controller's image,
  the previous release) is built by the first worker that needs it, under a lock, and reused by the others and by
  every pytest process of the same `make test` (CATAMARAN_TEST_RUN).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from catamaran_lab import config as lab_config
from catamaran_lab import paths

REPO_ROOT = Path(__file__).resolve().parent.parent
INTEGRATION = "tests/integration/"
DURATIONS = REPO_ROOT / "tests" / "integration" / "durations.json"
# The lab's own contract: cheap, and everything else needs it.
FIRST_GROUPS = (
    "tests/integration/test_lab_smoke.py",
    "tests/integration/test_real_nodes.py",
    "tests/integration/test_lab_network.py",
)
UNKNOWN_GROUP_SECONDS = 120.0  # a group not in durations.json yet: about a federation's setup and a few tests
PORT_BLOCK = 100  # a lab's clusters use base+10 .. base+99 (catamaran_lab.config)
RUN_VARIABLE = "CATAMARAN_TEST_RUN"
# Set by `run`: each worker takes its lab down when its last test ends, so no idle lab costs CPU beside the rest.
LAB_DOWN_VARIABLE = "CATAMARAN_TEST_LAB_DOWN_AFTER"
SHARED_DIR = REPO_ROOT / ".test-runs" / "shared"


def group_of(nodeid: str) -> str:
    """The group a test runs in: its package under tests/integration, else its module."""
    path = nodeid.split("::", 1)[0].split("@", 1)[0]
    if path.startswith(INTEGRATION) and path.count("/") > 2:
        return path.rsplit("/", 1)[0] + "/"
    return path


def recorded_costs() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def ordered_groups(groups: list[str], costs: dict[str, float]) -> list[str]:
    """The lab's contract first, then the longest first; ties keep their collection order."""
    first = [group for group in FIRST_GROUPS if group in groups]
    rest = [group for group in groups if group not in first]
    rest.sort(key=lambda group: -costs.get(group, UNKNOWN_GROUP_SECONDS))
    return first + rest


def worker_number() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


def worker_lab_environment(number: int) -> dict[str, str]:
    """The CATAMARAN_LAB_* variables of worker `number`'s lab: the configured lab for worker 0, else one beside it."""
    if number == 0:
        return {}
    if number >= paths.MAX_TEST_WORKERS:
        raise pytest.UsageError(f"at most {paths.MAX_TEST_WORKERS} workers have a lab of their own, not {number + 1}")
    return {
        "CATAMARAN_LAB_DIR": str(paths.worker_lab_dir(paths.state_dir(), number)),
        "CATAMARAN_LAB_BASE_PORT": str(lab_config.load().base_port + PORT_BLOCK * number),
    }


def overlap_lab_environment() -> dict[str, str]:
    """The lab of the run on overlapping pod ranges, beside the workers' labs (the last port block of ten)."""
    return {
        "CATAMARAN_LAB_DIR": str(paths.labs_of_make_test()[-1]),
        "CATAMARAN_LAB_BASE_PORT": str(lab_config.load().base_port + PORT_BLOCK * (paths.MAX_TEST_WORKERS + 1)),
        "CATAMARAN_LAB_OVERLAP": "1",
    }


def run_id() -> str:
    """One `make test` (every pytest process it starts), else one xdist run, else this process."""
    return os.environ.get(RUN_VARIABLE) or os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


def built_once(name: str, build: Callable[[Path], object]) -> Path:
    """The directory of `name`, shared by every process of this run: the first caller runs `build` into it, the
    others wait for that build and reuse it. A build that fails is not kept: the next caller builds again."""
    from filelock import FileLock

    directory = SHARED_DIR / run_id() / name
    directory.parent.mkdir(parents=True, exist_ok=True)
    done = directory / ".built"
    with FileLock(f"{directory}.lock"):
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            done.touch()
    return directory


class GroupOrder:
    """Collection: the groups in the order above, each group's tests in their own order."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        by_group: dict[str, list[pytest.Item]] = {}
        for item in items:
            by_group.setdefault(group_of(item.nodeid), []).append(item)
        items[:] = [item for group in ordered_groups(list(by_group), recorded_costs()) for item in by_group[group]]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        if config.getoption("dist") not in ("loadscope", "loadgroup"):
            return None
        return _group_scheduling(config, log)


def _group_scheduling(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """LoadScopeScheduling with group_of() as the scope, and no second group queued behind a running one."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            # A worker holds its last test back until it knows the next one (fixture teardown needs it): one
            # pending test means the group is all but run.
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    return GroupScheduling(config, log)


def lab_down_after_run() -> bool:
    return os.environ.get(LAB_DOWN_VARIABLE) == "1"


def configure(config: pytest.Config) -> None:
    os.environ.update(worker_lab_environment(worker_number()))
    config.pluginmanager.register(GroupOrder(), "catamaran-group-order")


# -- `make test`'s integration phase -------------------------------------------------------------------------------


def run_integration(workers: int, overlap_tests: list[str]) -> int:
    """The integration tests on `workers` labs side by side and, at the same time, `overlap_tests` again on a lab
    whose clusters share one pod range, taken down as soon as they end (an idle lab costs a fifth of a CPU); each
    phase timed (tools/timed). The overlap run's output follows the main run's. Returns the first failure's exit
    status, else 0."""
    timed = str(REPO_ROOT / "tools" / "timed")
    bin_dir = Path(sys.executable).parent
    # progress shows as it happens, also in CI's log
    environ = dict(os.environ, PYTHONUNBUFFERED="1", **{LAB_DOWN_VARIABLE: "1"})
    environ.setdefault(RUN_VARIABLE, uuid.uuid4().hex)
    overlap_environ = dict(environ, **overlap_lab_environment())
    log = SHARED_DIR.parent / "overlap.log"
    log.parent.mkdir(parents=True, exist_ok=True)

    def overlap_run(output) -> int:
        command = [timed, "overlap", str(bin_dir / "pytest"), *overlap_tests]
        status = subprocess.run(command, env=overlap_environ, stdout=output, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        down = [str(bin_dir / "catamaran-lab"), "down"]
        subprocess.run(down, env=overlap_environ, stdout=output, stderr=subprocess.STDOUT, cwd=REPO_ROOT, check=False)
        return status.returncode

    with log.open("w") as output, ThreadPoolExecutor(max_workers=1) as beside:
        overlapped = beside.submit(overlap_run, output)
        main = subprocess.run(
            [
                timed,
                "integration",
                str(bin_dir / "pytest"),
                "-n",
                str(workers),
                "--dist",
                "loadscope",
                "tests/integration",
            ],
            env=environ,
            cwd=REPO_ROOT,
            check=False,
        )
        overlap_status = overlapped.result()
    print(f"\n==== the same fabric tests on overlapping pod ranges ({log}) ====", flush=True)
    print(log.read_text(), flush=True)
    return main.returncode or overlap_status


def record_costs(measured: Path) -> dict[str, float]:
    """durations.json from a run's figures (tests/timing.py's JSON of the integration phase): each group's wall time,
    its tests' summed. Run after a change that moves a group's cost, so that the longest still start first."""
    tests = json.loads(measured.read_text())["tests"]
    costs: dict[str, float] = {}
    for test in tests:
        group = group_of(test["nodeid"])
        costs[group] = round(costs.get(group, 0.0) + test["wall"], 1)
    ordered = dict(sorted(costs.items(), key=lambda item: -item[1]))
    DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n")
    return ordered


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.parallel")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help=run_integration.__doc__)
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("overlap_tests", nargs="+", help="the tests to run again on overlapping pod ranges")
    costs = commands.add_parser("record-costs", help=record_costs.__doc__)
    costs.add_argument("measured", type=Path, nargs="?", default=SHARED_DIR.parent / "times" / "integration.json")
    arguments = parser.parse_args()
    if arguments.command == "run":
        sys.exit(run_integration(arguments.workers, arguments.overlap_tests))
    print(json.dumps(record_costs(arguments.measured), indent=1))
