"""Exec and attach streams (vk/kubelet/streams.py): protocols and expected streams."""

from __future__ import annotations

import pytest

from catamaran.vk.kubelet.http import HttpError
from catamaran.vk.kubelet.streams import command_streams, negotiate
from tests.unit.vk.kubelet.kubelet_requests import request


def test_stream_protocols_follow_the_callers_preference():
    assert negotiate(["v5.channel.k8s.io", "v4.channel.k8s.io"], ["v4.channel.k8s.io", "v5.channel.k8s.io"]) == (
        "v5.channel.k8s.io"
    )
    assert negotiate(["v3.channel.k8s.io", "v4.channel.k8s.io"], ["v4.channel.k8s.io"]) == "v4.channel.k8s.io"
    with pytest.raises(HttpError) as refused:
        negotiate(["channel.k8s.io"], ["v4.channel.k8s.io"])
    assert refused.value.status == 403


def test_streams_expected_from_the_command_flags():
    tty = command_streams(request(query={"input": ["1"], "output": ["1"], "error": ["1"], "tty": ["1"]}))
    assert tty == {"stdin": True, "stdout": True, "stderr": False, "resize": True}
    plain = command_streams(request(query={"output": ["1"], "error": ["1"]}))
    assert plain == {"stdin": False, "stdout": True, "stderr": True, "resize": False}
    with pytest.raises(HttpError):
        command_streams(request(query={"tty": ["1"]}))
