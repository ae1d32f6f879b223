"""Pure logic of health: liveness and readiness verdicts, NotReady reasons, stale offloading entries, names."""

from __future__ import annotations

import sys
import time
import urllib.request

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.processes import (
    SupervisedProcess,
    liveness_problem,
    name_problem,
)

from catamaran import health
from catamaran.consumer.offloading import removal_patch, unpeered_entries
from catamaran.supervisor import probe
from catamaran.vk.node import NodeSettings, node_status, top_problem

SETTINGS = NodeSettings(provider_id="p", node_ip="10.0.0.1")
OFFER = {"free": {"cpu": "4", "memory": "4Gi", "pods": "100"}}


def ready_condition(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


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


def test_probe_reports_a_refused_connection():
    assert probe("http://127.0.0.1:1", 1).startswith("URLError")


@pytest.mark.parametrize(
    ("problems", "expected"),
    [
        ({}, None),
        ({"WatchesFailing": "w"}, ("WatchesFailing", "w")),
        ({"WatchesFailing": "w", "CredentialRejected": "c"}, ("CredentialRejected", "c")),
        ({"Zeta": "z", "Alpha": "a", "WatchesFailing": "w"}, ("WatchesFailing", "w")),
        ({"Zeta": "z", "Alpha": "a"}, ("Alpha", "a")),
    ],
)
def test_the_most_specific_problem_is_shown(problems, expected):
    assert top_problem(problems) == expected


def test_node_ready_condition_follows_health_then_problems_then_offer():
    unreachable, _ = node_status(SETTINGS, OFFER, False, "timeout", [], {"WatchesFailing": "w"})
    assert ready_condition(unreachable)["reason"] == "ProviderUnreachable"
    failing, _ = node_status(SETTINGS, OFFER, True, "", [], {"WatchesFailing": "informer x: 403"})
    assert ready_condition(failing)["status"] == "False"
    assert ready_condition(failing)["reason"] == "WatchesFailing"
    assert ready_condition(failing)["message"] == "informer x: 403"
    ready, _ = node_status(SETTINGS, OFFER, True, "", [], {})
    assert ready_condition(ready)["status"] == "True"


class PatchTestFailed(Exception):
    pass


def apply_patch(document: dict, patch: list[dict]) -> dict:
    """RFC 6902 `test` and `remove` on list items, as the API server applies them."""
    clusters = list(document["status"]["clusters"])
    for operation in patch:
        index = int(operation["path"].split("/")[3])
        if operation["op"] == "test":
            if index >= len(clusters) or clusters[index]["clusterID"] != operation["value"]:
                raise PatchTestFailed(operation["path"])
        else:
            del clusters[index]
    return {"status": {"clusters": clusters}}


def test_entries_of_unpeered_clusters_are_removed_guarded_by_their_cluster_id():
    status = {"clusters": [{"clusterID": "a"}, {"clusterID": "gone"}, {"clusterID": "b"}, {"clusterID": "old"}]}
    stale = unpeered_entries(status["clusters"], {"a", "b"})
    assert stale == [1, 3]
    patch = removal_patch(status["clusters"], stale)
    assert apply_patch({"status": status}, patch) == {"status": {"clusters": [{"clusterID": "a"}, {"clusterID": "b"}]}}
    moved = {"status": {"clusters": [{"clusterID": "a"}, {"clusterID": "b"}, {"clusterID": "gone"}]}}
    with pytest.raises(PatchTestFailed):
        apply_patch(moved, patch)


@pytest.mark.parametrize("name", ["manager-cluster-1", "vk-c1-p2", "a", "x.y_z"])
def test_good_process_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "-lead", "with space", "x" * 101])
def test_bad_process_names_are_refused_naming_the_field(name):
    assert name_problem(name).startswith("name: ")


def test_liveness_settings_must_be_positive():
    assert liveness_problem(None) is None
    assert liveness_problem({"period": 10, "timeout": 5, "failure_threshold": 3}) is None
    assert liveness_problem({"period": -1, "timeout": 5, "failure_threshold": 3}).startswith("liveness.period:")
    assert liveness_problem({"period": 1, "timeout": 5, "failure_threshold": 0}).startswith(
        "liveness.failure_threshold:"
    )


def test_the_health_url_file_goes_to_the_supervisor_and_before_the_subcommand():
    process = SupervisedProcess("/state", "vk-a", "/py")
    args = process.supervisor_args(
        ["--cluster-id", "c", "virtual-kubelet"], {"period": 2, "timeout": 1, "failure_threshold": 3}
    )
    child = args[args.index("--") + 1 :]
    assert child == [
        "/py",
        "-m",
        "catamaran",
        "--health-url-file",
        "/state/vk-a.health-url",
        "--cluster-id",
        "c",
        "virtual-kubelet",
    ]
    assert args[args.index("--liveness-url-file") + 1] == "/state/vk-a.health-url"
    assert args[args.index("--liveness-failures") + 1] == "3"
    plain = process.supervisor_args(["manager"], None)
    assert "--liveness-url-file" not in plain
    assert plain[plain.index("--") + 1 :] == ["/py", "-m", "catamaran", "manager"]
