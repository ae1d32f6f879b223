"""A name the controller owns that a role must also write (a Lease, a label, a policy it removes) says where its home
is, `__var: value # module.py NAME`; each such line must still match the controller's constant."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ANCHORED = re.compile(r"^(?P<var>__\w+): (?P<value>\S+) # (?P<module>[\w/]+)\.py (?P<name>[A-Z_]+)$")


def anchored_lines() -> list[tuple[str, str, str, str]]:
    found = []
    for path in sorted((ROOT / "roles").glob("*/vars/*.yml")):
        for line in path.read_text().splitlines():
            if match := ANCHORED.match(line):
                found.append((f"{path.relative_to(ROOT)}: {match['var']}", *match.group("value", "module", "name")))
    return found


def test_role_variables_name_their_home():
    assert len(anchored_lines()) >= 10  # the pattern still finds them


@pytest.mark.parametrize(("where", "value", "module", "name"), anchored_lines(), ids=lambda v: str(v)[:60])
def test_a_role_variable_says_what_the_controller_says(where, value, module, name):
    home = importlib.import_module("catamaran." + module.replace("/", "."))
    assert getattr(home, name) == value.strip("\"'"), f"{where} no longer matches {module}.py {name}"
