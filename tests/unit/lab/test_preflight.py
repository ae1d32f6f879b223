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


IP_ADDR_SHOW = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever preferred_lft forever
130: cm0b7288h1@if129    inet 172.31.40.165/30 scope global cm0b7288h1\\       valid_lft forever preferred_lft forever
"""


def test_addresses_held_on_the_host_are_read_with_their_interfaces():
    assert preflight.held_addresses(IP_ADDR_SHOW) == {
        "127.0.0.1": "lo",
        "192.0.2.2": "eth0",
        "172.31.40.165": "cm0b7288h1",
    }


def test_a_real_nodes_link_address_left_by_another_lab_is_named_with_its_interface(tmp_path, monkeypatch):
    """A lab killed without `down` leaves its links: a new lab in the same port block gets the same /30, its node's
    replies leave by the dead link and its kubelet never registers. The lab says so before it starts."""
    ip = tmp_path / "ip"
    ip.write_text(f"#!/bin/sh\ncat <<'END'\n{IP_ADDR_SHOW}END\n")
    ip.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(LabError, match=r"172\.31\.40\.165 \(cluster-1's real node\) is already on cm0b7288h1"):
        preflight.check_addresses_free({"172.31.40.165": "cluster-1's real node", "172.31.40.169": "cluster-2's"})
    preflight.check_addresses_free({"172.31.40.169": "cluster-2's real node"})
