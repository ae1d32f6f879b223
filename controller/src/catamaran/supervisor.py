"""Keep one Catamaran process running on the control host: `python -m catamaran.supervisor`.

Used by the collection's `local` controller mode where clusters cannot run the image (the lab).
It writes <state-dir>/<name>.pid, appends the child's output to <name>.log, restarts the child
after a failure with capped backoff, and ends with it when it exits 0 (a deliberate stop, such
as a virtual kubelet whose peering was removed). SIGTERM stops the child, then the supervisor.

With --liveness-url-file it also does what a kubelet's liveness probe does: once the child has
written its health server's base URL to that file (its --health-url-file), it GETs <url>/livez every
--liveness-period seconds and restarts a child that fails --liveness-failures probes in a row (a
wedged event loop answers nothing, or 503).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
STABLE_SECONDS = 60  # a child that ran this long resets the backoff
STOP_GRACE = 15
LIVENESS_STOP_GRACE = 5  # a wedged child cannot handle SIGTERM; do not wait long for it


@dataclass
class Liveness:
    url_file: Path
    period: float = 10.0
    timeout: float = 5.0
    failures: int = 3


def probe(url: str, timeout: float) -> str | None:
    """None when <url>/livez answers 200, else why not."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/livez", timeout=timeout) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}: {error.read(200).decode(errors='replace').strip()}"
    except Exception as error:  # refused, timed out, reset: all mean not alive
        return f"{type(error).__name__}: {error}"[:200]


class Supervisor:
    def __init__(self, name: str, state_dir: Path, command: list[str], liveness: Liveness | None = None):
        self.name = name
        self.command = command
        self.liveness = liveness
        self.liveness_restarts = 0
        self.last_restart_reason: str | None = None
        self.pid_file = state_dir / f"{name}.pid"
        self.status_file = state_dir / f"{name}.status.json"
        self.log_file = state_dir / f"{name}.log"
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.restarts = 0

    def _status(self, **fields) -> None:
        record = {
            "supervisor_pid": os.getpid(),
            "restarts": self.restarts,
            "liveness_restarts": self.liveness_restarts,
            "last_restart_reason": self.last_restart_reason,
            "time": time.time(),
            **fields,
        }
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
                if self.liveness:
                    self.liveness.url_file.unlink(missing_ok=True)  # a stale URL would probe the old child
                with self.log_file.open("ab") as log:
                    self.child = subprocess.Popen(
                        self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                    )
                self._status(state="running", child_pid=self.child.pid)
                code, dead_reason = self._wait_child()
                if self.stopping or (code == 0 and not dead_reason):
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

    def _wait_child(self) -> tuple[int, str | None]:
        """The child's exit code, and the reason when the liveness probe ended it."""
        assert self.child is not None
        kill_at = None
        failures, next_probe, dead_reason = 0, time.monotonic(), None
        # Popen.wait(timeout) polls every 50 ms; a pidfd wakes this loop once a second, or at the child's exit.
        exited = exit_descriptor(self.child.pid)
        try:
            while True:
                if exited is None:
                    time.sleep(1.0)
                else:
                    select.select([exited], [], [], 1.0)
                code = self.child.poll()
                if code is not None:
                    return code, dead_reason
                if self.stopping or dead_reason:
                    kill_at = kill_at or time.monotonic() + (LIVENESS_STOP_GRACE if dead_reason else STOP_GRACE)
                    if time.monotonic() > kill_at:
                        self.child.kill()
                    continue
                if self.liveness is None or time.monotonic() < next_probe:
                    continue
                next_probe = time.monotonic() + self.liveness.period
                try:
                    url = self.liveness.url_file.read_text().strip()
                except OSError:
                    continue  # the child is still starting: it writes the file once its health server listens
                problem = probe(url, self.liveness.timeout)
                failures = failures + 1 if problem else 0
                if problem and failures >= self.liveness.failures:
                    dead_reason = f"liveness probe failed {failures} times in a row: {problem}"
                    self.liveness_restarts += 1
                    self.last_restart_reason = dead_reason
                    print(f"supervisor: {self.name}: {dead_reason}; restarting", file=sys.stderr, flush=True)
                    self._status(state="restarting", child_pid=self.child.pid)
                    self.child.send_signal(signal.SIGTERM)
        finally:
            if exited is not None:
                os.close(exited)


def exit_descriptor(pid: int) -> int | None:
    """A descriptor readable once process `pid` exits; None without pidfds (before Linux 5.3, or refused)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m catamaran.supervisor", description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument(
        "--liveness-url-file", type=Path, help="where the child writes its health URL; probe <url>/livez"
    )
    parser.add_argument("--liveness-period", type=float, default=10.0, help="seconds between probes")
    parser.add_argument("--liveness-timeout", type=float, default=5.0, help="seconds one probe may take")
    parser.add_argument("--liveness-failures", type=int, default=3, help="failed probes in a row before a restart")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to keep running")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    for option in ("liveness_period", "liveness_timeout", "liveness_failures"):
        if getattr(args, option) <= 0:
            parser.error(f"--{option.replace('_', '-')}: must be positive, not {getattr(args, option)}")
    liveness = None
    if args.liveness_url_file:
        liveness = Liveness(args.liveness_url_file, args.liveness_period, args.liveness_timeout, args.liveness_failures)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    sys.exit(Supervisor(args.name, args.state_dir, command, liveness).run())


if __name__ == "__main__":
    main()
