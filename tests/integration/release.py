"""The previous release, built from its commit in this repository's history by that release's own tools: the
collection artifact (tools/build-collection) and the controller's image (`make image`), as its users got them; and
what this checkout's CRDs add to that release's."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from catamaran_lab import controller_image
from catamaran_lab.images import Image
from catamaran_lab.paths import REPO_ROOT

from . import commands
from .collection import tool_environment

# The release this checkout upgrades from (its version is that commit's galaxy.yml).
PREVIOUS_COMMIT = "a73eab0bca927bc729b5af81c4b4cb1cac667c95"
CRDS = Path("controller") / "crds"


@dataclass(frozen=True)
class Release:
    version: str
    artifact: Path
    image: Image
    source: Path  # the release's tree


def spec_fields(crd: dict) -> set[str]:
    """The properties of a CRD's spec, in any of its versions (a manifest or the served object alike)."""
    versions = crd["spec"]["versions"]
    return set().union(*(v["schema"]["openAPIV3Schema"]["properties"]["spec"].get("properties", {}) for v in versions))


def served_spec_fields(lab, cluster: str, crds) -> dict[str, set[str]]:
    """CRD name -> the spec fields `cluster`'s API server serves for it."""
    return {
        name: spec_fields(json.loads(lab.kubectl(cluster, "get", "crd", name, "-o", "json").stdout)) for name in crds
    }


def added_spec_fields(previous: Release) -> dict[str, set[str]]:
    """CRD name -> the spec fields this checkout's manifest has and the release's had not."""
    added = {}
    for path in sorted((REPO_ROOT / CRDS).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        before = previous.source / CRDS / path.name
        if new := spec_fields(crd) - (spec_fields(yaml.safe_load(before.read_text())) if before.exists() else set()):
            added[crd["metadata"]["name"]] = new
    return added


def _run(command: list[str], what: str, **kwargs) -> str:
    result = commands.run(command, timeout=600, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout


def build_previous(directory: Path) -> Release:
    """The previous release's artifact and image, built in `directory` from its sources at PREVIOUS_COMMIT."""
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", PREVIOUS_COMMIT], capture_output=True, timeout=120
    )
    if archive.returncode != 0:
        raise AssertionError(
            f"the previous release (commit {PREVIOUS_COMMIT}) is not in the history of {REPO_ROOT}; the upgrade "
            f"tests build it from there (a shallow clone lacks it: fetch with full history):\n"
            + archive.stderr.decode(errors="replace")
        )
    source = directory / "source"
    source.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    version = yaml.safe_load((source / "galaxy.yml").read_text())["version"]
    _run(
        [str(source / "tools" / "build-collection"), str(directory / "artifact")],
        f"building release {version}'s collection",
        env=tool_environment(),
    )
    # That release's image builder, reading its own tree (its REPO_ROOT is where its package lies).
    _run(
        [sys.executable, "-m", "catamaran_lab.controller_image", str(directory / "image")],
        f"building release {version}'s controller image",
        env=dict(os.environ, PYTHONPATH=str(source / "lab" / "src")),
    )
    return built_previous(directory)


def built_previous(directory: Path) -> Release:
    """The release build_previous(directory) built."""
    source = directory / "source"
    version = yaml.safe_load((source / "galaxy.yml").read_text())["version"]
    (artifact,) = (directory / "artifact").glob("catamaran-federation-*.tar.gz")
    (archive,) = (directory / "image").glob("*.oci.tar")
    return Release(version, artifact, Image(f"{controller_image.IMAGE_REPOSITORY}:{version}", archive), source)
