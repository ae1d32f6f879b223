"""Host packages the real nodes need (catamaran_lab/packages.py)."""

from __future__ import annotations

import pytest

from catamaran_lab import packages
from catamaran_lab.errors import LabError


def test_missing_packages_are_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(packages.os.path, "exists", lambda path: path != "/usr/bin/containerd")
    monkeypatch.setattr(packages.shutil, "which", lambda tool: None)
    with pytest.raises(LabError) as error:
        packages.ensure_packages(log=lambda message: None)
    message = str(error.value)
    assert "containerd" in message
    assert "apt-get install -y -qq --no-install-recommends containerd" in message
    assert "CATAMARAN_LAB_REAL_NODES=0" in message


def test_nothing_is_installed_when_every_package_is_there(monkeypatch):
    monkeypatch.setattr(packages.os.path, "exists", lambda path: True)
    monkeypatch.setattr(packages.subprocess, "run", lambda *a, **k: pytest.fail("apt-get must not run"))
    packages.ensure_packages(log=lambda message: None)
