"""The virtual node's name and a request to the virtual kubelet's API."""

from __future__ import annotations

from catamaran.vk.kubelet.http import Request

NODE = "catamaran-cluster-3"


def request(path: str = "/", query: dict | None = None, headers: dict | None = None) -> Request:
    return Request("GET", path, query or {}, headers or {}, reader=None, writer=None)
