"""Build and cache the lab's upstream binaries from pinned Go modules.

The Kubernetes and etcd pins live in `lab/gomod/go.mod` (the wrapper module), metrics-server's
in `lab/gomod-metrics-server/go.mod`, CoreDNS's in `lab/gomod-coredns/go.mod`, wireguard-go's in
`lab/gomod-wireguard/go.mod`, kube-router's in `lab/gomod-kube-router/go.mod`, CNCF Distribution's registry's
in `lab/gomod-registry/go.mod` and local-path-provisioner's in `lab/gomod-local-path/go.mod` (wrapper modules of their
own); kwok's pin lives here. The cache directory name is derived from the pins plus a digest of the module files, so
changing a pin builds into a fresh directory and never mixes versions. CoreDNS, wireguard-go, kube-router, the registry
and local-path-provisioner (the companions) are each cached in a directory of their own: their pins move without
rebuilding Kubernetes.
A build is staged in a sibling `.partial` directory and renamed into place only when every
binary is present; a manifest with sizes and digests lets a later run detect a half-built
or damaged cache and rebuild it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError
from .paths import (
    COREDNS_MODULE_DIR,
    GO_MODULE_DIR,
    KUBE_ROUTER_MODULE_DIR,
    LOCAL_PATH_MODULE_DIR,
    METRICS_SERVER_MODULE_DIR,
    REGISTRY_MODULE_DIR,
    WIREGUARD_MODULE_DIR,
    cache_root,
)
from .preflight import check_disk, check_go

KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "v0.8.0"

# A cold build needs the module cache, the Go build cache and the binaries themselves.
COLD_BUILD_DISK_BYTES = 10 * 1024**3

MANIFEST = "manifest.json"


METRICS_SERVER_MODULE = "sigs.k8s.io/metrics-server"
# Modules only the e2e suite needs (e2e.py): their go.sum lines do not key the binaries' cache, so building
# e2e.test into the same wrapper module leaves the lab's binaries where they are.
E2E_ONLY_MODULES = ("k8s.io/sample-apiserver", "github.com/ishidawataru/sctp")
COREDNS_MODULE = "github.com/coredns/coredns"
WIREGUARD_MODULE = "golang.zx2c4.com/wireguard"
KUBE_ROUTER_MODULE = "github.com/cloudnativelabs/kube-router/v2"
REGISTRY_MODULE = "github.com/distribution/distribution/v3"
LOCAL_PATH_MODULE = "github.com/rancher/local-path-provisioner"


@dataclass(frozen=True)
class Target:
    """One binary the lab needs, the Go package that produces it and the wrapper module it is built in."""

    name: str
    package: str
    kubernetes_version_stamp: bool = False
    module_dir: Path = GO_MODULE_DIR


KUBE_TARGETS = (
    Target("etcd", "go.etcd.io/etcd/server/v3"),
    Target("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", True),
    Target("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager", True),
    Target("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", True),
    Target("kubectl", "k8s.io/kubernetes/cmd/kubectl", True),
    Target("kubelet", "k8s.io/kubernetes/cmd/kubelet", True),
    Target("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy", True),
)
METRICS_SERVER_TARGET = Target(
    "metrics-server", f"{METRICS_SERVER_MODULE}/cmd/metrics-server", module_dir=METRICS_SERVER_MODULE_DIR
)
KWOK_TARGETS = (
    Target("kwok", f"{KWOK_MODULE}/cmd/kwok"),
    Target("kwokctl", f"{KWOK_MODULE}/cmd/kwokctl"),
)


@dataclass(frozen=True)
class Companion:
    """A binary built from a wrapper module of its own and cached apart, so its pin moves alone."""

    target: Target
    module: str  # the pinned module, named in the cache directory with its version
    version_variable: str = ""  # a string variable `-X` stamps with the pinned version, if the binary has one

    @property
    def name(self) -> str:
        return self.target.name

    def cache_key(self, version: str) -> str:
        digest = hashlib.sha256()
        for path in sorted(self.target.module_dir.iterdir()):
            if path.suffix in (".go", ".mod", ".sum"):
                digest.update(path.read_bytes())
        return f"{self.name}-{version}_{digest.hexdigest()[:10]}"


COMPANIONS = (
    # The wrapper module's own main package: CoreDNS with only the plugins the lab's Corefile uses.
    Companion(Target("coredns", ".", module_dir=COREDNS_MODULE_DIR), COREDNS_MODULE),
    # The gateways' userspace WireGuard (its tools.go says why it is built, not Debian's).
    Companion(Target("wireguard-go", WIREGUARD_MODULE, module_dir=WIREGUARD_MODULE_DIR), WIREGUARD_MODULE),
    # The real nodes' NetworkPolicy engine, run firewall-only (realnode.py); its tools.go says why not tidied.
    Companion(
        Target("kube-router", f"{KUBE_ROUTER_MODULE}/cmd/kube-router", module_dir=KUBE_ROUTER_MODULE_DIR),
        KUBE_ROUTER_MODULE,
        version_variable=f"{KUBE_ROUTER_MODULE}/pkg/version.Version",
    ),
    # The lab's OCI registry (registry.py), which the real nodes' containerd trusts; stamped as upstream's Makefile.
    Companion(
        Target("registry", f"{REGISTRY_MODULE}/cmd/registry", module_dir=REGISTRY_MODULE_DIR),
        REGISTRY_MODULE,
        version_variable=f"{REGISTRY_MODULE}/version.version",
    ),
    # The dynamic provisioner of the real nodes' default storage class (localpath.py).
    Companion(Target("local-path-provisioner", LOCAL_PATH_MODULE, module_dir=LOCAL_PATH_MODULE_DIR), LOCAL_PATH_MODULE),
)
KUBE_BINARIES = tuple(t.name for t in (*KUBE_TARGETS, METRICS_SERVER_TARGET, *KWOK_TARGETS))
ALL_BINARIES = (*KUBE_BINARIES, *(companion.name for companion in COMPANIONS))


@dataclass(frozen=True)
class Pins:
    """Versions the lab is built from, read from the wrapper module."""

    kubernetes: str
    etcd: str
    kwok: str
    go_minimum: str
    metrics_server: str = ""
    companions: tuple[tuple[str, str], ...] = ()  # (binary, version) per companion

    def companion_version(self, name: str) -> str:
        return dict(self.companions)[name]

    @property
    def cache_key(self) -> str:
        digest = hashlib.sha256()
        for module_dir in (GO_MODULE_DIR, METRICS_SERVER_MODULE_DIR):
            digest.update((module_dir / "go.mod").read_bytes())
            digest.update(without_e2e_only_modules((module_dir / "go.sum").read_bytes()))
        digest.update(self.kwok.encode())
        return (
            f"k8s-{self.kubernetes}_etcd-{self.etcd}_kwok-{self.kwok}_ms-{self.metrics_server}_"
            f"{digest.hexdigest()[:10]}"
        )


def without_e2e_only_modules(go_sum: bytes) -> bytes:
    """go.sum without the lines of E2E_ONLY_MODULES, byte for byte otherwise."""
    lines = go_sum.splitlines(keepends=True)
    return b"".join(line for line in lines if line.split(b" ", 1)[0].decode() not in E2E_ONLY_MODULES)


def read_pins(
    go_mod: Path = GO_MODULE_DIR / "go.mod",
    metrics_server_go_mod: Path = METRICS_SERVER_MODULE_DIR / "go.mod",
) -> Pins:
    """Parse the pinned versions out of the wrapper modules' go.mod files; Go must satisfy all of them."""
    main = _go_mod(go_mod)
    metrics_server = _go_mod(metrics_server_go_mod)
    companions = [(c, _go_mod(c.target.module_dir / "go.mod")) for c in COMPANIONS]
    go_minimum = max(main.go, metrics_server.go, *(mod.go for _, mod in companions), key=_version_key)
    return Pins(
        kubernetes=main.required("k8s.io/kubernetes"),
        etcd=main.required("go.etcd.io/etcd/server/v3"),
        kwok=KWOK_VERSION,
        go_minimum=go_minimum,
        metrics_server=metrics_server.required(METRICS_SERVER_MODULE),
        companions=tuple((c.name, mod.required(c.module)) for c, mod in companions),
    )


@dataclass(frozen=True)
class _GoMod:
    path: Path
    text: str
    go: str

    def required(self, module: str) -> str:
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", self.text, re.MULTILINE)
        if not match:
            raise LabError(f"{self.path} does not require {module}; the lab cannot tell which version to build")
        return match.group(1)


def _go_mod(path: Path) -> _GoMod:
    text = path.read_text()
    go_directive = re.search(r"^go\s+(\S+)", text, re.MULTILINE)
    if not go_directive:
        raise LabError(f"{path} has no 'go' directive")
    return _GoMod(path, text, go_directive.group(1))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def metrics_server_ldflags(version: str) -> str:
    """metrics-server's release stamp (its Makefile's VERSION_LDFLAGS); kwokctl parses `--version`."""
    stamps = {"gitVersion": version, "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z"}
    return "-s -w " + " ".join(f"-X 'k8s.io/client-go/pkg/version.{key}={value}'" for key, value in stamps.items())


def kubernetes_ldflags(version: str) -> str:
    """Stamp the version the way upstream's release build does; kwokctl parses `--version`."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X '{package}.{key}={value}'" for key, value in stamps.items()]
    return "-s -w " + " ".join(flags)


class BinaryCache:
    """Directories of verified binaries for one set of pins: Kubernetes' and its kin's, and each companion's."""

    def __init__(self, pins: Pins | None = None, root: Path | None = None):
        self.pins = pins or read_pins()
        self.root = root or cache_root()
        self.dir = self.root / self.pins.cache_key
        self.bin_dir = self.dir / "bin"
        self.companion_dirs = {c.name: self.root / c.cache_key(self.pins.companion_version(c.name)) for c in COMPANIONS}

    def path(self, name: str) -> Path:
        return self.companion_dirs.get(name, self.dir) / "bin" / name

    def _parts(self):
        """(directory, binaries, build) for Kubernetes and kin, then each companion."""
        yield self.dir, KUBE_BINARIES, self._build_kubernetes
        for companion in COMPANIONS:
            version = self.pins.companion_version(companion.name)
            yield self.companion_dirs[companion.name], (companion.name,), self._companion_build(companion, version)

    def problem(self) -> str | None:
        """Why the cache cannot be used as is, or None when it is complete and intact."""
        return next((p for directory, names, _ in self._parts() if (p := self._problem(directory, names))), None)

    def _problem(self, directory: Path, names: tuple[str, ...]) -> str | None:
        if not directory.exists():
            return "not built yet" if directory == self.dir else f"{', '.join(names)} not built yet"
        return manifest_problem(directory, names)

    def ensure(self, log=print) -> None:
        """Build whatever is missing; a complete cache returns at once."""
        wanted = [part for part in self._parts() if self._problem(part[0], part[1])]
        if not wanted:
            return
        check_go(self.pins.go_minimum)
        self.root.mkdir(parents=True, exist_ok=True)
        check_disk(self.root, COLD_BUILD_DISK_BYTES, "a cold build of the lab binaries")
        for directory, names, build in wanted:
            log(f"lab binaries: {self._problem(directory, names)}; building into {directory}")
            build_staged(directory, names, build, log)

    def ensure_companion(self, name: str, log=print) -> Path:
        """One companion only, built if missing (the controller image needs wireguard-go, not Kubernetes); its path."""
        for directory, names, build in self._parts():
            if names == (name,) and (problem := self._problem(directory, names)):
                check_go(self.pins.go_minimum)
                log(f"lab binaries: {problem}; building into {directory}")
                build_staged(directory, names, build, log)
        return self.path(name)

    def build(self, log=print) -> None:
        """Rebuild everything, cached or not."""
        for directory, names, build in self._parts():
            build_staged(directory, names, build, log)

    def _build_kubernetes(self, bin_dir: Path, log, started: float) -> None:
        env = go_env()
        for target in KUBE_TARGETS:
            flags = ["-ldflags", kubernetes_ldflags(self.pins.kubernetes)] if target.kubernetes_version_stamp else []
            go_build(target, bin_dir / target.name, target.module_dir, flags, env, log, started)
        target = METRICS_SERVER_TARGET
        flags = ["-ldflags", metrics_server_ldflags(self.pins.metrics_server)]
        go_build(target, bin_dir / target.name, target.module_dir, flags, env, log, started)
        for target in KWOK_TARGETS:
            go_install(target, self.pins.kwok, bin_dir, env, log, started)

    @staticmethod
    def _companion_build(companion: Companion, version: str):
        # Most companions read their version from the module they were built from; kube-router's and the registry's are
        # stamped.
        ldflags = "-s -w" + (f" -X '{companion.version_variable}={version}'" if companion.version_variable else "")

        def build(bin_dir: Path, log, started: float) -> None:
            target = companion.target
            go_build(target, bin_dir / target.name, target.module_dir, ["-ldflags", ldflags], go_env(), log, started)

        return build


def manifest_problem(directory: Path, names: tuple[str, ...]) -> str | None:
    """Why the binaries `names` staged into the existing `directory` cannot be used, or None when intact."""
    manifest_path = directory / MANIFEST
    if not manifest_path.exists():
        return f"half-built cache at {directory} (no {MANIFEST}; an earlier build was interrupted)"
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return f"half-built cache at {directory} ({MANIFEST} is unreadable)"
    for name in names:
        entry = manifest.get("binaries", {}).get(name)
        path = directory / "bin" / name
        if entry is None or not path.exists():
            return f"half-built cache at {directory} ({name} is missing)"
        if path.stat().st_size != entry["size"] or _sha256(path) != entry["sha256"]:
            return f"damaged cache at {directory} ({name} does not match its recorded digest)"
        if not os.access(path, os.X_OK):
            return f"damaged cache at {directory} ({name} is not executable)"
    return None


def build_staged(directory: Path, names: tuple[str, ...], build, log) -> None:
    """Build into a sibling `.partial` directory, renamed into place only once every binary is in its manifest."""
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    started = time.monotonic()
    build(staging / "bin", log, started)
    manifest = {
        "binaries": {
            name: {"size": (staging / "bin" / name).stat().st_size, "sha256": _sha256(staging / "bin" / name)}
            for name in names
        },
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
    staging.rename(directory)
    log(f"lab binaries: built {len(names)} binaries in {elapsed(started)} into {directory / 'bin'}")


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    return env


def go_build(target: Target, output: Path, module_dir: Path, flags, env, log, started: float) -> None:
    total = _count_packages(target.package, module_dir, env)
    command = ["go", "build", "-v", *flags, "-o", str(output), target.package]
    run_go_with_progress(command, module_dir, env, target.name, total, log, started)


def go_install(target: Target, version: str, bin_dir: Path, env, log, started: float) -> None:
    env = dict(env, GOBIN=str(bin_dir), GOFLAGS="-buildvcs=false")
    command = ["go", "install", "-v", f"{target.package}@{version}"]
    run_go_with_progress(command, bin_dir, env, target.name, None, log, started)


def _count_packages(package: str, module_dir: Path, env) -> int | None:
    result = subprocess.run(
        ["go", "list", "-deps", package], cwd=module_dir, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise LabError(f"'go list -deps {package}' failed in {module_dir}:\n{result.stderr.strip()}")
    return len(result.stdout.splitlines())


def run_go_with_progress(command, cwd: Path, env, name: str, total: int | None, log, started: float) -> None:
    """Run a go command, turning its `-v` package lines into a progress line every few seconds."""
    log(f"lab binaries: building {name} ({' '.join(command[:3])} …)")
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    compiled, tail, last_report = 0, [], time.monotonic()
    assert process.stdout is not None
    for line in process.stdout:
        tail = ([*tail, line.rstrip()])[-40:]
        if not line.startswith("go: downloading"):
            compiled += 1
        if time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            share = f"{compiled}/{total} packages compiled" if total else f"{compiled} packages compiled"
            log(f"lab binaries: {name}: {share}, {elapsed(started)} elapsed")
    if process.wait() != 0:
        raise LabError(f"building {name} failed ({' '.join(command)}):\n" + "\n".join(tail))
    log(f"lab binaries: {name} done, {elapsed(started)} elapsed")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def elapsed(started: float) -> str:
    seconds = int(time.monotonic() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def main() -> None:
    try:
        BinaryCache().ensure()
    except LabError as error:
        sys.exit(f"error: {error}")
