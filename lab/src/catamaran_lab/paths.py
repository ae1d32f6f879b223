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
# And kube-router, whose network policy controller enforces NetworkPolicies on the real nodes (its tools.go).
KUBE_ROUTER_MODULE_DIR = LAB_DIR / "gomod-kube-router"
# And CNCF Distribution's registry, the lab's OCI registry that the real nodes pull from (registry.py, its tools.go).
REGISTRY_MODULE_DIR = LAB_DIR / "gomod-registry"
# And Rancher's local-path-provisioner, the dynamic provisioner of the real nodes' default storage class (localpath.py).
LOCAL_PATH_MODULE_DIR = LAB_DIR / "gomod-local-path"


def state_dir() -> Path:
    """Runtime state (kubeconfigs, logs, etcd data): `.lab/` in the repository unless overridden."""
    return Path(os.environ.get("CATAMARAN_LAB_DIR", REPO_ROOT / ".lab")).resolve()


# `make test` runs labs beside the configured one (tests/parallel.py): one per further pytest-xdist worker and one
# for the overlapping-ranges run. `catamaran-lab down --all` and `leftovers --all` cover them too.
MAX_TEST_WORKERS = 8
OVERLAP_LAB_SUFFIX = "-overlap"


def worker_lab_dir(root: Path, worker: int) -> Path:
    return root if worker == 0 else root.with_name(f"{root.name}-gw{worker}")


def labs_of_make_test(root: Path | None = None) -> list[Path]:
    """The configured lab and every lab `make test` may run beside it."""
    root = root or state_dir()
    workers = [worker_lab_dir(root, worker) for worker in range(MAX_TEST_WORKERS)]
    return [*workers, root.with_name(root.name + OVERLAP_LAB_SUFFIX)]


def cache_root() -> Path:
    """Binary cache, outside the repository so it survives clones and is never committed."""
    explicit = os.environ.get("CATAMARAN_LAB_CACHE")
    if explicit:
        return Path(explicit).resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return Path(xdg).resolve() / "catamaran-lab"
