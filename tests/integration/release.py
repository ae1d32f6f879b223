"""The previous release, built from its commit in this repository's history by that release's own tools: the
collection artifact (tools/build-collection) and the controller's image (`make image`), as its users got them."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from catamaran_lab import controller_image
from catamaran_lab.images import Image
from catamaran_lab.paths import REPO_ROOT

from .collection import tool_environment

PREVIOUS_VERSION = "0.2.0"
PREVIOUS_COMMIT = "a73eab0bca927bc729b5af81c4b4cb1cac667c95"  # tag v0.2.0


@dataclass(frozen=True)
class Release:
    version: str
    artifact: Path
    image: Image


def _run(command: list[str], what: str, **kwargs) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout


def build_previous(directory: Path) -> Release:
    """Release PREVIOUS_VERSION's artifact and image, built in `directory` from its sources at PREVIOUS_COMMIT."""
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", PREVIOUS_COMMIT], capture_output=True, timeout=120
    )
    if archive.returncode != 0:
        raise AssertionError(
            f"release {PREVIOUS_VERSION} (commit {PREVIOUS_COMMIT}, tag v{PREVIOUS_VERSION}) is not in the history of "
            f"{REPO_ROOT}; the upgrade test builds it from there (a shallow clone lacks it: fetch with full history):\n"
            + archive.stderr.decode(errors="replace")
        )
    source = directory / "source"
    source.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    artifact = _run(
        [str(source / "tools" / "build-collection"), str(directory / "artifact")],
        f"building release {PREVIOUS_VERSION}'s collection",
        env=tool_environment(),
    )
    # That release's image builder, reading its own tree (its REPO_ROOT is where its package lies).
    image = _run(
        [sys.executable, "-m", "catamaran_lab.controller_image", str(directory / "image")],
        f"building release {PREVIOUS_VERSION}'s controller image",
        env=dict(os.environ, PYTHONPATH=str(source / "lab" / "src")),
    )
    reference = f"{controller_image.IMAGE_REPOSITORY}:{PREVIOUS_VERSION}"
    return Release(PREVIOUS_VERSION, Path(artifact.strip().splitlines()[-1]), Image(reference, Path(image.strip())))
