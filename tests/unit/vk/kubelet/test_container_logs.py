"""Container log options (vk/kubelet/container_logs.py)."""

from __future__ import annotations

from catamaran.vk.kubelet.container_logs import log_params
from tests.unit.vk.kubelet.kubelet_requests import request


def test_log_options_pass_through_by_their_pod_log_names():
    params = log_params(
        request(query={"follow": ["true"], "tailLines": ["5"], "sinceTime": [""], "limitBytes": ["100"], "x": ["1"]}),
        "app",
    )
    assert params == [("container", "app"), ("follow", "true"), ("tailLines", "5"), ("limitBytes", "100")]
