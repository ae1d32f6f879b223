"""A lab file of the test's own, for the lab's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def lab_file(tmp_path):
    def write(text: str) -> Path:
        path = tmp_path / "lab.yaml"
        path.write_text(text)
        return path

    return write
