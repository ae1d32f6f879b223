"""Builds catamaran-controller with the collection's version: galaxy.yml is its one source.

The controller ships inside the collection (controller/ beside galaxy.yml), so the version is read from
there, first found wins:

- ``PKG-INFO`` here: an sdist, whose version was read from one of the sources below when it was made;
- ``../galaxy.yml``: a checkout of the collection, or tools/build-collection's scratch copy of it;
- ``../MANIFEST.json``: an installed collection (``ansible-galaxy collection install``), which has no galaxy.yml.

Everything else is in pyproject.toml. No third-party module is imported here: the build runs in pip's isolated
build environment, which holds setuptools only.
"""

from __future__ import annotations

import json
import re
from email.parser import HeaderParser
from pathlib import Path

# galaxy.yml's top-level `version:` key (a YAML parser is not available in the build environment).
GALAXY_VERSION = re.compile(r"""^version:[ \t]*(["']?)([^"'\s#]+)\1[ \t]*(?:#.*)?$""", re.MULTILINE)


class VersionNotFound(Exception):
    pass


def from_pkg_info(path: Path) -> str | None:
    if not path.is_file():
        return None
    return HeaderParser().parsestr(path.read_text(encoding="utf-8")).get("Version") or None


def from_galaxy_yml(path: Path) -> str | None:
    if not path.is_file():
        return None
    match = GALAXY_VERSION.search(path.read_text(encoding="utf-8"))
    if not match:
        raise VersionNotFound(f"{path} has no top-level `version: X.Y.Z` line")
    return match.group(2)


def from_manifest_json(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))["collection_info"]["version"]
    except (ValueError, KeyError, TypeError) as error:
        raise VersionNotFound(f"{path} has no collection_info.version ({type(error).__name__}: {error})") from None


def collection_version(project: Path) -> str:
    """The version of the package whose pyproject.toml is in `project`; VersionNotFound names where it looked."""
    sources = (
        (from_pkg_info, project / "PKG-INFO"),
        (from_galaxy_yml, project.parent / "galaxy.yml"),
        (from_manifest_json, project.parent / "MANIFEST.json"),
    )
    for read, path in sources:
        version = read(path)
        if version:
            return version
    raise VersionNotFound(
        "catamaran-controller takes its version from the Ansible collection it ships in, but none of "
        + ", ".join(str(path) for _, path in sources)
        + " exists: build it from the collection (tools/build-collection or `make collection` in a checkout; "
        "controller/ inside an installed collection also works), not from a copy of controller/ alone"
    )


if __name__ == "__main__":  # setuptools runs this file as __main__; the unit tests import it
    from setuptools import setup

    try:
        version = collection_version(Path(__file__).resolve().parent)
    except VersionNotFound as error:
        raise SystemExit(f"error: {error}") from None
    setup(version=version)
