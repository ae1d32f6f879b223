"""The supervisor's probe (supervisor.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from catamaran.supervisor import probe


def test_probe_reports_a_refused_connection():
    assert probe("http://127.0.0.1:1", 1).startswith("URLError")
