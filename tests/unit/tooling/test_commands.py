"""How the integration tests run commands that start processes of their own (tests/integration/commands.py), as
ansible-playbook (tests/integration/playbooks.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from catamaran_lab.host import process_alive
from tests.integration import commands, playbooks

# A stand-in for ansible-playbook that forks a worker, as Ansible does, and records the worker's pid.
FORKING_PLAYBOOK = """#!/bin/sh
sleep 300 &
echo $! > "$PIDFILE"
echo started >&2
wait
"""


def test_a_run_past_its_time_is_killed_with_every_process_it_forked(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "ansible-playbook"
    fake.write_text(FORKING_PLAYBOOK)
    fake.chmod(0o755)
    pidfile = tmp_path / "worker.pid"
    monkeypatch.setattr(playbooks, "ANSIBLE_PLAYBOOK", fake)
    monkeypatch.setattr(playbooks, "PLAYBOOK_TIMEOUT", 1)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            playbooks.ansible_playbook(
                tmp_path / "inventory.yml", "site.yml", cwd=tmp_path, env={"PIDFILE": str(pidfile)}
            )
        except BaseException as error:  # handed to the test's thread
            raised.append(error)

    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(timeout=30)  # the worker sleeps 300 s: a caller still waiting is waiting for it
    worker = int(pidfile.read_text())
    try:
        assert not caller.is_alive(), "the run still waits for its forked worker, which holds its output pipes"
        assert [type(error) for error in raised] == [subprocess.TimeoutExpired]
        assert not process_alive(worker), "the playbook's forked worker outlived the run"
        assert "started" in capsys.readouterr().err, "what the run printed to stderr is kept for the report"
    finally:
        if process_alive(worker):
            os.kill(worker, signal.SIGKILL)


# A command whose child leaves its process group (a daemon in a session of its own) and keeps its output pipes.
ESCAPING_COMMAND = """setsid sleep 300 &
echo $! > "$PIDFILE"
wait
"""


def test_a_killed_command_is_not_waited_for_when_a_process_outside_its_group_holds_its_output(
    tmp_path, monkeypatch, capsys
):
    pidfile = tmp_path / "escaped.pid"
    monkeypatch.setattr(commands, "KILLED_OUTPUT_SECONDS", 1.0)
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            commands.run(["sh", "-c", ESCAPING_COMMAND], timeout=1, env={**os.environ, "PIDFILE": str(pidfile)})
        took = time.monotonic() - started
        assert took < 30, f"the run waited {took:.0f} s for a process outside the group, which holds its pipes"
        assert "still held its output" in capsys.readouterr().err, "the report says why the output is missing"
    finally:
        escaped = int(pidfile.read_text())
        if process_alive(escaped):
            os.kill(escaped, signal.SIGKILL)
