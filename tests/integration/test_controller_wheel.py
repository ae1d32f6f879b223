"""The controller as users get it: the wheel the collection's artifact ships, installed, and local mode running it.

Everything here starts from the artifact installed into an empty collections path (the `installed_collections`
fixture): the wheel in its roles/controller/files/, the controller role's local mode installing it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml

from catamaran_lab.paths import REPO_ROOT

from . import commands
from .lab_access import wait_for
from .playbooks import controller_playbook, lab_inventory, run_playbook, write_inventory

CLUSTER = "cluster-2"
MANAGER = f"manager-{CLUSTER}"
VERSION = str(yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"])
# Imports every module of the package: a third-party import whose distribution the wheel does not declare fails.
IMPORT_ALL = """
import importlib, pkgutil, catamaran
names = [m.name for m in pkgutil.walk_packages(catamaran.__path__, "catamaran.") if m.name != "catamaran.__main__"]
for name in names:
    importlib.import_module(name)
print(catamaran.__version__, catamaran.__file__, len(names))
"""


def installed_collection(collections: Path) -> Path:
    return collections / "ansible_collections" / "catamaran" / "federation"


def shipped_wheel(collections: Path) -> Path:
    wheels = sorted((installed_collection(collections) / "roles" / "controller" / "files").glob("*.whl"))
    assert [wheel.name for wheel in wheels] == [f"catamaran_controller-{VERSION}-py3-none-any.whl"]
    return wheels[0]


def run(*args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    result = commands.run(args, cwd=cwd, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(map(str, args))}:\n{result.stdout}{result.stderr}"
    return result


def test_the_wheel_installs_into_an_empty_environment_and_runs(installed_collections, tmp_path):
    wheel = shipped_wheel(installed_collections)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # Dependencies from the package index, as the wheel declares them (no constraints file).
    run(python, "-m", "pip", "install", "--disable-pip-version-check", wheel, cwd=tmp_path)
    run(python, "-m", "pip", "check", cwd=tmp_path)

    help_text = run(venv / "bin" / "catamaran", "--help", cwd=tmp_path).stdout
    assert help_text.startswith("usage: catamaran")
    assert "manager" in help_text
    assert "virtual-kubelet" in help_text
    assert run(python, "-I", "-m", "catamaran", "--help", cwd=tmp_path).stdout == help_text

    # -I: neither PYTHONPATH nor the checkout; every module imports from the installed wheel alone.
    version, location, modules = run(python, "-I", "-c", IMPORT_ALL, cwd=tmp_path).stdout.split()
    assert version == VERSION
    assert Path(location).is_relative_to(venv)
    assert int(modules) > 40


def test_a_wheel_builds_from_the_installed_collection(installed_collections, tmp_path):
    """Installed, the collection has MANIFEST.json instead of galaxy.yml: the version comes from there."""
    collection = installed_collection(installed_collections)
    assert not (collection / "galaxy.yml").exists()
    copy = tmp_path / "federation"
    shutil.copytree(collection / "controller", copy / "controller")
    shutil.copy(collection / "MANIFEST.json", copy / "MANIFEST.json")
    run(
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
        tmp_path / "out",
        copy / "controller",
        cwd=tmp_path,
    )
    assert [wheel.name for wheel in (tmp_path / "out").iterdir()] == [
        f"catamaran_controller-{VERSION}-py3-none-any.whl"
    ]


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(entry.partition("=")[::2] for entry in entries if "=" in entry)


def health_url(processes: Path) -> str | None:
    path = processes / f"{MANAGER}.health-url"
    return path.read_text().strip() if path.is_file() else None


def ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def own_collections(installed_collections, tmp_path):
    """A private copy of the installed artifact: this test swaps its wheel, which the shared install must not see."""
    path = tmp_path / "collections"
    shutil.copytree(installed_collections, path, symlinks=True)
    return path


def test_local_mode_runs_the_installed_wheel(lab, own_collections, tmp_path):
    inventory = write_inventory(tmp_path, lab_inventory(), lab)
    playbook = controller_playbook(tmp_path, CLUSTER)
    state_dir = lab.root / "controller"  # the lab inventory's controller_state_dir
    venv = state_dir / "venv"
    processes = state_dir / CLUSTER

    def converge(*args: str):
        # The manager alone: the lab inventory's network gateway would be one more process restarted by a new wheel.
        args = ("-e", "controller_gateway=false", *args)
        result = run_playbook(inventory, "--limit", CLUSTER, *args, playbook=playbook, collections=own_collections)
        assert result.returncode == 0, result.failures() or result.output[-4000:]
        return result

    def running() -> tuple[int, int]:
        supervisor = int((processes / f"{MANAGER}.pid").read_text())
        child = json.loads((processes / f"{MANAGER}.status.json").read_text())["child_pid"]
        return supervisor, child

    try:
        converge("-e", "controller_state=started")
        wheel = shipped_wheel(own_collections)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert (venv / f".catamaran-wheel-{digest}").is_file()
        supervisor, child = running()
        # The supervisor and the manager run on the virtual environment's Python, from the wheel installed there.
        assert cmdline(supervisor)[:3] == [str(venv / "bin" / "python"), "-m", "catamaran.supervisor"]
        assert cmdline(child)[:3] == [str(venv / "bin" / "python"), "-m", "catamaran"]
        assert environ(child)["CATAMARAN_CONTROLLER_WHEEL"] == f"{wheel.name}@sha256:{digest}"
        assert "PYTHONPATH" not in environ(child)
        base_url = wait_for(lambda: health_url(processes), what="the manager's health URL")
        wait_for(lambda: ready(base_url), timeout=90, what=f"{MANAGER}'s /readyz from the wheel")

        # Nothing to do a second time, in check mode or not: the same wheel is neither installed nor restarted.
        assert converge("-e", "controller_state=started").changed() == {CLUSTER: 0}
        assert converge("-e", "controller_state=started", "--check").changed() == {CLUSTER: 0}
        assert running() == (supervisor, child)

        # Another wheel (rebuilt: same version, another digest) is installed and restarts the processes.
        with zipfile.ZipFile(wheel, "a") as rebuilt:
            rebuilt.comment = b"rebuilt"
        new_digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert converge("-e", "controller_state=started", "--check").changed() == {CLUSTER: 2}
        assert (venv / f".catamaran-wheel-{digest}").is_file()  # check mode installed nothing
        assert converge("-e", "controller_state=started").changed() == {CLUSTER: 2}
        assert sorted(path.name for path in venv.glob(".catamaran-wheel-*")) == [f".catamaran-wheel-{new_digest}"]
        new_supervisor, new_child = running()
        assert new_supervisor != supervisor
        assert environ(new_child)["CATAMARAN_CONTROLLER_WHEEL"] == f"{wheel.name}@sha256:{new_digest}"
        base_url = wait_for(lambda: health_url(processes), what="the manager's health URL")
        wait_for(lambda: ready(base_url), timeout=90, what=f"{MANAGER}'s /readyz after the new wheel")
    finally:
        run_playbook(
            inventory,
            "--limit",
            CLUSTER,
            "-e",
            "controller_state=stopped",
            playbook=playbook,
            collections=own_collections,
        )
