"""plugins/module_utils/kube.py: watches never hand a half-read stream to the next request."""

from __future__ import annotations

import json
import sys

import pytest

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.kube import Cluster


class WatchStream:
    """A urllib3 response to a watch: its events, then (unless the reader stops early) the end of the stream."""

    def __init__(self, events: list[dict]):
        self.lines = [json.dumps(event).encode() + b"\n" for event in events]
        self.read = 0
        self.closed = False
        self.released = False

    def stream(self, amount):
        for line in self.lines:
            self.read += 1
            yield line

    def close(self):
        self.closed = True

    def release_conn(self):
        self.released = True


class Api:
    """The kubernetes ApiClient's two calls a watch makes."""

    def __init__(self, stream: WatchStream):
        self.stream = stream

    def param_serialize(self, *args, **kwargs):
        return ()

    def call_api(self, *args, **kwargs):
        return type("Response", (), {"status": 200, "response": self.stream})()


def crd(name: str, established: bool) -> dict:
    conditions = [{"type": "Established", "status": "True"}] if established else []
    return {"metadata": {"name": name, "resourceVersion": "7"}, "status": {"conditions": conditions}}


@pytest.mark.parametrize("established_at", [0, 2], ids=["left-mid-stream", "read-to-the-end"])
def test_a_watch_closes_its_connection_however_it_ends(established_at):
    events = [{"type": "MODIFIED", "object": crd("a", established=i == established_at)} for i in range(3)]
    stream = WatchStream(events)
    cluster = Cluster.__new__(Cluster)
    cluster._api = Api(stream)
    cluster.label, cluster.request_timeout = "c", 10

    def established(items):
        return any(c["status"] == "True" for i in items for c in i["status"]["conditions"])

    finished, version = cluster._watch_once("/apis/x", {}, "1", 5, established, {})
    assert (finished, version, stream.read) == (True, "7", established_at + 1)
    # Left open, a watch stopped mid-stream goes back to the pool with unread events: the next request on that
    # connection reads them first and waits out its read timeout (10 s after every CRD of a fresh install).
    assert (stream.closed, stream.released) == (True, True)
