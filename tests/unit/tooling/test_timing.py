"""How the test run's time is reported (tests/timing.py)."""

from __future__ import annotations

import json

from tests import timing


def test_the_report_splits_phases_by_file_and_spans_overlapping_phases(tmp_path):
    phases = ["lint\t30.0\t0\t1000", "integration\t600.0\t0\t1030", "overlap\t300.0\t1\t1040"]
    (tmp_path / timing.PHASES_FILE).write_text("\n".join(phases) + "\n")
    tests = [
        {"nodeid": "tests/integration/test_a.py::t1", "wall": 400.0, "busy": 0.5},
        {"nodeid": "tests/integration/test_b.py::t2", "wall": 100.0, "busy": 0.25},
    ]
    files = [
        {"file": "tests/integration/test_a.py", "tests": 1, "wall": 400.0, "machine_cpu": 400.0},
        {"file": "tests/integration/test_b.py", "tests": 1, "wall": 100.0, "machine_cpu": 50.0},
    ]
    document = {"phase": "integration", "elapsed": 600.0, "machine_cpu": 450.0, "cpus": 2}
    document |= {"tests": tests, "files": files}
    (tmp_path / "integration.json").write_text(json.dumps(document))
    lines = timing.report(tmp_path).splitlines()
    assert "   600.0  integration" in lines
    assert "   400.0    tests/integration/test_a.py (1 tests, busy 50%)" in lines
    assert "   300.0  overlap  (exit 1)" in lines
    assert "   630.0  total, start to end" in lines
    slowest = lines[lines.index(next(line for line in lines if line.startswith("slowest"))) + 1]
    assert slowest.endswith("integration: tests/integration/test_a.py::t1")


def test_sleeps_count_only_on_the_main_thread():
    counter = timing._SleepCounter()
    counter.sleep(0.01)
    assert counter.main_thread_seconds >= 0.01


def test_probes_of_the_machine_are_recorded_and_reported_after_the_phases(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "REFERENCE_LOOPS", 500_000)  # a twentieth of the real loop: the unit phase stays fast
    (tmp_path / timing.PHASES_FILE).write_text("lint\t30.0\t0\t1000\n")
    start = timing.probe(tmp_path, "start").split("\t")
    timing.probe(tmp_path, "end")
    assert start[0] == "start"
    assert float(start[2]) > 0
    lines = timing.report(tmp_path).splitlines()
    assert lines[-3].startswith("the machine (")
    assert lines[-2].strip().startswith("start: load ")
    assert "reference loop" in lines[-2]
    assert lines[-1].strip().startswith("end: load ")
