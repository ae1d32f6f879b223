"""One version source: the collection's galaxy.yml; the controller's wheel, __version__ and kubelet version follow."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import catamaran
from catamaran.vk import node

REPO_ROOT = Path(__file__).resolve().parents[3]


def load_setup():
    """controller/setup.py as a module (setup() runs only as __main__, as setuptools runs it)."""
    spec = importlib.util.spec_from_file_location("catamaran_controller_setup", REPO_ROOT / "controller" / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup = load_setup()


@pytest.fixture
def project(tmp_path) -> Path:
    """An empty controller/ in an otherwise empty collection directory."""
    path = tmp_path / "collection" / "controller"
    path.mkdir(parents=True)
    return path


def test_the_checkout_version_is_galaxy_yml():
    galaxy = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())
    assert setup.collection_version(REPO_ROOT / "controller") == str(galaxy["version"])


def test_installed_package_reports_the_collection_version():
    galaxy = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())
    assert catamaran.__version__ == str(galaxy["version"]), (
        "the installed catamaran-controller is stale: re-run `.venv/bin/pip install --no-deps -e controller`"
    )
    assert f"catamaran-v{catamaran.__version__}" == node.KUBELET_VERSION


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("version: 1.2.3", "1.2.3"),
        ('version: "1.2.3"', "1.2.3"),
        ("version: '2.0.0-beta.1'  # next", "2.0.0-beta.1"),
        ("version:\t0.1.0", "0.1.0"),
    ],
)
def test_galaxy_yml_version_line(project, line, version):
    (project.parent / "galaxy.yml").write_text(f"---\nnamespace: catamaran\nname: federation\n{line}\nreadme: x\n")
    assert setup.collection_version(project) == version


def test_only_the_top_level_version_key_counts(project):
    (project.parent / "galaxy.yml").write_text(
        "namespace: catamaran\ndependencies:\n  version: 9.9.9\n  kubernetes.core: '>=6.0.0'\nversion: 1.0.0\n"
    )
    assert setup.collection_version(project) == "1.0.0"


def test_galaxy_yml_without_a_version_is_an_error(project):
    (project.parent / "galaxy.yml").write_text("namespace: catamaran\nname: federation\n  version: 1.0.0\n")
    with pytest.raises(setup.VersionNotFound, match=r"galaxy\.yml has no top-level"):
        setup.collection_version(project)


def test_an_installed_collection_has_manifest_json(project):
    manifest = {"collection_info": {"namespace": "catamaran", "name": "federation", "version": "3.1.4"}}
    (project.parent / "MANIFEST.json").write_text(json.dumps(manifest))
    assert setup.collection_version(project) == "3.1.4"


def test_galaxy_yml_wins_over_manifest_json(project):
    (project.parent / "galaxy.yml").write_text("version: 1.0.0\n")
    (project.parent / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": "0.9.0"}}))
    assert setup.collection_version(project) == "1.0.0"


def test_a_broken_manifest_json_is_an_error(project):
    (project.parent / "MANIFEST.json").write_text(json.dumps({"collection_info": {}}))
    with pytest.raises(setup.VersionNotFound, match=r"no collection_info\.version"):
        setup.collection_version(project)


def test_an_sdist_has_pkg_info(project):
    (project / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: catamaran-controller\nVersion: 1.4.0\n\nbody\n")
    (project.parent / "galaxy.yml").write_text("version: 0.0.1\n")  # whatever lies beside an unpacked sdist
    assert setup.collection_version(project) == "1.4.0"


def test_no_source_names_every_place_and_the_remedy(project):
    with pytest.raises(setup.VersionNotFound) as raised:
        setup.collection_version(project)
    message = str(raised.value)
    for name in ("PKG-INFO", "galaxy.yml", "MANIFEST.json", "tools/build-collection"):
        assert name in message


def test_setup_py_fails_with_the_message_outside_a_collection(project):
    (project / "setup.py").write_text((REPO_ROOT / "controller" / "setup.py").read_text())
    result = subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "error: catamaran-controller takes its version from the Ansible collection" in result.stderr


def test_setup_py_reports_the_collection_version(project):
    (project / "setup.py").write_text((REPO_ROOT / "controller" / "setup.py").read_text())
    (project / "pyproject.toml").write_text((REPO_ROOT / "controller" / "pyproject.toml").read_text())
    (project / "src" / "catamaran").mkdir(parents=True)
    (project.parent / "galaxy.yml").write_text("version: 7.8.9\n")
    result = subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "7.8.9"


def test_sources_without_an_installed_distribution_say_so():
    """`catamaran` put on sys.path by hand (no distribution metadata) still imports, with a version saying so."""
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "def version(name):\n"
        "    if name == 'catamaran-controller': raise m.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "m.version = version\n"
        "import catamaran\n"
        "from catamaran.vk import node\n"
        "print(catamaran.__version__, node.KUBELET_VERSION)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == ["0+unknown", "catamaran-v0+unknown"]
