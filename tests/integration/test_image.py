"""The controller's image as `make image` builds it without a container engine, against controller/Containerfile.

No lab is needed: the archive is built twice (about 20 s each, with PyPI and a Debian mirror reachable) into a
temporary directory, read as an OCI image layout, inspected and copied by skopeo, and its entry point is run in a
chroot of its layers. What the Containerfile says is read from its text.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from catamaran_lab import controller_image
from catamaran_lab.paths import REPO_ROOT

pytestmark = pytest.mark.integration

CONTAINERFILE = REPO_ROOT / "controller" / "Containerfile"
SITE_PACKAGES = re.compile(r"^opt/catamaran/lib/python3\.\d+/site-packages/([^/]+)\.dist-info/METADATA$")
SHELLS = ("sh", "bash", "dash", "busybox", "ash", "zsh")
MAX_SIZE = 150 * 2**20


@dataclass(frozen=True)
class Build:
    archive: Path
    seconds: float
    log: str


@dataclass(frozen=True)
class Image:
    archive: Path
    index: dict
    config: dict
    layers: list[bytes]
    files: dict[str, tarfile.TarInfo]  # the merged file system: the last layer holding a path wins
    contents: dict[str, bytes]  # regular files' contents, merged likewise

    def text(self, path: str) -> str:
        return self.contents[path].decode()


def build(output: Path) -> Build:
    """`make image`'s command, into `output`."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "catamaran_lab.controller_image", str(output)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise AssertionError(f"building the image failed:\n{result.stdout}{result.stderr}")
    return Build(Path(result.stdout.strip().splitlines()[-1]), time.monotonic() - started, result.stderr)


@pytest.fixture(scope="module")
def builds(tmp_path_factory, pytestconfig) -> list[Build]:
    first, second = build(tmp_path_factory.mktemp("image")), build(tmp_path_factory.mktemp("image"))
    with pytestconfig.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\n{first.log.strip()}\nimage: built in {first.seconds:.0f} s, again in {second.seconds:.0f} s")
    return [first, second]


@pytest.fixture(scope="module")
def image(builds) -> Image:
    return read_image(builds[0].archive)


@pytest.fixture(scope="module")
def version() -> str:
    match = re.search(r"^version:\s*(\S+)\s*$", (REPO_ROOT / "galaxy.yml").read_text(), re.MULTILINE)
    assert match
    return match.group(1)


def read_image(archive: Path) -> Image:
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> bytes:
            member = outer.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            data = member.read()
            assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
            return data

        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layers = [blob(layer["digest"]) for layer in manifest["layers"]]
    files, contents = {}, {}
    for layer in layers:
        with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
            for member in tar.getmembers():
                files[member.name] = member
                if member.isfile():
                    contents[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    return Image(archive, index, config, layers, files, contents)


def containerfile() -> dict:
    """The final stage's instructions (continuation lines joined), and the ARG defaults before the first FROM."""
    lines = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text()).splitlines()
    instructions = [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.strip().partition(" ") for line in lines)
        if keyword and not keyword.startswith("#")
    ]
    first_from = next(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    arguments = dict(argument.split("=", 1) for keyword, argument in instructions[:first_from] if keyword == "ARG")
    final: dict[str, list[str]] = {}
    for keyword, rest in instructions[last_from:]:
        final.setdefault(keyword, []).append(rest)
    return {"args": arguments, **final}


def test_builds_reproducibly(builds):
    digests = [hashlib.sha256(build.archive.read_bytes()).hexdigest() for build in builds]
    assert digests[0] == digests[1], f"two builds of one checkout differ: {digests}"


def test_layers_are_normalized_and_small(image):
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", 315532800))
    for layer in image.layers:
        with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
            members = archive.getmembers()
        names = [member.name for member in members]
        assert names == sorted(names)
        assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
        assert max(member.mtime for member in members) <= epoch
        assert not [m.name for m in members if not (m.isfile() or m.isdir() or m.issym())]
    sizes = [len(layer) for layer in image.layers]
    assert sum(sizes) <= MAX_SIZE, f"layers of {[f'{size / 2**20:.1f} MiB' for size in sizes]}"


def test_no_shell_no_package_manager_no_bytecode(image):
    names = set(image.files)
    for directory in ("bin", "usr/bin", "sbin", "usr/sbin", "usr/local/bin"):
        assert not {f"{directory}/{shell}" for shell in SHELLS} & names
        assert not {f"{directory}/{tool}" for tool in ("apt", "apt-get", "dpkg", "pip", "pip3")} & names
    assert not [name for name in names if name.endswith((".pyc", "direct_url.json"))]
    assert not [name for name in names if name.startswith(("usr/share/man/", "usr/share/locale/", "dev/"))]
    assert image.files["tmp"].mode == 0o1777
    assert "nonroot:x:65532:65532:" in image.text("etc/passwd")


def test_config_is_the_containerfiles(image, version):
    file = containerfile()
    config = image.config["config"]
    assert config["Entrypoint"] == json.loads(file["ENTRYPOINT"][-1])
    assert config["Cmd"] == json.loads(file["CMD"][-1])
    assert config["User"] == file["USER"][-1]
    assert config["WorkingDir"] == file["WORKDIR"][-1]
    exposed = {f"{port}/tcp" if "/" not in port else port for line in file["EXPOSE"] for port in line.split()}
    assert set(config["ExposedPorts"]) == exposed
    labels = dict(token.split("=", 1) for line in file["LABEL"] for token in shlex.split(line))
    assert config["Labels"] == {key: value.replace("${VERSION}", version) for key, value in labels.items()}
    image_env = dict(entry.split("=", 1) for entry in config["Env"])
    for key, value in (token.split("=", 1) for line in file["ENV"] for token in shlex.split(line)):
        if "$PATH" in value:  # the base image's PATH differs (python's puts /usr/local/bin first); the prefix counts
            prefix = value.split("$PATH")[0]
            assert image_env[key].startswith(prefix)
            assert "/usr/bin" in image_env[key].removeprefix(prefix).split(":")
        else:
            assert image_env[key] == value, key
    descriptor = image.index["manifests"][0]
    assert descriptor["annotations"]["io.containerd.image.name"] == f"ghcr.io/catamaran/controller:{version}"
    assert descriptor["annotations"]["org.opencontainers.image.ref.name"] == version
    defaults = (REPO_ROOT / "roles" / "controller" / "defaults" / "main.yml").read_text()
    assert "controller_image: ghcr.io/catamaran/controller:{{ controller__collection_version }}" in defaults


def test_python_is_the_containerfiles(image):
    base = containerfile()["args"]["PYTHON_IMAGE"]
    match = re.search(r"python:(\d+\.\d+)-slim-(\w+)$", base)
    assert match, base
    python, suite = match.groups()
    assert image.files[f"usr/bin/python{python}"].isfile()
    status = image.text("var/lib/dpkg/status")
    package = re.search(rf"^Package: python{re.escape(python)}-minimal\n(?:.+\n)*?Version: (\S+)$", status, re.M)
    assert package, f"python{python}-minimal is not in /var/lib/dpkg/status"
    assert package.group(1).startswith(f"{python}."), package.group(1)
    assert f"--variant=extract {suite}:" in image.config["history"][0]["created_by"]
    venv = image.text("opt/catamaran/pyvenv.cfg")
    assert "home = /usr/bin\n" in venv
    assert f"version = {python}." in venv
    assert image.files["opt/catamaran/bin/python"].linkname == f"/usr/bin/python{python}"


def test_distributions_are_the_constraints_pins(image, version):
    installed = {}
    for name in image.contents:
        match = SITE_PACKAGES.match(name)
        if match:
            metadata = HeaderParser().parsestr(image.text(name))
            requires = metadata.get_all("Requires-Dist", [])
            installed[canonicalize_name(metadata["Name"])] = (metadata["Version"], requires)
    pins = {}
    for line in (REPO_ROOT / "requirements" / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, pin = line.split("#")[0].split("==")
            pins[canonicalize_name(name)] = pin.strip()
    # The closure of the controller's declared dependencies, extras included, for CPython 3.11 on Linux.
    project = tomllib.loads((REPO_ROOT / "controller" / "pyproject.toml").read_text())["project"]
    python = re.search(r"^version = (\d+)\.(\d+)\.(\d+)$", image.text("opt/catamaran/pyvenv.cfg"), re.MULTILINE)
    assert python
    environment = {
        **default_environment(),
        "python_version": ".".join(python.groups()[:2]),
        "python_full_version": ".".join(python.groups()),
    }
    pending = [Requirement(text) for text in project["dependencies"]]
    closure: set[str] = set()
    seen = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        closure.add(name)
        assert name in installed, f"{requirement} is needed but not in the image"
        for text in installed[name][1]:
            dependency = Requirement(text)
            extras = requirement.extras or {""}
            if dependency.marker is None or any(
                dependency.marker.evaluate({**environment, "extra": extra}) for extra in extras
            ):
                pending.append(dependency)
    expected = {name: pins.get(name, "(not pinned)") for name in closure}
    expected["catamaran-controller"] = version
    assert {name: found for name, (found, _) in installed.items()} == expected
    controller_requires = {Requirement(text).name for text in installed["catamaran-controller"][1]}
    assert controller_requires == {Requirement(text).name for text in project["dependencies"]}


def test_entry_point_is_the_controllers_console_script(image):
    scripts = tomllib.loads((REPO_ROOT / "controller" / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["catamaran"].split(":")
    script = image.text("opt/catamaran/bin/catamaran")
    assert script.startswith("#!/opt/catamaran/bin/python\n")
    assert f"from {module} import {function}\n" in script
    assert image.files["opt/catamaran/bin/catamaran"].mode == 0o755


def test_skopeo_reads_and_copies_it(image, version, tmp_path):
    skopeo = shutil.which("skopeo")
    assert skopeo, "skopeo is not installed (Debian package skopeo; `make lab-build` installs it)"
    reference = f"oci-archive:{image.archive}:{version}"
    inspected = subprocess.run([skopeo, "inspect", reference], capture_output=True, text=True, timeout=120)
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    assert report["Labels"]["org.opencontainers.image.version"] == version
    assert (report["Architecture"], report["Os"]) == ("amd64", "linux")
    assert len(report["Layers"]) == len(image.layers)
    wrong = subprocess.run([skopeo, "inspect", f"{reference}-no"], capture_output=True, timeout=120)
    assert wrong.returncode != 0, "skopeo found a tag the archive does not hold"
    # As a push does (to docker://... instead): every blob read and checked against its digest.
    copied = subprocess.run(
        [skopeo, "copy", "--insecure-policy", "--quiet", reference, f"dir:{tmp_path / 'copy'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert copied.returncode == 0, copied.stderr


@pytest.fixture(scope="module")
def unpacked(image, tmp_path_factory) -> Path:
    """The image's layers extracted in order."""
    root = tmp_path_factory.mktemp("image-root") / "root"
    root.mkdir(mode=0o755)
    for layer in image.layers:
        with tarfile.open(fileobj=io.BytesIO(layer)) as archive:
            archive.extractall(root, filter="fully_trusted")  # our own archive; its absolute symlinks stay
    return root


def in_chroot(image, root: Path, *argv: str, user: str | None = None) -> subprocess.CompletedProcess:
    """`argv` run in a chroot of the image, as `user` (the image's by default), with its environment."""
    config = image.config["config"]
    chroot = shutil.which("chroot")
    assert chroot
    if os.geteuid() == 0:
        command = [chroot, f"--userspec={user or config['User']}", str(root)]
    else:
        unshare = shutil.which("unshare")
        assert unshare, "neither root nor unshare (util-linux): the chroot cannot be made"
        command = [unshare, "--map-root-user", chroot, str(root)]
    environment = dict(entry.split("=", 1) for entry in config["Env"])
    return subprocess.run([*command, *argv], env=environment, capture_output=True, text=True, timeout=120)


def test_the_gateways_tools_are_the_containerfiles_and_run(image, unpacked):
    """`catamaran gateway` runs ip, iptables (nf_tables, as the nodes' kube-proxy and CNI) and wg, and wireguard-go
    where the kernel has no WireGuard: as the Containerfile installs them, and each runs in the image."""
    installs = [run for run in containerfile()["RUN"] if "apt-get install" in run]
    assert len(installs) == 1, installs
    named = re.search(r"apt-get install -y --no-install-recommends ([^&]+)", installs[0])
    assert named, installs[0]
    assert tuple(named.group(1).split()) == controller_image.GATEWAY_PACKAGES
    assert "COPY --from=wireguard /wireguard-go /usr/bin/wireguard-go" in [f"COPY {c}" for c in containerfile()["COPY"]]
    expected = {
        ("ip", "-V"): "ip utility, iproute2-",
        ("iptables", "--version"): "(nf_tables)",
        ("iptables-restore", "--version"): "(nf_tables)",
        ("wg", "--version"): "wireguard-tools v",
        ("wireguard-go", "--version"): "wireguard-go v",
    }
    for argv, seen in expected.items():
        result = in_chroot(image, unpacked, *argv, user="0:0")
        assert result.returncode == 0, (argv, result.stderr)
        assert seen in result.stdout + result.stderr, (argv, result.stdout, result.stderr)


def test_entry_point_runs_as_nonroot_without_an_engine(image, unpacked):
    """The image's entry point run in a chroot of its layers, as its user."""
    config = image.config["config"]
    result = in_chroot(image, unpacked, *config["Entrypoint"], *config["Cmd"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: catamaran ")
    assert "{manager,virtual-kubelet,gateway,route-agent}" in result.stdout
