"""Run the collection's playbooks against the lab with a given inventory, as users do."""

from __future__ import annotations

import copy
import json
import os
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from catamaran_lab.lab import Lab
from catamaran_lab.paths import REPO_ROOT, state_dir

from . import commands
from .collection import isolated_environment

LAB_INVENTORY = REPO_ROOT / "examples" / "lab" / "inventory.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOK_TIMEOUT = 600  # seconds


@dataclass
class PlaybookRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def document(self) -> dict:
        """What the ansible.posix.json callback printed."""
        return json.loads(self.stdout[self.stdout.index("{") :])

    def stats(self) -> dict:
        """Per-host counters from the ansible.posix.json callback."""
        return self.document()["stats"]

    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.stats().items()}

    def task_seconds(self, name: str) -> float:
        """How long the first task whose name ends with `name` took (the json callback's task duration)."""
        for play in self.document()["plays"]:
            for task in play["tasks"]:
                if task["task"]["name"].endswith(name):
                    duration = task["task"]["duration"]
                    start, end = (datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))
                    return (end - start).total_seconds()
        raise AssertionError(f"no task {name!r} ran")

    def failures(self) -> list[str]:
        """Every failed task's message (json callback)."""
        messages = []
        for play in self.document()["plays"]:
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    if result.get("failed"):
                        messages.append(f"{host}: {task['task']['name']}: {result.get('msg')}")
        return messages


def controller_playbook(directory: Path, cluster: str, state: str = "started") -> Path:
    """A playbook of the crds and controller roles alone for `cluster`, as site.yml runs them (the manager's
    informers need the CRDs, which a fresh lab lacks), with `controller_state`."""
    path = directory / f"controller-{state}.yml"
    play = {
        "name": f"The CRDs and the controller, {state}",
        "hosts": cluster,
        "gather_facts": False,
        "roles": [{"role": "catamaran.federation.crds"}, {"role": "catamaran.federation.controller"}],
        "vars": {"controller_state": state},
    }
    path.write_text(yaml.safe_dump([play]))
    return path


def lab_inventory() -> dict:
    return copy.deepcopy(yaml.safe_load(LAB_INVENTORY.read_text()))


def hosts(inventory: dict) -> dict:
    return inventory["catamaran_clusters"]["hosts"]


def write_inventory(directory: Path, inventory: dict, lab: Lab) -> Path:
    """The inventory sits beside the lab inventory's expectations: kubeconfigs come from the lab in use."""
    inventory = copy.deepcopy(inventory)
    inventory["catamaran_clusters"]["vars"]["lab_dir"] = str(lab.root)
    path = directory / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of every Ansible run of the tests.

    kubernetes.core caches API discovery in the temp directory, keyed only by server address and
    user: a cache left by an earlier lab on the same port (with other CRDs) makes its modules ask
    for API groups that are gone (404). The temp directory lives in the lab's state directory, so
    the cache lives and dies with the lab it describes.
    """
    temp = state_dir() / "tmp"
    temp.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, ANSIBLE_NOCOLOR="1", TMPDIR=str(temp), **extra)


def run_playbook(
    inventory: Path,
    *args: str,
    playbook: str | Path = "site.yml",
    json_output: bool = True,
    collections: Path | None = None,
) -> PlaybookRun:
    """Run one of playbooks/ by name, or any playbook by path.

    With `collections` (a collections path holding the installed artifact), a named playbook runs by its fully
    qualified name from that install, outside the checkout and without its ansible.cfg, as users run it.
    """
    if collections is None:
        env = ansible_env(ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"))
        target, cwd = str(REPO_ROOT / "playbooks" / playbook), REPO_ROOT
    else:
        env = dict(isolated_environment(collections), TMPDIR=ansible_env()["TMPDIR"])
        env.update(ANSIBLE_CALLBACK_RESULT_FORMAT="yaml", ANSIBLE_PYTHON_INTERPRETER="auto_silent")
        named = isinstance(playbook, str) and "/" not in playbook
        target = f"catamaran.federation.{Path(playbook).stem}" if named else str(playbook)
        cwd = collections
    if json_output:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    return ansible_playbook(inventory, target, *args, cwd=cwd, env=env)


def ansible_playbook(inventory: Path, target: str, *args: str, cwd: Path, env: dict[str, str]) -> PlaybookRun:
    """`ansible-playbook -i <inventory> <target> <args>` from `cwd` with `env`, given ten minutes; killed with every
    worker it forked when it takes longer or the test is interrupted (commands.run)."""
    result = commands.run(
        [ANSIBLE_PLAYBOOK, "-i", inventory, target, *args], timeout=PLAYBOOK_TIMEOUT, cwd=cwd, env=env
    )
    return PlaybookRun(result.returncode, result.stdout, result.stderr)
