"""Commands of the tests that start processes of their own: ansible-playbook and its forked workers, Molecule, the
GitOps pipeline's scripts, the guide's shell blocks, release builds.

Each runs in a process group of its own, killed whole when it outlives its time or the test is interrupted (a
pytest-timeout): killing the command alone would leave its children running beside the next tests, and the caller
waiting for them, as they still hold its output pipes.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# After the group is killed, what it printed is read for this long: a process that left the group (a daemon started
# with a session of its own) may still hold the pipes, and is not waited for.
KILLED_OUTPUT_SECONDS = 10.0


def run(
    command: Sequence[str | Path],
    *,
    timeout: float,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`command` with its output captured as text, given `timeout` seconds; `subprocess.run`'s TimeoutExpired (or
    the interruption) is raised once its process group is killed, and its stderr printed for the test's report."""
    argv = [str(argument) for argument in command]
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if input is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(input, timeout=timeout)
    except BaseException:
        _kill_group(process, shlex.join(argv))
        raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _kill_group(process: subprocess.Popen[str], what: str) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has already ended
        os.killpg(process.pid, signal.SIGKILL)
    try:
        _, stderr = process.communicate(timeout=KILLED_OUTPUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.wait()  # the group's leader is dead; only a process outside the group holds the pipes
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        stderr = f"(not read: a process outside its group still held its output after {KILLED_OUTPUT_SECONDS:g} s)"
    print(f"{what} killed with its process group; its stderr:\n{stderr}", file=sys.stderr)
