"""Pins and the binary cache (catamaran_lab/binaries.py)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from catamaran_lab import binaries
from catamaran_lab.errors import LabError


def test_pins_come_from_the_wrapper_module():
    pins = binaries.read_pins()
    assert pins.kubernetes.startswith("v1.")
    assert pins.etcd.startswith("v3.")
    assert pins.kubernetes in pins.cache_key
    assert pins.kwok in pins.cache_key
    assert pins.metrics_server.startswith("v0.")
    assert pins.metrics_server in pins.cache_key
    assert pins.companion_version("coredns").startswith("v1.")
    assert pins.companion_version("wireguard-go").startswith("v0.")
    assert pins.companion_version("kube-router") == "v2.1.0"
    assert pins.companion_version("registry") == "v3.1.2"
    cache = binaries.BinaryCache(pins, Path("/cache"))
    for name in ("coredns", "wireguard-go", "kube-router", "registry"):
        assert cache.companion_dirs[name].name.startswith(f"{name}-{pins.companion_version(name)}_")


@pytest.mark.parametrize("companion", ["coredns", "wireguard-go", "kube-router", "registry"])
def test_a_companion_is_cached_apart_so_its_pin_moves_alone(tmp_path, companion):
    cache = _fake_complete_cache(tmp_path)
    assert cache.path(companion).parent.parent == cache.companion_dirs[companion] != cache.dir
    cache.path(companion).unlink()
    assert f"{companion} is missing" in cache.problem()
    assert cache._problem(cache.dir, binaries.KUBE_BINARIES) is None


def test_pins_without_kubernetes_are_an_error(tmp_path):
    go_mod = tmp_path / "go.mod"
    go_mod.write_text("module x\n\ngo 1.26.0\n")
    with pytest.raises(LabError, match=r"does not require k8s\.io/kubernetes"):
        binaries.read_pins(go_mod)


def test_version_stamp_matches_upstream_release_builds():
    flags = binaries.kubernetes_ldflags("v1.36.3")
    assert "-X 'k8s.io/component-base/version.gitVersion=v1.36.3'" in flags
    assert "-X 'k8s.io/component-base/version.gitMinor=36'" in flags


def _fake_complete_cache(root: Path) -> binaries.BinaryCache:
    cache = binaries.BinaryCache(root=root)
    entries: dict[Path, dict] = {}
    for name in binaries.ALL_BINARIES:
        path = cache.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * 10)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        entry = {"size": path.stat().st_size, "sha256": binaries._sha256(path)}
        entries.setdefault(path.parent.parent, {})[name] = entry
    for directory, binaries_there in entries.items():
        (directory / binaries.MANIFEST).write_text(json.dumps({"binaries": binaries_there}))
    return cache


def test_complete_cache_is_used_as_is(tmp_path):
    assert _fake_complete_cache(tmp_path).problem() is None


def test_missing_cache_needs_a_build(tmp_path):
    assert binaries.BinaryCache(root=tmp_path).problem() == "not built yet"


def test_interrupted_build_is_detected(tmp_path):
    cache = _fake_complete_cache(tmp_path)
    (cache.dir / binaries.MANIFEST).unlink()
    assert "half-built" in cache.problem()


def test_truncated_binary_is_detected(tmp_path):
    cache = _fake_complete_cache(tmp_path)
    cache.path("kube-apiserver").write_bytes(b"x")
    assert "kube-apiserver does not match" in cache.problem()


def test_missing_binary_is_detected(tmp_path):
    cache = _fake_complete_cache(tmp_path)
    cache.path("kwokctl").unlink()
    assert "kwokctl is missing" in cache.problem()


def test_e2e_only_checksums_do_not_move_the_binary_cache_key():
    go_sum = b"a.io/x v1.0.0 h1:aaa=\na.io/x v1.0.0/go.mod h1:bbb=\n"
    e2e_lines = b"k8s.io/sample-apiserver v0.36.3 h1:ccc=\nk8s.io/sample-apiserver v0.36.3/go.mod h1:ddd=\n"
    assert binaries.without_e2e_only_modules(go_sum + e2e_lines) == go_sum
    assert binaries.without_e2e_only_modules(go_sum) == go_sum
