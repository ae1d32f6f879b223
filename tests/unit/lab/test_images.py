"""Pure logic of the controller's image (`make image`): directory layers, the venv's scripts, missing tools."""

from __future__ import annotations

import csv
import io
import os
import tarfile

import pytest

from catamaran_lab import controller_image, images
from catamaran_lab.errors import LabError


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


def test_console_scripts_get_the_images_interpreter_and_a_true_record(tmp_path):
    venv = tmp_path / "opt" / "catamaran"
    dist_info = venv / "lib" / "python3.11" / "site-packages" / "tool-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (venv / "bin").mkdir()
    (dist_info / "entry_points.txt").write_text("[console_scripts]\nTool-CLI = tool.cli:main.run\n")
    (dist_info / "direct_url.json").write_text('{"url": "file:///tmp/x.whl"}')
    (dist_info / "RECORD").write_text(
        "../../bin/Tool-CLI,sha256=old,10\r\ntool-1.0.dist-info/direct_url.json,sha256=x,1\r\n"
        "tool-1.0.dist-info/RECORD,,\r\ntool/cli.py,sha256=y,2\r\n",
        newline="",
    )
    controller_image._venv_scripts(venv, dist_info)
    script = (venv / "bin" / "Tool-CLI").read_text()
    assert script.startswith("#!/opt/catamaran/bin/python\n")
    assert "from tool.cli import main\n" in script
    assert "sys.exit(main.run())" in script
    assert not (dist_info / "direct_url.json").exists()
    with (dist_info / "RECORD").open(newline="") as record:
        rows = list(csv.reader(record))
    assert [row[0] for row in rows] == ["../../../bin/Tool-CLI", "tool-1.0.dist-info/RECORD", "tool/cli.py"]
    assert rows[0][2] == str(len(script.encode()))


def test_a_missing_mmdebstrap_is_named_with_its_package(monkeypatch, tmp_path):
    monkeypatch.setattr(controller_image.shutil, "which", lambda tool: None if tool == "mmdebstrap" else "/usr/bin/x")
    with pytest.raises(LabError, match=r"mmdebstrap \(Debian package mmdebstrap\).*apt-get install mmdebstrap"):
        controller_image._check_tools(tmp_path / "debian.sources")
