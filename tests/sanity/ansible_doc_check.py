"""Render the documentation of every module, filter and role of a collection with ansible-doc.

Usage: ansible_doc_check.py COLLECTIONS_PATH NAMESPACE.NAME

COLLECTIONS_PATH holds ansible_collections/NAMESPACE/NAME. ansible-doc runs with no ansible.cfg and
deprecation warnings on, once per type (modules, filters, test plugins, roles); the check fails when it
exits non-zero or writes anything to stderr (errors, warnings, deprecations). ansible-doc stops at the
first plugin it cannot render, so a failed type is rendered again one plugin at a time to name them all.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def ansible_doc():
    """The ansible-doc beside this interpreter (the venv's), else the one on PATH."""
    sibling = Path(sys.executable).parent / "ansible-doc"
    return str(sibling) if sibling.exists() else shutil.which("ansible-doc") or "ansible-doc"


def listed(env, plugin_type, collection):
    """Names that ansible-doc lists for a plugin type in the collection."""
    result = subprocess.run(
        [ansible_doc(), "-t", plugin_type, "--list", "--json", collection],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return []
    return sorted(json.loads(result.stdout or "{}"))


def documented_files(directory):
    """Plugin names for the .py files of a plugin directory that carry their own DOCUMENTATION."""
    return sorted(
        path.stem
        for path in directory.glob("*.py")
        if path.name != "__init__.py" and "DOCUMENTATION" in path.read_text(encoding="utf-8")
    )


def targets(root, env, collection):
    """{type: [fully qualified names]} of every module, filter, test plugin and role to render."""
    found = {}
    modules = sorted(path.stem for path in (root / "plugins" / "modules").glob("*.py") if path.name != "__init__.py")
    found["module"] = [f"{collection}.{module}" for module in modules]
    for plugin_type in ("filter", "test"):
        directory = root / "plugins" / plugin_type
        if directory.is_dir():
            names = set(listed(env, plugin_type, collection))
            names.update(f"{collection}.{name}" for name in documented_files(directory))
            found[plugin_type] = sorted(names)
    roles = root / "roles"
    if roles.is_dir():
        found["role"] = [f"{collection}.{path.name}" for path in sorted(roles.iterdir()) if path.is_dir()]
    return {plugin_type: names for plugin_type, names in found.items() if names}


def render(env, plugin_type, names):
    """Run ansible-doc for plugins or roles of one type; return a failure message or None."""
    result = subprocess.run(
        [ansible_doc(), "-t", plugin_type, *names],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0 and not result.stderr.strip() and result.stdout.strip():
        return None
    command = " ".join(["ansible-doc", "-t", plugin_type, *names])
    return f"{command}: exit {result.returncode}\n{result.stderr.strip()}"


def check(env, plugin_type, names):
    """Failure messages for one type: one batch, or one per failing plugin when the batch fails."""
    if render(env, plugin_type, names) is None:
        return []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return [failure for failure in pool.map(lambda name: render(env, plugin_type, [name]), names) if failure]


def main():
    """Check every target and report the failures."""
    collections_path, collection = sys.argv[1:3]
    namespace, name = collection.split(".")
    root = Path(collections_path, "ansible_collections", namespace, name)
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as empty_config:
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=empty_config.name,
            ANSIBLE_COLLECTIONS_PATH=os.path.abspath(collections_path),
            ANSIBLE_DEPRECATION_WARNINGS="true",
            ANSIBLE_NOCOLOR="1",
        )
        found = targets(root, env, collection)
        with ThreadPoolExecutor(max_workers=len(found) or 1) as pool:
            results = pool.map(lambda item: check(env, *item), found.items())
            failures = [failure for failed in results for failure in failed]
    for failure in failures:
        print(failure, file=sys.stderr)
    count = sum(len(names) for names in found.values())
    summary = ", ".join(f"{len(names)} {plugin_type}{'s' * (len(names) != 1)}" for plugin_type, names in found.items())
    print(f"ansible-doc: rendered {summary}; {f'{len(failures)} failed' if failures else 'no error or warning'}")
    return 1 if failures or not count else 0


if __name__ == "__main__":
    sys.exit(main())
