"""The controller's container image, built without a container engine (`make image`).

    python -m catamaran_lab.controller_image [OUTPUT_DIR]    (default: dist/); prints the archive's path

writes OUTPUT_DIR/catamaran-controller-<version>.oci.tar, an OCI image-layout archive of
ghcr.io/catamaran/controller:<version> (the controller role's default `controller_image`; the version is
galaxy.yml's, read by controller/setup.py). It holds what controller/Containerfile puts in its image, in three
layers:

1. Debian bookworm's own packages of Python 3.11 and of the libraries the dependencies' wheels load, extracted by
   `mmdebstrap --variant=extract` from this machine's apt sources. No maintainer script runs, so nothing but those
   packages' files is there: no shell, no dpkg, no apt. Manual pages, documentation and translations are left out
   (the copyright files are kept); /var/lib/dpkg/status lists the packages, for scanners.
2. /usr/bin/wireguard-go, the gateway's userspace WireGuard for kernels without it, built from the module pinned in
   lab/gomod-wireguard (as the lab's; that module's tools.go says why not Debian's).
3. /opt/catamaran, a virtual environment of the controller's wheel (built from this checkout) and its dependencies
   as requirements/constraints.txt pins them.

The same checkout and the same state of the Debian archive give a byte-identical archive: tar entries sorted, owned
by 0 without names, times clamped to SOURCE_DATE_EPOCH (default 1980-01-01, as tools/build-collection's), layers
uncompressed, no .pyc, nothing that names this machine or a time. `skopeo copy oci-archive:<archive>
docker://<registry>/catamaran/controller:<version>` pushes it.

CATAMARAN_IMAGE_APT_SOURCES names another deb822 sources file (of bookworm) than this machine's.
"""

from __future__ import annotations

import argparse
import configparser
import csv
import datetime
import hashlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from base64 import urlsafe_b64encode
from pathlib import Path

from . import images
from .binaries import BinaryCache
from .errors import LabError
from .paths import REPO_ROOT

IMAGE_REPOSITORY = "ghcr.io/catamaran/controller"
SUITE = "bookworm"
PYTHON = "3.11"  # the Containerfile's base is python:3.11-slim-bookworm; requirements/constraints.txt is made on 3.11
# What the controller and its dependencies' wheels load: Python and its standard library (libpython3.11-stdlib
# depends on libssl3, libffi8, zlib1g, libexpat1 and the rest; named for what the wheels link against).
# readline-common (through libreadline8) depends on `dpkg | install-info`: naming install-info (a 250 KiB C program)
# keeps apt from choosing dpkg, which would bring dpkg and tar (10 MiB) into an image that runs neither.
# The gateway (`catamaran gateway`, docs/network-fabric.md) drives the host's network with ip, iptables and wg; the
# Containerfile installs the same packages.
GATEWAY_PACKAGES = ("iproute2", "iptables", "wireguard-tools")
DEBIAN_PACKAGES = (
    f"python{PYTHON}-minimal",
    f"libpython{PYTHON}-stdlib",
    "libssl3",
    "libffi8",
    "zlib1g",
    "libexpat1",
    "install-info",
    *GATEWAY_PACKAGES,
)
# What update-alternatives would have linked, had a maintainer script run: iptables' nf_tables variant, the backend
# of Debian since bookworm and of the kube-proxy and CNI plugins beside it (rules of both backends in one network
# namespace work, but confuse whoever reads them).
IPTABLES_ALTERNATIVES = {
    f"usr/sbin/{name}": "xtables-nft-multi"
    for name in ("iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save")
}
WIREGUARD_GO = "wireguard-go"
# dpkg's path filters, which mmdebstrap applies to what it extracts.
PATH_FILTERS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# What mmdebstrap and apt leave for themselves, and the copies of this machine's /etc/hostname and /etc/resolv.conf:
# none of it belongs in the image. The runtime makes /dev's nodes.
NOT_IN_IMAGE = (
    "dev",
    "etc/apt",
    "etc/dpkg",
    "etc/fstab",
    "etc/hostname",
    "etc/resolv.conf",
    "var/cache/apt",
    "var/lib/apt",
    "var/lib/dpkg",
    "var/log/apt",
)
PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n"
VENV = Path("opt/catamaran")
DEFAULT_SOURCE_DATE_EPOCH = 315532800  # 1980-01-01, as tools/build-collection's
# pip's console-script template, with the image's interpreter in the shebang.
SCRIPT = """#!/{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {name}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({call}())
"""


def controller_version() -> str:
    """galaxy.yml's version, read as the controller's build reads it (controller/setup.py)."""
    spec = importlib.util.spec_from_file_location("catamaran_controller_setup", REPO_ROOT / "controller" / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)
    try:
        return setup.collection_version(REPO_ROOT / "controller")
    except setup.VersionNotFound as error:
        raise LabError(str(error)) from None


def image_reference() -> str:
    """What the archive is tagged: the controller role's default image for this version."""
    return f"{IMAGE_REPOSITORY}:{controller_version()}"


def container_config() -> dict:
    """controller/Containerfile's LABEL, ENV, USER, WORKDIR, EXPOSE, ENTRYPOINT and CMD (its base's LANG too)."""
    project = tomllib.loads((REPO_ROOT / "controller" / "pyproject.toml").read_text())["project"]
    standard_path = images.PATH_ENV.removeprefix("PATH=")
    return {
        "Entrypoint": ["catamaran"],
        "Cmd": ["--help"],
        "Env": [
            f"PATH=/{VENV}/bin:{standard_path}",
            "LANG=C.UTF-8",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ],
        # No home directory or shell needed; numeric so that runAsNonRoot can verify it.
        "User": "65532:65532",
        "WorkingDir": "/tmp",
        "ExposedPorts": {"8080/tcp": {}, "9443/tcp": {}},
        "Labels": {
            "org.opencontainers.image.title": project["name"],
            "org.opencontainers.image.description": project["description"],
            "org.opencontainers.image.version": controller_version(),
            "org.opencontainers.image.licenses": project["license"],
        },
    }


def build(output_dir: Path, log=print) -> Path:
    """Write the archive into `output_dir`; returns its path."""
    sources = Path(os.environ.get("CATAMARAN_IMAGE_APT_SOURCES", "/etc/apt/sources.list.d/debian.sources"))
    _check_tools(sources)
    version = controller_version()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_SOURCE_DATE_EPOCH))
    created = datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    output_dir.mkdir(parents=True, exist_ok=True)
    archive = output_dir / f"catamaran-controller-{version}.oci.tar"
    with tempfile.TemporaryDirectory(prefix="catamaran-image-") as scratch_name:
        scratch = Path(scratch_name)
        rootfs, tools, app = scratch / "rootfs", scratch / "tools", scratch / "app"
        started = time.monotonic()
        packages = _debian_root(rootfs, sources, epoch)
        log(f"image: {len(packages)} Debian packages extracted ({time.monotonic() - started:.0f} s)")
        wireguard_go = BinaryCache().ensure_companion(WIREGUARD_GO, log)
        (tools / "usr/bin").mkdir(parents=True)
        shutil.copy2(wireguard_go, tools / "usr/bin" / WIREGUARD_GO)
        started = time.monotonic()
        wheel = _controller_wheel(scratch, epoch)
        installed = _virtual_environment(app / VENV, wheel, packages, epoch)
        log(f"image: {len(installed)} Python distributions installed in /{VENV} ({time.monotonic() - started:.0f} s)")
        layers = [images._directory_layer(directory, epoch) for directory in (rootfs, tools, app)]
    history = [
        {"created": created, "created_by": f"mmdebstrap --variant=extract {SUITE}: {' '.join(DEBIAN_PACKAGES)}"},
        {"created": created, "created_by": f"go build {WIREGUARD_GO} (lab/gomod-wireguard/go.mod)"},
        {
            "created": created,
            "created_by": f"pip install --target /{VENV}/lib/python{PYTHON}/site-packages: "
            f"catamaran-controller {version}, dependencies pinned by requirements/constraints.txt",
        },
    ]
    partial = archive.with_name(archive.name + ".partial")
    images._write(images.Image(image_reference(), partial), layers, container_config(), history, created)
    partial.replace(archive)
    sizes = " + ".join(f"{len(layer) / 2**20:.1f} MiB" for layer in layers)
    log(f"image: {image_reference()} in {archive} ({archive.stat().st_size / 2**20:.1f} MiB; layers {sizes})")
    return archive


def _check_tools(sources: Path) -> None:
    missing = [f"{tool} (Debian package {package})" for tool, package in _TOOLS.items() if not shutil.which(tool)]
    if missing:
        raise LabError(
            f"building the image needs {', '.join(missing)}: install them with `apt-get install "
            f"{' '.join(_TOOLS[tool.split()[0]] for tool in missing)}` (`make lab-build` installs them too)"
        )
    for module in ("build", "pip"):
        if importlib.util.find_spec(module) is None:
            raise LabError(f"the Python module {module!r} is missing from {sys.executable}'s environment: `make setup`")
    if not sources.is_file():
        raise LabError(f"no apt sources at {sources}: set CATAMARAN_IMAGE_APT_SOURCES to a deb822 file of {SUITE}")
    suites = re.findall(r"^Suites:(.*)$", sources.read_text(), re.MULTILINE)
    if not any(SUITE in line.split() for line in suites):
        raise LabError(
            f"{sources} has no {SUITE} suite (the image is Debian {SUITE}'s, as the Containerfile's "
            f"python:{PYTHON}-slim-{SUITE}): set CATAMARAN_IMAGE_APT_SOURCES to a deb822 file of {SUITE}"
        )


_TOOLS = {"mmdebstrap": "mmdebstrap", "dpkg-deb": "dpkg"}


def _run(command: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise LabError(f"{what} failed ({' '.join(command[:3])} ... exited {result.returncode}):\n{tail}")
    return result


def _debian_root(rootfs: Path, sources: Path, epoch: int) -> dict[str, dict[str, str]]:
    """The packages' files in `rootfs`; returns their control fields by package name."""
    command = [
        "mmdebstrap",
        "--variant=extract",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        *(f"--dpkgopt={option}" for option in PATH_FILTERS),
        # The downloaded packages stay until their control fields are read (below).
        "--skip=cleanup/apt/cache",
        SUITE,
        str(rootfs),
        str(sources),
    ]
    _run(command, "mmdebstrap", env=dict(os.environ, SOURCE_DATE_EPOCH=str(epoch)))
    packages = {}
    for deb in sorted((rootfs / "var/cache/apt/archives").glob("*.deb")):
        control = _run(["dpkg-deb", "--field", str(deb)], f"reading {deb.name}").stdout
        fields = dict(re.findall(r"^([A-Za-z0-9-]+): ?(.*)$", control, re.MULTILINE))
        packages[fields["Package"]] = {"control": control, **fields}
    for path in NOT_IN_IMAGE:
        target = rootfs / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    for path, mode in (("dev", 0o755), ("proc", 0o555), ("sys", 0o555), ("tmp", 0o1777), ("var/lib/dpkg", 0o755)):
        (rootfs / path).mkdir(parents=True, exist_ok=True)
        (rootfs / path).chmod(mode)
    # The packages as dpkg would list them had it installed them (their scripts never ran; none is needed).
    status = "\n".join(
        re.sub(r"^(Package: .*\n)", r"\1Status: install ok installed\n", packages[name]["control"], count=1)
        for name in sorted(packages)
    )
    (rootfs / "var/lib/dpkg/status").write_text(status)
    for link, target in IPTABLES_ALTERNATIVES.items():
        (rootfs / link).symlink_to(target)
    (rootfs / "etc/passwd").write_text(PASSWD)
    (rootfs / "etc/group").write_text(GROUP)
    return packages


def _controller_wheel(scratch: Path, epoch: int) -> Path:
    """The controller's wheel, built as tools/build-collection builds it: from a copy of controller/ and galaxy.yml."""
    source = scratch / "source"
    shutil.copytree(
        REPO_ROOT / "controller", source / "controller", ignore=shutil.ignore_patterns("build", "*.egg-info", ".*")
    )
    shutil.copy2(REPO_ROOT / "galaxy.yml", source / "galaxy.yml")
    wheels = scratch / "wheels"
    build_wheel = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(wheels)]
    _run(
        [*build_wheel, str(source / "controller")],
        "building the controller's wheel",
        env=dict(os.environ, SOURCE_DATE_EPOCH=str(epoch)),
    )
    (wheel,) = wheels.glob("catamaran_controller-*.whl")
    return wheel


def _virtual_environment(venv: Path, wheel: Path, packages: dict, epoch: int) -> list[str]:
    """A virtual environment of the image's Python at `venv`, made from this machine.

    The image's Python never runs: this machine's pip installs the wheels (only wheels, so nothing is compiled) for
    the image's interpreter and C library, named explicitly (CPython 3.11, x86_64, manylinux up to the glibc of the
    extracted libc6), then the pieces a venv would have are written. No root, chroot or emulation is needed, and
    nothing of the build runs inside the image. Returns the installed distributions.
    """
    python_version = packages[f"python{PYTHON}-minimal"]["Version"].split("-")[0]  # 3.11.2-6+deb12u9
    glibc_major, glibc_minor = (int(part) for part in packages["libc6"]["Version"].split("-")[0].split(".")[:2])
    if glibc_major != 2:
        raise LabError(f"unexpected libc6 version {packages['libc6']['Version']}")
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(glibc_minor, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    site = venv / "lib" / f"python{PYTHON}" / "site-packages"
    short = PYTHON.replace(".", "")
    result = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--no-compile",
            "--only-binary=:all:",
            *(f"--platform={platform}" for platform in platforms),
            f"--python-version={PYTHON}",
            "--implementation=cp",
            f"--abi=cp{short}",
            f"--target={site}",
            f"--constraint={REPO_ROOT / 'requirements' / 'constraints.txt'}",
            str(wheel),
        ],
        "installing the controller's wheel and its dependencies (pip)",
        env=dict(os.environ, SOURCE_DATE_EPOCH=str(epoch)),
    )
    installed = re.findall(r"^Successfully installed (.*)$", result.stdout, re.MULTILINE)
    # pip --target put the scripts in site-packages/bin, with this machine's interpreter in their shebangs.
    shutil.rmtree(site / "bin", ignore_errors=True)
    (venv / "bin").mkdir()
    for dist_info in sorted(site.glob("*.dist-info")):
        _venv_scripts(venv, dist_info)
    (venv / "bin" / "python").symlink_to(f"/usr/bin/python{PYTHON}")
    (venv / "bin" / "python3").symlink_to("python")
    (venv / "bin" / f"python{PYTHON}").symlink_to("python")
    (venv / "lib64").symlink_to("lib")
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {python_version}\n"
    )
    compiled = sorted(str(path.relative_to(venv)) for path in venv.rglob("*.pyc"))
    if compiled:
        raise LabError(f"compiled files in the virtual environment, which would not be reproducible: {compiled[:5]}")
    return installed[0].split() if installed else []


def _venv_scripts(venv: Path, dist_info: Path) -> None:
    """The distribution's console scripts in venv/bin, and its RECORD naming them there (without direct_url.json,
    which holds the wheel's temporary path)."""
    (dist_info / "direct_url.json").unlink(missing_ok=True)
    written = {}
    entry_points = dist_info / "entry_points.txt"
    if entry_points.is_file():
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read_string(entry_points.read_text())
        scripts = parser["console_scripts"] if parser.has_section("console_scripts") else {}
        for name, value in scripts.items():
            module, _, attribute = value.split("[")[0].strip().partition(":")
            text = SCRIPT.format(
                python=f"{VENV}/bin/python", module=module, name=attribute.split(".")[0], call=attribute
            )
            script = venv / "bin" / name
            script.write_text(text)
            script.chmod(0o755)
            digest = urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            written[f"../../../bin/{name}"] = [f"../../../bin/{name}", f"sha256={digest}", str(len(text.encode()))]
    record = dist_info / "RECORD"
    with record.open(newline="") as stream:
        rows = [
            row
            for row in csv.reader(stream)
            if not row[0].startswith("../../bin/") and row[0] != f"{dist_info.name}/direct_url.json"
        ]
    buffer = io.StringIO()
    csv.writer(buffer).writerows(sorted([*rows, *written.values()]))
    record.write_text(buffer.getvalue(), newline="")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m catamaran_lab.controller_image",
        description="Build the controller's image without a container engine: an OCI image-layout archive.",
    )
    parser.add_argument("output_dir", nargs="?", type=Path, default=REPO_ROOT / "dist")
    args = parser.parse_args(argv)
    try:
        archive = build(args.output_dir.resolve(), log=lambda message: print(message, file=sys.stderr, flush=True))
    except LabError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
