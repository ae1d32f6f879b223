# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Supervised controller processes on the control host (the controller role's local mode).

Each process runs under `python -m catamaran.supervisor`, which restarts it after failures and
keeps <state_dir>/<name>.pid, .log and .status.json. <name>.spec.json records what was asked
for, so a changed command restarts the process and an unchanged one leaves it alone.

With a liveness probe the process writes its health server's URL to <name>.health-url (its
--health-url-file) and the supervisor restarts it when /livez fails there several times in a row.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import signal
import subprocess
import time

# A process name becomes file names in state_dir and a supervisor argument: no paths, no spaces.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def netns_path(name):
    """Where `ip netns` keeps a named network namespace."""
    return os.path.join("/run/netns", name)


def name_problem(name):
    """None for a usable process name, else what is wrong with it."""
    if not NAME_PATTERN.match(name or ""):
        return (
            "name: %r must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit "
            "(it names files in state_dir)" % (name,)
        )
    return None


def liveness_problem(liveness):
    """None for usable liveness settings (a dict or None), else which field is wrong and why."""
    if not liveness:
        return None
    for field in ("period", "timeout", "failure_threshold"):
        value = liveness.get(field)
        if value is None or value <= 0:
            return "liveness.%s: must be a positive number, not %r" % (field, value)
    return None


class ProcessError(Exception):
    pass


class SupervisedProcess:
    def __init__(self, state_dir, name, python):
        self.state_dir = state_dir
        self.name = name
        self.python = python
        self.pid_file = os.path.join(state_dir, name + ".pid")
        self.spec_file = os.path.join(state_dir, name + ".spec.json")
        self.status_file = os.path.join(state_dir, name + ".status.json")
        self.log_file = os.path.join(state_dir, name + ".log")
        self.health_url_file = os.path.join(state_dir, name + ".health-url")

    def _read(self, path):
        try:
            with open(path) as handle:
                return handle.read()
        except OSError:
            return None

    def pid(self):
        """The supervisor's pid if it is alive and really ours (pids get reused)."""
        text = self._read(self.pid_file)
        if not text or not text.strip().isdigit():
            return None
        pid = int(text.strip())
        cmdline = self._read("/proc/%d/cmdline" % pid)
        if not cmdline:
            return None
        parts = cmdline.split("\0")
        if "catamaran.supervisor" not in parts or self.name not in parts:
            return None
        return pid

    def spec(self):
        text = self._read(self.spec_file)
        return json.loads(text) if text else None

    def status(self):
        text = self._read(self.status_file)
        return json.loads(text) if text else {}

    def describe(self):
        pid = self.pid()
        status = self.status()
        return dict(
            name=self.name,
            running=pid is not None,
            supervisor_pid=pid,
            child_pid=status.get("child_pid") if pid else None,
            restarts=status.get("restarts", 0) if pid else 0,
            liveness_restarts=status.get("liveness_restarts", 0) if pid else 0,
            last_restart_reason=status.get("last_restart_reason"),
            state=status.get("state") if pid else ("exited" if status.get("state") == "exited" else "stopped"),
            last_exit=status.get("last_exit"),
            log=self.log_file,
            command=(self.spec() or {}).get("command"),
        )

    def supervisor_args(self, command, liveness, network_namespace=None):
        """The supervisor's command line; the liveness probe's URL file goes to both ends."""
        args = [self.python, "-m", "catamaran.supervisor", "--name", self.name, "--state-dir", self.state_dir]
        child = [self.python, "-m", "catamaran"]
        if network_namespace:
            child = ["nsenter", "--net=%s" % netns_path(network_namespace), "--", *child]
        if liveness:
            args += [
                "--liveness-url-file",
                self.health_url_file,
                "--liveness-period",
                str(liveness["period"]),
                "--liveness-timeout",
                str(liveness["timeout"]),
                "--liveness-failures",
                str(liveness["failure_threshold"]),
            ]
            child += ["--health-url-file", self.health_url_file]  # a global option: before the subcommand
        return [*args, "--", *child, *command]

    def start(self, command, env, liveness=None, network_namespace=None):
        if not os.path.isdir(self.state_dir):
            os.makedirs(self.state_dir)
        spec = dict(command=command, env=env, liveness=liveness)
        if network_namespace:
            spec["network_namespace"] = network_namespace
        with open(self.spec_file, "w") as handle:
            json.dump(spec, handle)
        child_env = dict(os.environ, PYTHONUNBUFFERED="1", **env)
        with open(os.path.join(self.state_dir, self.name + ".supervisor.log"), "ab") as log:
            supervisor = subprocess.Popen(
                self.supervisor_args(command, liveness, network_namespace),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env,
                close_fds=True,
                start_new_session=True,  # survives the module's exit and Ansible's process group
            )
        deadline = time.time() + 10
        while time.time() < deadline:
            if supervisor.poll() is not None:
                log_path = os.path.join(self.state_dir, self.name + ".supervisor.log")
                tail = (self._read(log_path) or "").strip().splitlines()[-3:]
                raise ProcessError(
                    "%s: the supervisor exited with %s at once (%s): %s"
                    % (self.name, supervisor.returncode, log_path, " | ".join(tail))
                )
            if self.pid() == supervisor.pid and self.status().get("supervisor_pid") == supervisor.pid:
                return
            time.sleep(0.1)
        raise ProcessError("%s: the supervisor did not start within 10s" % self.name)

    def stop(self, timeout=30):
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.pid() is None:
                return True
            time.sleep(0.2)
        os.killpg(pid, signal.SIGKILL)
        return True

    def forget(self):
        """Remove the spec and status files (the log stays for people to read)."""
        existed = False
        for path in (self.spec_file, self.status_file, self.pid_file):
            if os.path.exists(path):
                os.remove(path)
                existed = True
        return existed
