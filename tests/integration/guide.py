"""The user guide's commands (docs/guide), run in the guide's order by a user's shell against the lab.

Every `sh` block of the guide's pages, in page order, is run once, whole, by bash: nothing is skipped silently. A
test fills the guide's placeholders (`<registry>`, `<pod>`, ...) with the lab's values, and may stand in for a
command only through `stand_ins`, each with the reason it is not run as written; `finish` fails when a block was
never reached. The shell is a fresh user's: a home of its own (`~/.kube/<cluster>.kubeconfig`, `~/.ansible`,
`~/.config/containers`), kubectl contexts named after the clusters, the tests' Python tools first on PATH.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from catamaran_lab.paths import REPO_ROOT

from . import commands

GUIDE = REPO_ROOT / "docs" / "guide"
PAGES = ("install.md", "peer.md", "offload.md", "troubleshooting.md", "uninstall.md")
FENCED = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9 -]*>")
BLOCK_TIMEOUT_S = 900  # a block may run site.yml: the collection's own bound is ten minutes per playbook


def fenced_blocks(page: str, language: str) -> list[str]:
    return [body for lang, body in FENCED.findall((GUIDE / page).read_text()) if lang == language]


def logical_lines(block: str) -> list[str]:
    """A shell block's lines, those continued with a backslash joined."""
    return block.replace("\\\n", " ").splitlines()


def without_comment(line: str) -> str:
    """The command of a line, its trailing `# ...` comment dropped (the guide's comments follow two spaces)."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].rstrip()


@dataclass
class StandIn:
    """What a test runs instead of a guide command, and why; `command` None: nothing is run."""

    reason: str
    command: str | None = None


@dataclass
class Guide:
    """The guide's shell blocks, taken in order. `workdir` is the directory the user runs them from (a checkout, as
    install.md says); `substitutions` fill placeholders and lab-only values; `stand_ins` map a guide command (its
    text without comment) to what runs instead."""

    workdir: Path
    env: dict[str, str]
    substitutions: dict[str, str] = field(default_factory=dict)
    stand_ins: dict[str, StandIn] = field(default_factory=dict)
    blocks: deque = field(init=False)
    transcript: list[str] = field(default_factory=list, init=False)  # everything each run printed

    def __post_init__(self):
        self.blocks = deque(
            (page, index, block) for page in PAGES for index, block in enumerate(fenced_blocks(page, "sh"))
        )
        commands = {without_comment(line) for *_, block in self.blocks for line in logical_lines(block)}
        unknown = set(self.stand_ins) - commands
        assert not unknown, f"stand-ins for commands the guide no longer has: {sorted(unknown)}"

    def script(self, block: str) -> str:
        lines = []
        for line in logical_lines(block):
            stand_in = self.stand_ins.get(without_comment(line))
            if stand_in is not None:
                lines.append(f": {shlex.quote('not run as written: ' + stand_in.reason)}")
                line = stand_in.command or ""
            for placeholder, value in self.substitutions.items():
                line = line.replace(placeholder, value)
            left = PLACEHOLDER.findall(without_comment(line))
            assert not left, f"the guide's placeholders {left} have no value in this test: {line}"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def run(self, page: str, retry_for: float = 0) -> str:
        """Run the next block, which must be `page`'s; re-run it for up to `retry_for` s while it fails (for checks
        of state still converging). Its output."""
        assert self.blocks, f"the guide has no more shell blocks; expected one of {page}"
        got, index, block = self.blocks.popleft()
        assert got == page, f"the guide's next shell block is {got}'s #{index + 1}, not one of {page}'s"
        script = self.script(block)
        deadline = time.monotonic() + retry_for
        while True:
            result = self.shell(script, f"{page} #{index + 1}")
            if result.returncode == 0 or time.monotonic() >= deadline:
                break
            time.sleep(2)
        assert result.returncode == 0, (
            f"{page}'s shell block #{index + 1} failed ({result.returncode}):\n{script}\n"
            f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
        )
        return result.stdout

    def shell(self, script: str, what: str) -> subprocess.CompletedProcess:
        """`script` run by the user's shell (for a test's own commands between the guide's); recorded."""
        result = commands.run(
            ["bash", "-xeuo", "pipefail", "-c", script], cwd=self.workdir, env=self.env, timeout=BLOCK_TIMEOUT_S
        )
        self.transcript.append(f"# {what}, exit {result.returncode}\n{result.stdout}{result.stderr}")
        return result

    def finish(self) -> None:
        left = [f"{page} #{index + 1}" for page, index, _ in self.blocks]
        assert not left, f"the guide's shell blocks never run: {left}"


def user_environment(home: Path, kubectl: Path, kubeconfigs: list[Path], temp: Path) -> dict[str, str]:
    """A fresh user's shell: only what the guide assumes (PATH with Python's tools and kubectl, HOME, KUBECONFIG)."""
    runtime = home / "run"
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {
        "PATH": f"{kubectl.parent}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),  # skopeo's login lands there, not in the host's /run
        "KUBECONFIG": ":".join(map(str, kubeconfigs)),
        "TMPDIR": str(temp),  # kubernetes.core's discovery cache lives and dies with the lab (playbooks.ansible_env)
        "LANG": "C.UTF-8",
        "ANSIBLE_NOCOLOR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
