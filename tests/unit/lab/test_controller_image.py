"""The controller's image (catamaran_lab/controller_image.py, `make image`): the venv's scripts, missing tools."""

from __future__ import annotations

import csv

import pytest

from catamaran_lab import controller_image
from catamaran_lab.errors import LabError


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
