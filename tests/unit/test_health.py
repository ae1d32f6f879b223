"""Health (health.py): liveness and readiness verdicts, and the health server."""

from __future__ import annotations

import sys
import time
import urllib.request

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from catamaran import health
from catamaran.supervisor import probe


def test_liveness_fails_once_the_loop_stops_stamping():
    checker = health.Health(stall_seconds=5)
    assert checker.liveness()[0]
    checker.last_beat = time.monotonic() - 6
    alive, message = checker.liveness()
    assert not alive
    assert "has not turned for 6s" in message


def test_readiness_names_every_failing_check():
    checker = health.Health()
    checker.add_check("provider", lambda: "unreachable")
    checker.add_check("webhook", lambda: None)
    checker.add_check("broken", lambda: 1 / 0)
    ready, reasons = checker.readiness()
    assert not ready
    assert "provider: unreachable" in reasons
    assert any(r.startswith("broken: check failed") for r in reasons)
    assert not any(r.startswith("webhook") for r in reasons)
    checker.remove_check("provider")
    checker.remove_check("broken")
    assert checker.readiness() == (True, [])


def test_the_health_server_answers_without_the_event_loop_and_hides_the_test_hook():
    checker = health.Health(stall_seconds=1)
    server = health.serve(0, "127.0.0.1", None, checker)
    assert server is None  # port 0 without a URL file: off
    checker.last_beat = time.monotonic() - 5
    server = health.serve(0, "127.0.0.1", url_file=_tmp_file(), health=checker)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert probe(base, 2).startswith("HTTP 503: event loop has not turned")
        checker.last_beat = time.monotonic()
        assert probe(base, 2) is None
        request = urllib.request.Request(f"{base}/debug/block-event-loop?seconds=1", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=2)
        assert refused.value.code == 404
    finally:
        server.shutdown()


def _tmp_file():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp()) / "health-url"


def test_a_stall_limit_within_two_heartbeats_is_refused_by_name(capsys):
    from catamaran.__main__ import main

    with pytest.raises(SystemExit) as refused:
        main(["--cluster-id", "c1", "--liveness-stall-seconds", str(2 * health.HEARTBEAT_SECONDS), "manager"])
    assert refused.value.code == 2
    assert "--liveness-stall-seconds: must be more than twice the event loop's heartbeat" in capsys.readouterr().err
