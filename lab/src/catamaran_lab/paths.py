"""Where the lab keeps its sources, binaries and runtime state."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LAB_DIR = PACKAGE_DIR.parent.parent
REPO_ROOT = LAB_DIR.parent
GO_MODULE_DIR = LAB_DIR / "gomod"
# metrics-server has a wrapper module of its own (its tools.go says why).
METRICS_SERVER_MODULE_DIR = LAB_DIR / "gomod-metrics-server"
# So has CoreDNS: its main.go picks the plugins the lab's Corefile needs.
COREDNS_MODULE_DIR = LAB_DIR / "gomod-coredns"
# And wireguard-go, the gateways' userspace WireGuard (its tools.go says why it is built here).
WIREGUARD_MODULE_DIR = LAB_DIR / "gomod-wireguard"


def state_dir() -> Path:
    """Runtime state (kubeconfigs, logs, etcd data): `.lab/` in the repository unless overridden."""
    return Path(os.environ.get("CATAMARAN_LAB_DIR", REPO_ROOT / ".lab")).resolve()


def cache_root() -> Path:
    """Binary cache, outside the repository so it survives clones and is never committed."""
    explicit = os.environ.get("CATAMARAN_LAB_CACHE")
    if explicit:
        return Path(explicit).resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return Path(xdg).resolve() / "catamaran-lab"
