"""The artifact users install: what it carries, what it must never carry, and that it installs.

No lab is needed, but the lab's state may well be on disk (admin kubeconfigs, keys): the artifact is
built from the checkout as it is, which is the point.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import zipfile

import yaml

from catamaran_lab.paths import REPO_ROOT

from .collection import add_member, forbidden_members


def test_holds_no_kubeconfig_key_or_lab_state(collection_artifact):
    assert forbidden_members(collection_artifact) == []


def test_the_check_finds_a_planted_kubeconfig_and_key(collection_artifact, tmp_path):
    planted = tmp_path / collection_artifact.name
    shutil.copy(collection_artifact, planted)
    add_member(planted, ".lab/cluster-1/kubeconfig", b"apiVersion: v1\nkind: Config\n")
    add_member(planted, "examples/notes.txt", b"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n")
    assert sorted(forbidden_members(planted)) == [
        ".lab/cluster-1/kubeconfig: developer state directory",
        "examples/notes.txt: holds a private key, client credential or token",
    ]


def test_carries_the_controller_wheel_crds_and_one_version(collection_artifact):
    version = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"]
    with tarfile.open(collection_artifact) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("MANIFEST.json"))
        wheel_name = f"roles/controller/files/catamaran_controller-{version}-py3-none-any.whl"
        assert wheel_name in names, sorted(n for n in names if n.startswith("roles/controller/files"))
        wheel = zipfile.ZipFile(archive.extractfile(wheel_name))
        metadata = wheel.read(f"catamaran_controller-{version}.dist-info/METADATA").decode()
    assert manifest["collection_info"]["version"] == version
    assert f"Version: {version}" in metadata.splitlines()
    assert "catamaran/__main__.py" in wheel.namelist()
    crds = sorted(path.name for path in (REPO_ROOT / "controller" / "crds").glob("*.yaml"))
    assert crds
    assert all(f"controller/crds/{name}" in names for name in crds)


def test_installs_with_every_module_util_resolved(installed_collections):
    root = installed_collections / "ansible_collections" / "catamaran" / "federation"
    module_utils = sorted((root / "plugins" / "module_utils").glob("*.py"))
    assert module_utils
    # constants, tenancy and networks are symlinks into the controller's package: they must resolve in the install.
    unresolved = [path.name for path in module_utils if not path.resolve().is_file()]
    assert unresolved == []
    assert (root / "meta" / "runtime.yml").is_file()
    assert (root / "playbooks" / "site.yml").is_file()
