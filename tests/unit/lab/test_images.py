"""Image layers and archives (catamaran_lab/images.py)."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from catamaran_lab import images
from catamaran_lab.errors import LabError


def test_layer_file_modes_default_to_executable_and_keep_setuid():
    layer = images._layer({"usr/local/bin/nnp": b"x", "bin/tool": b"y"}, {}, {}, {"usr/local/bin/nnp": 0o4755})
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        modes = {member.name: member.mode for member in archive.getmembers() if member.isfile()}
    assert modes == {"usr/local/bin/nnp": 0o4755, "bin/tool": 0o755}


def test_a_directory_layer_keeps_modes_and_links_and_drops_owners_and_times(tmp_path):
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    (root / "usr" / "bin" / "tool").write_bytes(b"\x7fELF")
    (root / "usr" / "bin" / "tool").chmod(0o755)
    (root / "usr" / "bin" / "alias").symlink_to("tool")
    os.link(root / "usr" / "bin" / "tool", root / "usr" / "bin" / "hardlink")
    os.utime(root / "usr" / "bin" / "tool", (2_000_000_000, 2_000_000_000))
    layer = images._directory_layer(root, mtime=315532800)
    assert layer == images._directory_layer(root, mtime=315532800)
    with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
        members = {member.name: member for member in archive.getmembers()}
        assert archive.getnames() == sorted(archive.getnames())
        assert archive.extractfile("usr/bin/hardlink").read() == b"\x7fELF"  # type: ignore[union-attr]
    assert set(members) == {"tmp", "usr", "usr/bin", "usr/bin/alias", "usr/bin/hardlink", "usr/bin/tool"}
    assert members["tmp"].mode == 0o1777
    assert members["usr/bin/tool"].mode == 0o755
    assert members["usr/bin/alias"].issym()
    assert members["usr/bin/alias"].linkname == "tool"
    assert members["usr/bin/hardlink"].isfile()
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members.values()} == {(0, 0, "", "", 315532800)}


def test_a_directory_layer_refuses_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(LabError, match="not a file, directory or symlink"):
        images._directory_layer(tmp_path, mtime=0)


def test_an_archive_of_several_layers_lists_them_bottom_first(tmp_path):
    layers = [images._layer({"a": b"1"}, {}, {}), images._layer({"b": b"2"}, {}, {})]
    history = [{"created_by": "one"}, {"created_by": "two"}]
    image = images._write(
        images.Image("x/y:1", tmp_path / "i.tar"), layers, {"Cmd": ["a"]}, history, "1980-01-01T00:00:00Z"
    )
    with tarfile.open(image.archive) as archive:
        assert "oci-layout" in archive.getnames()
    with pytest.raises(ValueError, match="2 layers but 1 history"):
        images._write(images.Image("x/y:1", tmp_path / "j.tar"), layers, {}, history[:1])


def test_image_layers_are_reproducible_and_complete():
    files = {"bin/tool": b"#!/bin/sh\n"}
    first = images._layer(files, {"usr/bin/alias": "/bin/tool"}, {"tmp": 0o1777})
    second = images._layer(files, {"usr/bin/alias": "/bin/tool"}, {"tmp": 0o1777})
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        members = {m.name: m for m in archive.getmembers()}
    assert {"bin", "bin/tool", "usr", "usr/bin", "usr/bin/alias", "tmp"} <= set(members)
    assert members["tmp"].mode == 0o1777
    assert members["usr/bin/alias"].issym()


def test_oci_archive_names_the_image_and_points_at_its_blobs(tmp_path):
    image = images._write(
        images.Image("catamaran.lab/test:1.0", tmp_path / "t.tar"), images._layer({"a": b"x"}, {}, {}), {"Cmd": ["a"]}
    )
    with tarfile.open(image.archive) as archive:
        index = json.load(archive.extractfile("index.json"))
        descriptor = index["manifests"][0]
        assert descriptor["annotations"]["io.containerd.image.name"] == "catamaran.lab/test:1.0"
        manifest = json.load(archive.extractfile(f"blobs/sha256/{descriptor['digest'].split(':')[1]}"))
        for blob in (manifest["config"], *manifest["layers"]):
            assert archive.getmember(f"blobs/sha256/{blob['digest'].split(':')[1]}").size == blob["size"]
