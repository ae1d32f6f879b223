"""The collection as users get it: the artifact `ansible-galaxy collection build` makes, installed into a clean path."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from catamaran_lab.paths import REPO_ROOT

from . import commands

BIN = Path(sys.executable).parent
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-collection"

# What must never ship: the developer's lab and bench state holds admin kubeconfigs, keys and tokens.
STATE_DIRECTORIES = re.compile(r"^(\.lab|\.lab-[^/]+|\.venv[^/]*|\.collections|\.sanity|\.git|\.test-runs|dist)(/|$)")
# Tools' caches (linters, type checker, tests), at any depth.
TOOL_CACHES = re.compile(r"(^|/)\.(mypy|ruff|pytest|import_linter)_cache(/|$)")
SECRET_NAMES = re.compile(r"(^|/)([^/]*kubeconfig[^/]*|[^/]*\.(key|pem|crt|p12|pfx|kubeconfig))$", re.IGNORECASE)
SECRET_CONTENT = re.compile(
    rb"-----BEGIN [A-Z ]*PRIVATE KEY-----|client-key-data:|client-certificate-data:|^\s*token:\s*\S{20,}",
    re.MULTILINE,
)


def tool_environment() -> dict[str, str]:
    return dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", PYTHON=sys.executable, ANSIBLE_NOCOLOR="1")


def isolated_environment(collections: Path) -> dict[str, str]:
    """Ansible sees only the given collections path (and the collections the ansible package bundles)."""
    environment = tool_environment()
    environment.pop("ANSIBLE_CONFIG", None)
    environment["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    return environment


def build_artifact(output: Path) -> Path:
    """tools/build-collection, as `make collection` runs it: the controller's wheel, then the artifact."""
    result = commands.run([BUILD_SCRIPT, output], env=tool_environment(), timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"tools/build-collection failed:\n{result.stdout}{result.stderr}")
    return Path(result.stdout.strip().splitlines()[-1])


def install_artifact(artifact: Path, collections: Path) -> Path:
    """Install into an empty collections path, without fetching dependencies (kubernetes.core ships with ansible).

    Run outside the checkout with only that path configured: the checkout's ansible.cfg, or a copy left in
    ~/.ansible/collections by a tool, would make ansible-galaxy call it "already installed".
    """
    result = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "-p", str(collections), str(artifact)],
        cwd=collections,
        env=isolated_environment(collections),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise AssertionError(f"installing {artifact.name} failed:\n{result.stdout}{result.stderr}")
    installed = collections / "ansible_collections" / "catamaran" / "federation"
    if not (installed / "MANIFEST.json").is_file():
        raise AssertionError(f"{artifact.name} installed, but {installed} has no MANIFEST.json")
    return installed


def forbidden_members(artifact: Path) -> list[str]:
    """Every member of the artifact that is lab state or holds a kubeconfig, key or token, with the reason."""
    found = []
    with tarfile.open(artifact) as archive:
        for member in archive.getmembers():
            name = member.name.removeprefix("./")
            if STATE_DIRECTORIES.match(name):
                found.append(f"{name}: developer state directory")
            elif TOOL_CACHES.search(name):
                found.append(f"{name}: a tool's cache")
            elif SECRET_NAMES.search(name):
                found.append(f"{name}: named like a kubeconfig, key or certificate")
            elif member.isfile():
                content = archive.extractfile(member).read()
                if SECRET_CONTENT.search(content):
                    found.append(f"{name}: holds a private key, client credential or token")
    return found


def add_member(artifact: Path, name: str, content: bytes) -> None:
    """Append one file to a copy of an artifact (tests of forbidden_members)."""
    with tarfile.open(artifact, "r:gz") as archive:
        members = [(member, archive.extractfile(member).read() if member.isfile() else None) for member in archive]
    with tarfile.open(artifact, "w:gz") as archive:
        for member, data in members:
            archive.addfile(member, io.BytesIO(data) if data is not None else None)
        info = tarfile.TarInfo(name)
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
