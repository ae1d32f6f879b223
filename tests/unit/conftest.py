"""Unit tests see the lab's shape as lab/lab.yaml declares it, whatever the caller's environment says."""

import pytest


@pytest.fixture(autouse=True)
def _no_lab_overrides(monkeypatch):
    for name in (
        "CATAMARAN_LAB_BASE_PORT",
        "CATAMARAN_LAB_CLUSTERS",
        "CATAMARAN_LAB_OVERLAP",
        "CATAMARAN_LAB_REAL_NODES",
    ):
        monkeypatch.delenv(name, raising=False)
