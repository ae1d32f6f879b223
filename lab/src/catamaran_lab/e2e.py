"""The upstream Kubernetes e2e suite and the test images it runs, built from the pinned module without a registry.

`e2e.test` is `go test -c k8s.io/kubernetes/test/e2e` in the lab's wrapper module, lab/gomod: its go.mod holds
the one kubernetes pin, its go.sum also the few checksums only the suite needs (binaries.E2E_ONLY_MODULES; they
do not key the lab's binary cache, and `go mod tidy` would drop them: tools.go anchors only the lab's commands).

The images carry the upstream names `e2e.test --list-images` prints, every tag of a repository built here, so the
suite's pods (imagePullPolicy IfNotPresent) find them on the real nodes and nothing is pulled:

- agnhost: test/images/agnhost of the pinned module over the lab's busybox, laid out as upstream's Dockerfile
  (/agnhost, /agnhost-2, /uploads, porter's localhost certificate, the user and group defined in the image);
  upstream's Alpine base also has bash, curl, dig, iperf and CoreDNS, which this one lacks;
- busybox: the lab's (Debian's static busybox);
- pause: the lab's pause, compiled from the pinned module;
- nonewprivs: test/images/nonewprivs' `nnp`, setuid, over busybox;
- nonroot: busybox whose user is 1234.

The other listed images (nginx, the CSI sidecars, ...) are not provided: their tests cannot run in the lab.
All is built on demand only (`catamaran-lab e2e-build`, `ensure_e2e`): minutes the lab's default build does not
pay. It lands in `e2e/` of the kubernetes binary cache directory, so it follows the pins and goes with them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .binaries import (
    BinaryCache,
    Target,
    build_staged,
    elapsed,
    go_build,
    go_env,
    go_install,
    kubernetes_ldflags,
    manifest_problem,
    run_go_with_progress,
)
from .errors import LabError
from .images import (
    BUSYBOX_CONFIG,
    BUSYBOX_GROUP,
    BUSYBOX_PASSWD,
    PATH_ENV,
    PAUSE_CONFIG,
    Image,
    _layer,
    _write,
    busybox_layer,
    busybox_version,
    kubernetes_source,
    pause_layer,
)
from .paths import GO_MODULE_DIR
from .preflight import check_disk, check_go

E2E_DIR = "e2e"
IMAGES_DIR = "images"
IMAGES_STAMP = "images.json"
E2E_PACKAGE = "k8s.io/kubernetes/test/e2e"
TEST_BINARY = "e2e.test"
AGNHOST = Target("agnhost", "k8s.io/kubernetes/test/images/agnhost")
NONEWPRIVS = Target("nnp", "k8s.io/kubernetes/test/images/nonewprivs")
# The CLI that runs e2e.test in parallel processes, at the version the pinned kubernetes module requires.
GINKGO_MODULE = "github.com/onsi/ginkgo/v2"
GINKGO = Target("ginkgo", f"{GINKGO_MODULE}/ginkgo")
E2E_BINARIES = (TEST_BINARY, AGNHOST.name, NONEWPRIVS.name, GINKGO.name)
# The module cache holds the suite's sources already; the build cache and e2e.test (150 MB) need the rest.
E2E_BUILD_DISK_BYTES = 4 * 1024**3

E2E_REGISTRY = "registry.k8s.io/e2e-test-images"
# Upstream repositories built here, by the recipe of that name (see `_recipes`).
RECIPES = {
    f"{E2E_REGISTRY}/agnhost": "agnhost",
    f"{E2E_REGISTRY}/busybox": "busybox",
    f"{E2E_REGISTRY}/nonewprivs": "nonewprivs",
    f"{E2E_REGISTRY}/nonroot": "nonroot",
    "registry.k8s.io/pause": "pause",
}
# Marks each image with its own name: two tags of one build (agnhost's current and previous) get distinct image
# IDs, as upstream's do; containerd would report either tag for a shared ID and a test would see the wrong image.
NAME_LABEL = "io.catamaran.lab.upstream-image"


@dataclass(frozen=True)
class E2EBuild:
    """What the conformance run needs: the suite's binary and the images to import into the real nodes."""

    dir: Path
    test_binary: Path
    ginkgo: Path
    images: list[Image]
    not_provided: list[str] = field(default_factory=list)  # listed by e2e.test, not buildable here


def e2e_dir(cache: BinaryCache) -> Path:
    return cache.dir / E2E_DIR


def ensure_e2e(cache: BinaryCache | None = None, log=print) -> E2EBuild:
    """Build e2e.test, agnhost and nnp, then the images, unless they are there for the same pins."""
    cache = cache or BinaryCache()
    cache.ensure(log)  # e2e/ lives in the kubernetes cache directory, which a rebuild of the lab replaces
    directory = e2e_dir(cache)
    problem = manifest_problem(directory, E2E_BINARIES) if directory.exists() else "not built yet"
    if problem:
        check_go(cache.pins.go_minimum)
        check_disk(cache.root, E2E_BUILD_DISK_BYTES, "building e2e.test and the e2e test images")
        log(f"e2e: {problem}; building into {directory}")
        version = cache.pins.kubernetes
        build_staged(directory, E2E_BINARIES, lambda bin_dir, log, started: _build(version, bin_dir, log, started), log)
    test_binary = directory / "bin" / TEST_BINARY
    listed = listed_images(test_binary)
    images = _ensure_images(directory, cache.pins.kubernetes, listed, log)
    return E2EBuild(directory, test_binary, directory / "bin" / GINKGO.name, images, not_provided(listed))


def built_images(cache: BinaryCache) -> list[Image]:
    """The e2e images already built for these pins (none if never built): what `up` imports, without building."""
    out_dir = e2e_dir(cache) / IMAGES_DIR
    try:
        stamp = json.loads((out_dir / IMAGES_STAMP).read_text())
    except (OSError, json.JSONDecodeError):
        return []
    images = [Image(name, out_dir / archive_name(name)) for name in stamp["provided"]]
    return images if all(image.archive.exists() for image in images) else []


# -- names ------------------------------------------------------------------------------


def listed_images(test_binary: Path) -> list[str]:
    """The images the suite may run, as `e2e.test --list-images` prints them (one per line)."""
    result = subprocess.run(
        [str(test_binary), "--list-images"], capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise LabError(f"{test_binary} --list-images failed: {result.stderr.strip()[-2000:]}")
    return parse_image_list(result.stdout)


def parse_image_list(output: str) -> list[str]:
    """Image references among the lines, sorted and unique: anything else the binary prints is left out."""
    reference = re.compile(r"^[a-z0-9][a-z0-9.-]*(:[0-9]+)?(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$")
    return sorted({line.strip() for line in output.splitlines() if reference.match(line.strip())})


def repository(name: str) -> str:
    return name.rsplit(":", 1)[0]


def provided(listed: Iterable[str]) -> dict[str, str]:
    """Listed image -> the recipe building it, for the listed images of the repositories in RECIPES."""
    return {name: RECIPES[repository(name)] for name in sorted(listed) if repository(name) in RECIPES}


def not_provided(listed: Iterable[str]) -> list[str]:
    return sorted(name for name in listed if repository(name) not in RECIPES)


def archive_name(name: str) -> str:
    """`registry.k8s.io/e2e-test-images/agnhost:2.63.0` -> `registry.k8s.io_e2e-test-images_agnhost_2.63.0.tar`."""
    return re.sub(r"[/:]", "_", name) + ".tar"


def images_stamp(listed: Iterable[str], busybox: str) -> dict:
    """What the built images depend on beyond the binaries beside them: rebuilt when it changes."""
    return {"provided": provided(listed), "busybox": busybox}


# -- build ------------------------------------------------------------------------------


def _build(kubernetes_version: str, bin_dir: Path, log, started: float) -> None:
    env = go_env()
    # `go test -c` names no package as it compiles them: no progress until done (about 6 min cold, 10 s warm).
    command = ["go", "test", "-c", "-ldflags", kubernetes_ldflags(kubernetes_version)]
    command += ["-o", str(bin_dir / TEST_BINARY), E2E_PACKAGE]
    run_go_with_progress(command, GO_MODULE_DIR, env, TEST_BINARY, None, log, started)
    for target in (AGNHOST, NONEWPRIVS):
        go_build(target, bin_dir / target.name, GO_MODULE_DIR, ["-ldflags", "-s -w"], env, log, started)
    go_install(GINKGO, ginkgo_version(kubernetes_version), bin_dir, env, log, started)


def ginkgo_version(kubernetes_version: str) -> str:
    """The Ginkgo version the pinned kubernetes module requires (its test dependency: not in lab/gomod's graph)."""
    go_mod = kubernetes_source(kubernetes_version, GO_MODULE_DIR) / "go.mod"
    found = re.search(rf"^\s*{re.escape(GINKGO_MODULE)} (v\S+)", go_mod.read_text(), re.MULTILINE)
    if found is None:
        raise LabError(f"{go_mod} requires no {GINKGO_MODULE}: cannot pick the Ginkgo CLI's version")
    return found.group(1)


def _ensure_images(directory: Path, kubernetes_version: str, listed: list[str], log) -> list[Image]:
    out_dir = directory / IMAGES_DIR
    stamp_path = out_dir / IMAGES_STAMP
    wanted = images_stamp(listed, busybox_version())
    images = [Image(name, out_dir / archive_name(name)) for name in wanted["provided"]]
    built = stamp_path.exists() and json.loads(stamp_path.read_text()) == wanted
    if built and all(image.archive.exists() for image in images):
        return images
    started = time.monotonic()
    stamp_path.unlink(missing_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    recipes = _recipes(directory / "bin", kubernetes_source(kubernetes_version, GO_MODULE_DIR))
    for image in images:
        layers, config = recipes[wanted["provided"][image.name]]()
        config = {**config, "Labels": {NAME_LABEL: image.name}}
        _write(image, layers, config, history=[{"created_by": "catamaran-lab e2e (built locally)"}] * len(layers))
        log(f"e2e: built {image.name} ({image.archive.stat().st_size / 1024**2:.1f} MiB)")
    stamp_path.write_text(json.dumps(wanted, indent=2))
    log(f"e2e: {len(images)} images in {elapsed(started)} into {out_dir}")
    return images


def _recipes(bin_dir: Path, kubernetes: Path) -> dict[str, Callable[[], tuple[list[bytes], dict]]]:
    """Each recipe's layers (bottom first) and container configuration; layers are made once and shared."""
    made: dict[str, bytes] = {}

    def once(key: str, make: Callable[[], bytes]) -> bytes:
        if key not in made:
            made[key] = make()
        return made[key]

    def busybox() -> bytes:
        return once("busybox", busybox_layer)

    def agnhost() -> tuple[list[bytes], dict]:
        layer = once("agnhost", lambda: _agnhost_layer(bin_dir / AGNHOST.name, kubernetes))
        ports = {f"{port}/tcp": {} for port in (80, 8080, 8081, 9376, 5000)}
        config = {"Entrypoint": ["/agnhost"], "Cmd": ["pause"], "Env": [PATH_ENV], "WorkingDir": "/"}
        return [busybox(), layer], {**config, "ExposedPorts": ports}

    def nonewprivs() -> tuple[list[bytes], dict]:
        nnp = "usr/local/bin/nnp"
        layer = once("nnp", lambda: _layer({nnp: (bin_dir / NONEWPRIVS.name).read_bytes()}, {}, {}, {nnp: 0o4755}))
        return [busybox(), layer], {"Cmd": ["nnp"], "Env": [PATH_ENV], "WorkingDir": "/"}

    return {
        "agnhost": agnhost,
        "busybox": lambda: ([busybox()], BUSYBOX_CONFIG),
        "nonewprivs": nonewprivs,
        "nonroot": lambda: ([busybox()], {**BUSYBOX_CONFIG, "User": "1234"}),
        "pause": lambda: ([once("pause", lambda: pause_layer(kubernetes / "build/pause/linux/pause.c"))], PAUSE_CONFIG),
    }


def _agnhost_layer(agnhost: Path, kubernetes: Path) -> bytes:
    """What upstream's agnhost Dockerfile adds to its base, less the Alpine packages and the fake registry."""
    porter = kubernetes / "test/images/agnhost/porter"
    files = {
        "agnhost": agnhost.read_bytes(),
        "localhost.crt": (porter / "localhost.crt").read_bytes(),
        "localhost.key": (porter / "localhost.key").read_bytes(),
        # Security context tests run as uid 1000 and expect the image's group 50000 among its groups.
        "etc/passwd": BUSYBOX_PASSWD + b"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
        "etc/group": BUSYBOX_GROUP
        + b"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n",
    }
    modes = {"localhost.crt": 0o644, "localhost.key": 0o644, "etc/passwd": 0o644, "etc/group": 0o644}
    return _layer(files, symlinks={"agnhost-2": "agnhost"}, dirs={"uploads": 0o755}, modes=modes)
