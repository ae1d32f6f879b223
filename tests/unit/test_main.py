"""The console script's options (__main__.py)."""

from __future__ import annotations

import argparse

import pytest

from catamaran.__main__ import _labels


def test_gateway_selector_parses_labels_and_refuses_what_is_not_one():
    assert _labels("app.kubernetes.io/name=catamaran,app.kubernetes.io/component=gateway") == {
        "app.kubernetes.io/name": "catamaran",
        "app.kubernetes.io/component": "gateway",
    }
    for bad in ("", "name", "=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _labels(bad)
