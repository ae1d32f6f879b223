"""Container images built on this machine, without a registry: OCI image-layout archives.

- the pause image, compiled statically from the pause source of the pinned kubernetes module;
- a small general-purpose image from Debian's static busybox (a shell, coreutils, wget, httpd);
- busybox with the lab's kubectl, a real in-cluster API client for tests.

Each archive holds uncompressed layers built deterministically, so the same inputs give the same
digest. The real nodes' containerd imports them under the names below; pods use them with
`imagePullPolicy: IfNotPresent` or `Never`.

The controller's image (controller_image.py, `make image`) is written by the same code: its layers are
directories turned into tars by `_directory_layer`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError

PAUSE_VERSION = "3.10.2"
PAUSE_IMAGE = f"catamaran.lab/pause:{PAUSE_VERSION}"
BUSYBOX_BINARY = Path("/bin/busybox")
IMAGE_PREFIX = "catamaran.lab"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
LAB_HISTORY = ({"created_by": "catamaran-lab (built locally, no registry)"},)
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PAUSE_CONFIG = {"Entrypoint": ["/pause"], "User": "65535:65535", "Env": [PATH_ENV]}
BUSYBOX_PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
BUSYBOX_GROUP = b"root:x:0:\nnogroup:x:65534:\n"
BUSYBOX_CONFIG = {"Cmd": ["sh"], "Env": [PATH_ENV], "WorkingDir": "/"}


@dataclass(frozen=True)
class Image:
    name: str
    archive: Path


def busybox_version() -> str:
    """`1.35.0` from the installed busybox's banner."""
    try:
        banner = subprocess.run([str(BUSYBOX_BINARY)], capture_output=True, text=True, check=False).stdout
    except OSError as error:
        raise LabError(f"cannot run {BUSYBOX_BINARY} ({error}); the busybox-static package provides it") from None
    first = banner.splitlines()[0] if banner else ""
    if not first.startswith("BusyBox v"):
        raise LabError(f"{BUSYBOX_BINARY} did not print a BusyBox banner: {first!r}")
    return first.split()[1].lstrip("v")


def busybox_image_name() -> str:
    return f"{IMAGE_PREFIX}/busybox:{busybox_version()}"


def kubectl_image_name(kubernetes_version: str) -> str:
    """busybox with the lab's kubectl (static, from the pinned module): an in-cluster API client for tests."""
    return f"{IMAGE_PREFIX}/kubectl:{kubernetes_version}"


def build_images(out_dir: Path, pause_c: Path, kubectl: Path, kubernetes_version: str, log=print) -> list[Image]:
    """Write the archives into `out_dir` (a fresh directory); returns what was built."""
    out_dir.mkdir(parents=True, exist_ok=True)
    busybox = busybox_layer()
    images = [
        _write(Image(PAUSE_IMAGE, out_dir / "pause.tar"), pause_layer(pause_c), PAUSE_CONFIG),
        _write(Image(busybox_image_name(), out_dir / "busybox.tar"), busybox, BUSYBOX_CONFIG),
        _write(
            Image(kubectl_image_name(kubernetes_version), out_dir / "kubectl.tar"),
            [busybox, _layer({"usr/local/bin/kubectl": kubectl.read_bytes()}, symlinks={}, dirs={})],
            {"Entrypoint": ["kubectl"], "Env": [PATH_ENV], "WorkingDir": "/"},
            history=LAB_HISTORY * 2,
        ),
    ]
    for image in images:
        log(f"lab images: built {image.name} ({image.archive.stat().st_size // 1024} KiB)")
    return images


def pause_layer(pause_c: Path) -> bytes:
    """`/pause`, compiled statically from the pinned kubernetes module's `build/pause/linux/pause.c`."""
    with tempfile.TemporaryDirectory() as scratch:
        pause_binary = Path(scratch) / "pause"
        compile_pause = ["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_VERSION}"]
        result = subprocess.run(
            [*compile_pause, "-o", str(pause_binary), str(pause_c)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise LabError(f"compiling {pause_c} failed (gcc and libc6-dev are needed):\n{result.stderr.strip()}")
        return _layer({"pause": pause_binary.read_bytes()}, symlinks={}, dirs={})


def kubernetes_source(kubernetes_version: str, module_dir: Path) -> Path:
    """The pinned k8s.io/kubernetes module's directory in the Go module cache (downloaded if need be)."""
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{kubernetes_version}"],
        cwd=module_dir,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise LabError(f"cannot find the source of k8s.io/kubernetes@{kubernetes_version}: {result.stderr}")
    return Path(json.loads(result.stdout)["Dir"])


def busybox_layer() -> bytes:
    listing = subprocess.run([str(BUSYBOX_BINARY), "--list-full"], capture_output=True, text=True, check=True).stdout
    symlinks = {}
    for applet in listing.split():
        if applet != "bin/busybox":
            symlinks[applet] = "/bin/busybox"
    files = {
        "bin/busybox": BUSYBOX_BINARY.read_bytes(),
        "etc/passwd": BUSYBOX_PASSWD,
        "etc/group": BUSYBOX_GROUP,
    }
    dirs = {"tmp": 0o1777, "root": 0o700, "var": 0o755, "var/www": 0o755, "usr": 0o755, "proc": 0o555}
    return _layer(files, symlinks, dirs)


def _layer(
    files: dict[str, bytes], symlinks: dict[str, str], dirs: dict[str, int], modes: dict[str, int] | None = None
) -> bytes:
    """A tar with fixed owners and times, parents created, entries sorted: reproducible.

    Files are 0755 unless `modes` gives theirs (a setuid test program's 04755, a key's 0644)."""
    entries: dict[str, tuple] = {}

    def add_parents(path: str) -> None:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:depth]), ("dir", 0o755))

    for path, mode in dirs.items():
        add_parents(path)
        entries[path] = ("dir", mode)
    for path, data in files.items():
        add_parents(path)
        entries[path] = ("file", (data, (modes or {}).get(path, 0o755)))
    for path, target in symlinks.items():
        add_parents(path)
        entries[path] = ("link", target)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(entries):
            kind, value = entries[path]
            info = tarfile.TarInfo(path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, value
                archive.addfile(info)
            elif kind == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, value, 0o777
                archive.addfile(info)
            else:
                data, info.mode = value
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _directory_layer(root: Path, mtime: int) -> bytes:
    """A tar of everything under `root` (not `root` itself), reproducible as `_layer`'s: entries sorted, owners 0
    without names, times clamped to `mtime` (SOURCE_DATE_EPOCH). Modes and symlinks are kept; a hard link becomes
    a regular file of its own; a device, socket or FIFO is refused (an image has none: the runtime makes /dev)."""
    paths = []
    for directory, subdirs, filenames in os.walk(root):
        # os.walk lists a symlink to a directory among the directories, without following it.
        paths.extend(Path(directory, name) for name in (*subdirs, *filenames))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(paths, key=lambda path: path.relative_to(root).as_posix()):
            status = path.lstat()
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.mode = stat.S_IMODE(status.st_mode)
            info.mtime = min(int(status.st_mtime), mtime)
            info.uid, info.gid, info.uname, info.gname = 0, 0, "", ""
            if stat.S_ISLNK(status.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                archive.addfile(info)
            elif stat.S_ISDIR(status.st_mode):
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif stat.S_ISREG(status.st_mode):
                info.size = status.st_size
                with path.open("rb") as data:
                    archive.addfile(info, data)
            else:
                raise LabError(f"{path}: not a file, directory or symlink; an image layer cannot hold it")
    return buffer.getvalue()


def _write(
    image: Image,
    layer: bytes | list[bytes],
    container_config: dict,
    history: Sequence[dict] | None = None,
    created: str | None = None,
) -> Image:
    """One OCI image-layout archive: oci-layout, index.json and the blobs of one manifest.

    `layer` is one layer or the layers bottom first, with one `history` entry each; `created` (RFC 3339) is the
    image's creation time, left out when None (the lab's images have none)."""
    layers = [layer] if isinstance(layer, bytes) else layer
    history = LAB_HISTORY if history is None else history
    if len(history) != len(layers):
        raise ValueError(f"{len(layers)} layers but {len(history)} history entries")
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media_type: str) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer_descriptors = [blob(data, OCI_LAYER) for data in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": container_config,
        "rootfs": {"type": "layers", "diff_ids": [descriptor["digest"] for descriptor in layer_descriptors]},
        "history": list(history),
    }
    if created is not None:
        config["created"] = created
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": blob(_json(config), OCI_CONFIG),
        "layers": layer_descriptors,
    }
    manifest_descriptor = blob(_json(manifest), OCI_MANIFEST)
    tag = image.name.rsplit(":", 1)[1]
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                **manifest_descriptor,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": image.name, "org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    members = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}), "index.json": _json(index)}
    members.update({f"blobs/sha256/{digest.split(':')[1]}": data for digest, data in blobs.items()})
    with tarfile.open(image.archive, "w") as archive:
        for name in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return image


def _json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def ensure_images(cache_dir: Path, kubernetes_version: str, module_dir: Path, log=print) -> list[Image]:
    """The lab's images, built once per pinned kubernetes and busybox version into the binary cache."""
    out_dir = cache_dir / "images"
    stamp = out_dir / "images.json"
    wanted = {"pause": PAUSE_IMAGE, "busybox": busybox_image_name(), "kubectl": kubectl_image_name(kubernetes_version)}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return [Image(name, out_dir / f"{key}.tar") for key, name in wanted.items()]
    source = kubernetes_source(kubernetes_version, module_dir) / "build" / "pause" / "linux" / "pause.c"
    stamp.unlink(missing_ok=True)
    images = build_images(out_dir, source, cache_dir / "bin" / "kubectl", kubernetes_version, log)
    stamp.write_text(json.dumps(wanted))
    return images
