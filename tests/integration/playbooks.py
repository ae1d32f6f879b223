"""Run the collection's playbooks against the lab with a given inventory, as users do."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from catamaran_lab.lab import Lab
from catamaran_lab.paths import REPO_ROOT

LAB_INVENTORY = REPO_ROOT / "examples" / "lab" / "inventory.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


@dataclass
class PlaybookRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def stats(self) -> dict:
        """Per-host counters from the ansible.posix.json callback."""
        return json.loads(self.stdout[self.stdout.index("{") :])["stats"]

    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.stats().items()}

    def failures(self) -> list[str]:
        """Every failed task's message (json callback)."""
        document = json.loads(self.stdout[self.stdout.index("{") :])
        messages = []
        for play in document["plays"]:
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    if result.get("failed"):
                        messages.append(f"{host}: {task['task']['name']}: {result.get('msg')}")
        return messages


def lab_inventory() -> dict:
    return copy.deepcopy(yaml.safe_load(LAB_INVENTORY.read_text()))


def hosts(inventory: dict) -> dict:
    return inventory["catamaran_clusters"]["hosts"]


def write_inventory(directory: Path, inventory: dict, lab: Lab) -> Path:
    """The inventory sits beside the lab inventory's expectations: kubeconfigs come from the lab in use."""
    inventory = copy.deepcopy(inventory)
    inventory["catamaran_clusters"]["vars"]["catamaran_lab_dir"] = str(lab.root)
    path = directory / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def run_playbook(
    inventory: Path, *args: str, playbook: str | Path = "site.yml", json_output: bool = True
) -> PlaybookRun:
    """Run one of playbooks/ by name, or any playbook by path."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    if json_output:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    result = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(REPO_ROOT / "playbooks" / playbook), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return PlaybookRun(result.returncode, result.stdout, result.stderr)
