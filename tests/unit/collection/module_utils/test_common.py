"""Connection options per peering side (plugins/module_utils/common.py)."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils.common import connection_options


def test_a_peering_side_takes_the_top_level_options_it_does_not_set(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", "/env/kubeconfig")
    params = {
        "kubeconfig": "/shared/kubeconfig",
        "request_timeout": 5,
        "consumer": {"context": "cluster-2", "kubeconfig": None, "request_timeout": None},
        "provider": {"context": "cluster-3", "kubeconfig": "/provider/kubeconfig", "request_timeout": 20},
    }
    consumer = connection_options(params, "consumer")
    provider = connection_options(params, "provider")
    assert (consumer["kubeconfig"], consumer["context"], consumer["request_timeout"]) == (
        "/shared/kubeconfig",
        "cluster-2",
        5,
    )
    assert (provider["kubeconfig"], provider["context"], provider["request_timeout"]) == (
        "/provider/kubeconfig",
        "cluster-3",
        20,
    )
    params["kubeconfig"] = None
    assert connection_options(params, "consumer")["kubeconfig"] == "/env/kubeconfig"
