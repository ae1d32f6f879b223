"""docs/architecture.md stays true to the controller's code: its package map and the processes it names.

The map is the table under "## Package map": one row per module, its first cell a single code span naming the
module by its path under controller/src/catamaran without `.py` (`vk/kubelet/server`), a package by its directory
with a trailing slash (`vk/kubelet/`, which stands for its `__init__.py`), and the top package's `__init__` and
`__main__` by those names. The processes are the `python -m catamaran <command>` the section "## The controller's
layers" names in its paragraph "One package, <count> processes: ..."; they are the subcommands of the console
script, `catamaran.__main__:main`.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

from catamaran import __main__ as entry

REPO_ROOT = Path(__file__).resolve().parents[3]
DOC = REPO_ROOT / "docs" / "architecture.md"
DOC_NAME = "docs/architecture.md"
PACKAGE = REPO_ROOT / "controller" / "src" / "catamaran"
PACKAGE_NAME = "controller/src/catamaran"
MAP_HEADING = "## Package map"
LAYERS_HEADING = "## The controller's layers"
# A map row: `| `entry` | what it owns |`; the header and its `|---|` line do not match.
MAP_ROW = re.compile(r"^\| `(?P<entry>[^`]+)` \| (?P<owns>.*) \|$")
PROCESS = re.compile(r"`python -m catamaran (?P<command>[a-z][a-z-]*)")
PROCESS_COUNT = re.compile(r"One package, (?P<count>\w+) processes:")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def section(heading: str) -> list[str]:
    """The lines of the doc's section under `heading`, up to the next heading of the same level."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    assert heading in lines, f"{DOC_NAME} has no section {heading!r}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def map_rows() -> dict[str, list[int]]:
    """The package map's entries -> the numbers of the doc's lines that name them."""
    first = DOC.read_text(encoding="utf-8").splitlines().index(MAP_HEADING) + 2  # 1-based, the section's first line
    rows: dict[str, list[int]] = {}
    for number, line in enumerate(section(MAP_HEADING), first):
        if match := MAP_ROW.match(line):
            rows.setdefault(match["entry"], []).append(number)
    assert rows, f"{DOC_NAME}: no `| `module` | ... |` rows found under {MAP_HEADING!r}"
    return rows


def map_entry(path: Path) -> str:
    """How the map names a file of the package: `kube/ops`, `kube/` (its __init__.py), `__init__`, `__main__`."""
    relative = path.relative_to(PACKAGE)
    if relative.name == "__init__.py" and relative.parent != Path("."):
        return f"{relative.parent.as_posix()}/"
    return relative.with_suffix("").as_posix()


def package_files() -> dict[str, Path]:
    files = {map_entry(path): path for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts}
    assert files, f"no modules found under {PACKAGE_NAME}"
    return files


def test_every_module_is_in_the_package_map():
    entries = map_rows()
    missing = [
        f"{PACKAGE_NAME}/{path.relative_to(PACKAGE).as_posix()} (as `{entry}`)"
        for entry, path in package_files().items()
        if entry not in entries
    ]
    assert not missing, f"{DOC_NAME} {MAP_HEADING!r} has no row for: " + ", ".join(missing)


def test_every_map_entry_is_a_module():
    files = package_files()
    stale = [f"`{entry}` (line {lines[0]})" for entry, lines in map_rows().items() if entry not in files]
    assert not stale, f"{DOC_NAME} {MAP_HEADING!r} names what {PACKAGE_NAME} does not hold: " + ", ".join(stale)


def test_the_map_names_each_module_once():
    rows = map_rows()
    repeated = [f"`{entry}` (lines {', '.join(map(str, lines))})" for entry, lines in rows.items() if len(lines) > 1]
    assert not repeated, f"{DOC_NAME} {MAP_HEADING!r} has more than one row for: " + ", ".join(repeated)


def subcommands() -> set[str]:
    """The subcommands of `python -m catamaran`, from the parser __main__ builds."""
    actions = [action for action in entry._parser()._actions if isinstance(action, argparse._SubParsersAction)]
    assert len(actions) == 1, f"{PACKAGE_NAME}/__main__.py: expected one set of subcommands, found {len(actions)}"
    return set(actions[0].choices)


def test_the_console_script_is_the_entry_point_the_doc_describes():
    # The doc's processes are `python -m catamaran <command>`: any other entry point would be a process it misses.
    scripts = tomllib.loads((REPO_ROOT / "controller" / "pyproject.toml").read_text())["project"].get("scripts", {})
    others = {name: target for name, target in scripts.items() if target != "catamaran.__main__:main"}
    assert not others, (
        f"controller/pyproject.toml [project.scripts] has entry points other than catamaran.__main__:main: {others};"
        f" name their processes in {DOC_NAME} {LAYERS_HEADING!r} and teach this test to read them"
    )


def test_the_processes_named_are_the_subcommands():
    paragraph = " ".join(section(LAYERS_HEADING)).split("```")[0]  # the text before the layer diagram
    named = {match["command"] for match in PROCESS.finditer(paragraph)}
    existing = subcommands()
    assert named == existing, (
        f"{DOC_NAME} {LAYERS_HEADING!r} names the processes {sorted(named)}, but"
        f" {PACKAGE_NAME}/__main__.py has the subcommands {sorted(existing)}:"
        f" not in the doc {sorted(existing - named)}, not in the code {sorted(named - existing)}"
    )
    count = PROCESS_COUNT.search(paragraph)
    assert count, f"{DOC_NAME} {LAYERS_HEADING!r}: no 'One package, <count> processes:' sentence"
    assert NUMBERS.get(count["count"].lower()) == len(existing), (
        f"{DOC_NAME} {LAYERS_HEADING!r} says 'One package, {count['count']} processes' but"
        f" {PACKAGE_NAME}/__main__.py has {len(existing)} subcommands: {sorted(existing)}"
    )
