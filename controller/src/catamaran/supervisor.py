"""Keep one Catamaran process running on the control host: `python -m catamaran.supervisor`.

Used by the collection's `local` controller mode where clusters cannot run the image (the lab).
It writes <state-dir>/<name>.pid, appends the child's output to <name>.log, restarts the child
after a failure with capped backoff, and ends with it when it exits 0 (a deliberate stop, such
as a virtual kubelet whose peering was removed). SIGTERM stops the child, then the supervisor.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
STABLE_SECONDS = 60  # a child that ran this long resets the backoff
STOP_GRACE = 15


class Supervisor:
    def __init__(self, name: str, state_dir: Path, command: list[str]):
        self.name = name
        self.command = command
        self.pid_file = state_dir / f"{name}.pid"
        self.status_file = state_dir / f"{name}.status.json"
        self.log_file = state_dir / f"{name}.log"
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.restarts = 0

    def _status(self, **fields) -> None:
        record = {"supervisor_pid": os.getpid(), "restarts": self.restarts, "time": time.time(), **fields}
        tmp = self.status_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self.status_file)

    def _terminate(self, *_):
        self.stopping = True
        if self.child and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        self.pid_file.write_text(str(os.getpid()))
        signal.signal(signal.SIGTERM, self._terminate)
        signal.signal(signal.SIGINT, self._terminate)
        backoff = BACKOFF_MIN
        code = 0
        try:
            while not self.stopping:
                started = time.monotonic()
                with self.log_file.open("ab") as log:
                    self.child = subprocess.Popen(
                        self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                self._status(state="running", child_pid=self.child.pid)
                code = self._wait_child()
                if self.stopping or code == 0:
                    break
                backoff = BACKOFF_MIN if time.monotonic() - started > STABLE_SECONDS else min(backoff * 2, BACKOFF_MAX)
                self.restarts += 1
                self._status(state="backoff", last_exit=code, retry_in=backoff)
                deadline = time.monotonic() + backoff
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(0.2)
        finally:
            self._status(state="stopped" if self.stopping else "exited", last_exit=code)
            self.pid_file.unlink(missing_ok=True)
        return 0

    def _wait_child(self) -> int:
        assert self.child is not None
        kill_at = None
        while True:
            try:
                return self.child.wait(timeout=1)
            except subprocess.TimeoutExpired:
                if self.stopping:
                    kill_at = kill_at or time.monotonic() + STOP_GRACE
                    if time.monotonic() > kill_at:
                        self.child.kill()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m catamaran.supervisor", description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to keep running")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    sys.exit(Supervisor(args.name, args.state_dir, command).run())


if __name__ == "__main__":
    main()
