"""The benches' quiet-machine gate (bench/harness.py): figures of a noisy run do not land in bench/results."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import harness


def test_what_neither_the_bench_nor_its_lab_spent_is_the_others_share():
    assert harness.others_share(busy_s=10.0, ours_s=8.0, seconds=10.0, cpus=2) == 0.1
    assert harness.others_share(busy_s=5.0, ours_s=6.0, seconds=10.0, cpus=2) == 0.0  # never below nothing
    assert harness.others_share(busy_s=5.0, ours_s=0.0, seconds=0.0, cpus=2) == 0.0


def test_a_run_is_quiet_only_if_others_stayed_low_before_and_during_it():
    assert harness.quiet_verdict(0.05, 0.08) is None
    noisy = harness.quiet_verdict(0.05, 0.40)
    assert noisy is not None
    assert "during 40%" in noisy
    assert "before" not in noisy
    assert "before 30% and during 20%" in (harness.quiet_verdict(0.30, 0.20) or "")


def test_a_child_of_the_bench_counts_as_its_own(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in harness._ours(tmp_path / "no-lab")
    finally:
        child.kill()
        child.wait()


def test_a_noisy_run_writes_apart_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(harness, "NOISY_RESULTS", tmp_path / "noisy")
    watch = harness.QuietWatch()
    watch.before = 0.5  # half the machine was busy with something else before the run
    watch._start = watch._sample()
    monkeypatch.setattr(harness, "QUIET", watch)
    assert harness.write_csv("figures.csv", [{"a": 1}]).parent == tmp_path / "noisy"
    assert harness.write_csv("outcomes.csv", [{"a": 1}], timed=False).parent == tmp_path / "results"
    allowed = harness.QuietWatch()
    allowed.before, allowed._start, allowed.allow_noisy = 0.5, allowed._sample(), True
    monkeypatch.setattr(harness, "QUIET", allowed)
    assert harness.write_csv("figures.csv", [{"a": 1}]).parent == tmp_path / "results"


def test_the_cpu_of_lab_processes_ended_mid_run_stays_the_benchs(monkeypatch):
    """bench/liqo.py brings the lab down and up between systems: the first lab's CPU must not turn into others'."""
    spent = {os.getpid(): 1.0, 4242: 5.0}
    monkeypatch.setattr(harness, "_process_seconds", lambda pid: spent[pid])
    monkeypatch.setattr(harness, "_ours", lambda root: set(spent))
    watch = harness.QuietWatch()
    watch._start = (0.0, 0.0, 0.0)
    watch.carry_ending()
    del spent[4242]  # the lab's process has ended
    assert watch._ours_seconds() == 6.0
