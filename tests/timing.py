"""Where the suite's time goes: each test's wall time split into the machine's CPU and waiting, and each run by file.

A pytest plugin (tests/conftest.py registers it). For every test it records, over setup, call and teardown:
- `wall`: seconds, as pytest's --durations counts them (a module fixture's setup falls to its first test);
- `machine_cpu`: CPU seconds the whole machine spent meanwhile (/proc/stat): the lab's control planes, nodes and
  controllers, kubectl, Ansible and pytest itself; `busy` is that over wall x CPUs, so `1 - busy` is waiting;
- `own_cpu`: CPU seconds of the pytest process and the children it reaped (kubectl, ansible-playbook, molecule);
- `slept`: seconds the test's own thread spent in time.sleep (polls, fixed pauses).

With pytest-xdist the workers measure and the controller adds up; tests that overlap in time both count the
machine's CPU of their overlap. At the end of a run it prints the slowest tests and the time by file, and writes
both to `$CATAMARAN_TEST_TIMES/<phase>.json` (default `.test-runs/times/`), which `python -m tests.timing report` merges
with the Makefile's phases (`tools/timed`) into the table `make test` ends with.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

TIMES_DIR_VARIABLE = "CATAMARAN_TEST_TIMES"
PHASE_VARIABLE = "CATAMARAN_TEST_PHASE"
DEFAULT_TIMES_DIR = Path(__file__).resolve().parent.parent / ".test-runs" / "times"
PHASES_FILE = "phases.tsv"  # tools/timed appends "<phase>\t<seconds>\t<exit status>\t<start, epoch s>" lines
# `python -m tests.timing probe WHEN` appends "<when>\t<1-minute load>\t<reference CPU s>\t<epoch s>" lines
MACHINE_FILE = "machine.tsv"
REFERENCE_LOOPS = 10_000_000
SLOWEST = 20
_PROPERTY = "catamaran_timing"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_CPUS = os.cpu_count() or 1


@dataclass
class Sample:
    """Counters at one instant."""

    wall: float
    machine_cpu: float
    own_cpu: float
    slept: float

    @classmethod
    def now(cls) -> Sample:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            time.monotonic(),
            machine_busy_seconds(),
            own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
            _sleep_counter.main_thread_seconds,
        )

    def since(self, start: Sample) -> Sample:
        return Sample(
            self.wall - start.wall,
            self.machine_cpu - start.machine_cpu,
            self.own_cpu - start.own_cpu,
            self.slept - start.slept,
        )

    def plus(self, other: Sample) -> Sample:
        return Sample(
            self.wall + other.wall,
            self.machine_cpu + other.machine_cpu,
            self.own_cpu + other.own_cpu,
            self.slept + other.slept,
        )


ZERO = Sample(0.0, 0.0, 0.0, 0.0)


def machine_busy_seconds() -> float:
    """CPU seconds every CPU of the machine spent outside idle and iowait since boot."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _CLOCK_TICKS  # guest time is already counted in user time


class _SleepCounter:
    """time.sleep, counting the seconds the main thread sleeps (background samplers' sleeps are not the test's)."""

    def __init__(self) -> None:
        self.main_thread_seconds = 0.0
        self._real_sleep = time.sleep

    def install(self) -> None:
        if time.sleep is not self.sleep:
            self._real_sleep = time.sleep
            time.sleep = self.sleep

    def uninstall(self) -> None:
        if time.sleep is self.sleep:
            time.sleep = self._real_sleep

    def sleep(self, seconds: float) -> None:
        start = time.monotonic()
        try:
            self._real_sleep(seconds)
        finally:
            if threading.current_thread() is threading.main_thread():
                self.main_thread_seconds += time.monotonic() - start


_sleep_counter = _SleepCounter()


@dataclass
class TestTime:
    nodeid: str
    wall: float
    machine_cpu: float
    own_cpu: float
    slept: float
    outcome: str

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]

    @property
    def busy(self) -> float:
        """The machine's CPUs' busy share over the test (0 to 1)."""
        return self.machine_cpu / (self.wall * _CPUS) if self.wall > 0 else 0.0


class Recorder:
    """Measures in the process that runs the tests; adds up wherever reports arrive (the xdist controller)."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.started = time.monotonic()
        self.run_start = Sample.now()
        self._phase_start: dict[str, Sample] = {}
        self._measured: dict[str, Sample] = defaultdict(lambda: ZERO)
        self.tests: dict[str, TestTime] = {}

    # -- measuring (in the process running the test) ---------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        measured = Sample.now().since(self._phase_start.pop(item.nodeid, Sample.now()))
        report.user_properties.append((_PROPERTY, asdict(measured)))
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        self._phase_start[item.nodeid] = Sample.now()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        self._phase_start[item.nodeid] = Sample.now()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item):
        self._phase_start[item.nodeid] = Sample.now()

    # -- adding up (where reports arrive) --------------------------------------------------------------------------

    def pytest_runtest_logreport(self, report):
        measured = next((value for key, value in report.user_properties if key == _PROPERTY), None)
        sample = Sample(**measured) if measured else Sample(report.duration, 0.0, 0.0, 0.0)
        sample.wall = report.duration  # pytest's own figure, as --durations prints it
        total = self._measured[report.nodeid].plus(sample)
        self._measured[report.nodeid] = total
        previous = self.tests.get(report.nodeid)
        outcome = report.outcome if report.when == "call" or report.failed else (previous.outcome if previous else "")
        self.tests[report.nodeid] = TestTime(report.nodeid, **asdict(total), outcome=outcome)

    def by_file(self) -> list[dict]:
        files: dict[str, dict] = {}
        for test in self.tests.values():
            entry = files.setdefault(test.file, {"file": test.file, "tests": 0, "wall": 0.0, "machine_cpu": 0.0})
            entry["tests"] += 1
            entry["wall"] += test.wall
            entry["machine_cpu"] += test.machine_cpu
        return sorted(files.values(), key=lambda entry: -entry["wall"])

    def pytest_terminal_summary(self, terminalreporter):
        if not self.tests or hasattr(self.config, "workerinput"):  # an xdist worker: its controller reports
            return
        elapsed = time.monotonic() - self.started
        whole = Sample.now().since(self.run_start)
        write = terminalreporter.write_line
        terminalreporter.section(f"slowest {SLOWEST} (setup + call + teardown; busy = the machine's CPUs' share)")
        write(f"{'wall s':>8} {'busy':>5} {'own cpu s':>9} {'slept s':>7}  test")
        for test in sorted(self.tests.values(), key=lambda t: -t.wall)[:SLOWEST]:
            busy = _share(test.busy, test.wall)
            write(f"{test.wall:8.1f} {busy} {test.own_cpu:9.1f} {test.slept:7.1f}  {test.nodeid}")
        terminalreporter.section("time by file (sums of the tests' own times)")
        write(f"{'wall s':>8} {'busy':>5} {'tests':>5}  file")
        for entry in self.by_file():
            busy = entry["machine_cpu"] / (entry["wall"] * _CPUS) if entry["wall"] else 0.0
            write(f"{entry['wall']:8.1f} {_share(busy, entry['wall'])} {entry['tests']:5d}  {entry['file']}")
        write(
            f"{elapsed:8.1f} {whole.machine_cpu / (elapsed * _CPUS):5.0%} {len(self.tests):5d}  "
            f"this run's wall time (the machine: {_CPUS} CPUs)"
        )
        self._write(elapsed, whole)

    def _write(self, elapsed: float, whole: Sample) -> None:
        directory = times_dir()
        directory.mkdir(parents=True, exist_ok=True)
        phase = os.environ.get(PHASE_VARIABLE) or "pytest"
        document = {
            "phase": phase,
            "elapsed": elapsed,
            "machine_cpu": whole.machine_cpu,
            "cpus": _CPUS,
            "tests": [asdict(test) | {"busy": test.busy} for test in self.tests.values()],
            "files": self.by_file(),
        }
        (directory / f"{phase}.json").write_text(json.dumps(document, indent=1))


def _share(busy: float, wall: float) -> str:
    """A busy share, five wide; below a second the kernel's 10 ms ticks make it noise."""
    return f"{busy:5.0%}" if wall >= 1 else "    -"


def times_dir() -> Path:
    return Path(os.environ.get(TIMES_DIR_VARIABLE) or DEFAULT_TIMES_DIR)


def configure(config: pytest.Config) -> None:
    _sleep_counter.install()
    config.pluginmanager.register(Recorder(config), "catamaran-timing")


def unconfigure(config: pytest.Config) -> None:
    _sleep_counter.uninstall()


# -- the machine's state beside a run ------------------------------------------------------------------------------


def reference_cpu_seconds() -> float:
    """CPU seconds a fixed pure-Python loop takes. The same work costs more CPU time on a host whose cores are busy
    with other guests: nearly the same tests once used 2.1 times the CPU seconds of another run, with nothing else
    running on this machine. Runs compare only beside this figure."""
    start = time.process_time()
    total = 0
    for number in range(REFERENCE_LOOPS):
        total += number * number
    return time.process_time() - start


def probe(directory: Path, when: str) -> str:
    """Record the machine's load and speed at `when` (the start and the end of `make test`)."""
    line = f"{when}\t{os.getloadavg()[0]:.2f}\t{reference_cpu_seconds():.3f}\t{int(time.time())}"
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / MACHINE_FILE).open("a") as machine:
        machine.write(line + "\n")
    return line


def _machine_lines(directory: Path) -> list[str]:
    probes = directory / MACHINE_FILE
    if not probes.exists():
        return []
    lines = [f"the machine ({_CPUS} CPUs): load over the last minute, and the CPU seconds of a fixed reference loop"]
    for when, load, reference, _ in (line.split("\t") for line in probes.read_text().splitlines()):
        lines.append(f"{'':8}  {when}: load {float(load):.2f}, reference loop {float(reference):.3f} CPU s")
    return lines


# -- the report `make test` ends with ------------------------------------------------------------------------------


def report(directory: Path) -> str:
    """The slowest tests of the whole run, then every phase `tools/timed` recorded, in order, the pytest phases split
    by file (last, so that the tail of a log shows them). Phases may overlap (the overlap run beside the integration
    run): the total is the span they cover."""
    lines = [f"{'seconds':>8}  phase"]
    phases = directory / PHASES_FILE
    recorded = [line.split("\t") for line in phases.read_text().splitlines()] if phases.exists() else []
    tests: list[dict] = []
    for name, seconds, status, _ in recorded:
        failed = "" if status == "0" else f"  (exit {status})"
        lines.append(f"{float(seconds):8.1f}  {name}{failed}")
        document = directory / f"{name}.json"
        if not document.exists():
            continue
        measured = json.loads(document.read_text())
        tests += [dict(test, phase=name) for test in measured["tests"]]
        for entry in measured["files"]:
            busy = entry["machine_cpu"] / (entry["wall"] * measured["cpus"]) if entry["wall"] else 0.0
            lines.append(f"{entry['wall']:8.1f}    {entry['file']} ({entry['tests']} tests, busy {busy:.0%})")
    if recorded:
        start = min(int(started) for *_, started in recorded)
        end = max(int(started) + float(seconds) for _, seconds, _, started in recorded)
        lines.append(f"{end - start:8.1f}  total, start to end")
    slowest = [f"slowest {SLOWEST} of the whole run (wall s; busy: the machine's CPUs' share meanwhile):"]
    for test in sorted(tests, key=lambda t: -t["wall"])[:SLOWEST]:
        slowest.append(f"{test['wall']:8.1f} {test['busy']:5.0%}  {test['phase']}: {test['nodeid']}")
    return "\n".join([*slowest, "", *lines, *_machine_lines(directory)])


USAGE = "usage: python -m tests.timing report [DIRECTORY] | python -m tests.timing probe WHEN [DIRECTORY]"

if __name__ == "__main__":
    command = sys.argv[1:2]
    if command == ["report"]:
        print(report(Path(sys.argv[2]) if len(sys.argv) > 2 else times_dir()))
    elif command == ["probe"] and len(sys.argv) > 2:
        print("the machine:", probe(Path(sys.argv[3]) if len(sys.argv) > 3 else times_dir(), sys.argv[2]))
    else:
        sys.exit(USAGE)
