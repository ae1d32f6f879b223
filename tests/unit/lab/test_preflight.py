"""Preflight messages (catamaran_lab/preflight.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from catamaran_lab import preflight
from catamaran_lab.errors import LabError


def _fake_go(tmp_path: Path, version: str, monkeypatch) -> None:
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\necho go{version}\n")
    go.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_old_go_is_named_with_the_needed_version(tmp_path, monkeypatch):
    _fake_go(tmp_path, "1.24.2", monkeypatch)
    with pytest.raises(LabError, match=r"Go 1\.24\.2 found .* needs Go >= 1\.26\.0"):
        preflight.check_go("1.26.0")


def test_new_enough_go_passes(tmp_path, monkeypatch):
    _fake_go(tmp_path, "1.26.8", monkeypatch)
    assert preflight.check_go("1.26.0") == "1.26.8"


def test_missing_go_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabError, match="Go is not on PATH"):
        preflight.check_go("1.26.0")


def test_short_disk_is_reported(tmp_path):
    with pytest.raises(LabError, match="not enough disk for the test"):
        preflight.check_disk(tmp_path, 1 << 60, "the test")


def test_busy_port_names_its_holder():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LabError) as raised:
            preflight.check_ports_free({port: "cluster-9 kube-apiserver"})
    message = str(raised.value)
    assert f"127.0.0.1:{port} (cluster-9 kube-apiserver)" in message
    assert f"pid {os.getpid()}" in message


def test_inotify_limits_are_raised_never_lowered_and_a_refusal_says_how(tmp_path):
    (tmp_path / "max_user_instances").write_text("128\n")
    (tmp_path / "max_user_watches").write_text("1048576\n")
    logged = []
    preflight.raise_inotify_limits(logged.append, tmp_path)
    assert (tmp_path / "max_user_instances").read_text() == str(preflight.INOTIFY_LIMITS["max_user_instances"])
    assert (tmp_path / "max_user_watches").read_text() == "1048576\n", "a higher limit is kept"
    assert len(logged) == 1
    assert "max_user_instances raised from 128" in logged[0]
    (tmp_path / "max_user_watches").unlink()
    (tmp_path / "max_user_watches").mkdir()  # unreadable as a number, as a setting this process may not touch
    with pytest.raises(LabError, match=r"sysctl -w fs.inotify.max_user_watches=524288"):
        preflight.raise_inotify_limits(logged.append, tmp_path)
