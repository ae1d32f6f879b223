"""The lab's OCI registry: CNCF Distribution's `registry` (lab/gomod-registry), one per lab with real nodes.

`Lab.up` starts it before the clusters, so every real node's containerd starts trusting it (nodeconfig.RegistryTrust):
HTTPS with a serving certificate from a CA of its own, basic auth against an htpasswd file (bcrypt, made by
`htpasswd -B` of Debian's apache2-utils), storage on the filesystem. It listens on every address of the host at
basePort + 1: pushes go to 127.0.0.1, and each real node reaches it at the host's end of its link (ClusterSpec's
`real_node.host_ip`), the addresses its certificate names. Nodes hold no credentials: pods pull with an
imagePullSecret, as from any private registry. Everything lives under `<lab root>/registry/`, and the process runs
there, so `Lab.down` finds and stops it with the lab's other processes.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import host, pki
from .errors import LabError
from .images import Image

DIR = "registry"
USERNAME = "catamaran"
REALM = "catamaran-lab registry"
HTPASSWD = "/usr/bin/htpasswd"  # Debian's apache2-utils (packages.py)
BCRYPT_COST = 10
START_TIMEOUT_S = 30
PUSH_TIMEOUT_S = 300


@dataclass(frozen=True)
class RegistryLayout:
    """Where the registry of the lab rooted at `lab_root` keeps its state."""

    lab_root: Path

    @property
    def dir(self) -> Path:
        return self.lab_root / DIR

    @property
    def trust_dir(self) -> Path:
        """The CA certificate alone (`ca.crt`): what skopeo's --dest-cert-dir wants, and what clients name."""
        return self.dir / "trust"

    @property
    def ca_cert(self) -> Path:
        return self.trust_dir / "ca.crt"

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    @property
    def ca_key(self) -> Path:
        return self.pki_dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.pki_dir / "serving.crt"

    @property
    def serving_key(self) -> Path:
        return self.pki_dir / "serving.key"

    @property
    def htpasswd(self) -> Path:
        return self.dir / "htpasswd"

    @property
    def password_file(self) -> Path:
        return self.dir / "password"

    @property
    def auth_file(self) -> Path:
        """skopeo's credentials for 127.0.0.1 (an auth file: the password never appears on a command line)."""
        return self.dir / "auth.json"

    @property
    def config(self) -> Path:
        return self.dir / "config.yml"

    @property
    def storage(self) -> Path:
        return self.dir / "storage"

    @property
    def log(self) -> Path:
        return self.dir / "registry.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "registry.pid"


def registry_config(layout: RegistryLayout, port: int, http_secret: str) -> dict:
    """Distribution's config.yml: filesystem storage, TLS, htpasswd auth, no debug listener."""
    return {
        "version": 0.1,
        # Each request's "response completed" line names its status: no second, combined-format access log.
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(layout.storage)},
            "delete": {"enabled": True},
            "cache": {"blobdescriptor": "inmemory"},
        },
        "http": {
            "addr": f":{port}",  # every address of the host: 127.0.0.1 and each real node link's host end
            "secret": http_secret,
            "tls": {
                "certificate": str(layout.serving_cert),
                "key": str(layout.serving_key),
                "minimumtls": "tls1.2",
            },
            "headers": {"X-Content-Type-Options": ["nosniff"]},
            # No `debug` section: no debug or metrics listener.
        },
        "auth": {"htpasswd": {"realm": REALM, "path": str(layout.htpasswd)}},
    }


def cluster_facts(address: str, ca_file: Path, password: str) -> dict:
    """A cluster's registry.json: where its nodes reach the registry, the CA to verify it, credentials to push and
    to put in imagePullSecrets."""
    return {"address": address, "ca": str(ca_file), "username": USERNAME, "password": password}


def auth_file(address: str, password: str) -> dict:
    """containers-auth.json(5) for `address`: what skopeo reads with --authfile."""
    token = base64.b64encode(f"{USERNAME}:{password}".encode()).decode()
    return {"auths": {address: {"auth": token}}}


def dockerconfigjson(address: str, username: str, password: str) -> str:
    """The `.dockerconfigjson` of a kubernetes.io/dockerconfigjson Secret for the registry at `address`."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps({"auths": {address: {"username": username, "password": password, "auth": token}}})


def bcrypt_htpasswd_line(username: str, password: str) -> str:
    """`user:$2y$...` by `htpasswd -B` (Distribution accepts bcrypt only); the password goes through stdin."""
    if not os.path.exists(HTPASSWD):
        raise LabError(f"{HTPASSWD} is missing; the lab's registry needs it (Debian package apache2-utils)")
    result = subprocess.run(
        [HTPASSWD, "-n", "-i", "-B", "-C", str(BCRYPT_COST), username],
        input=password,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = result.stdout.strip()
    if result.returncode != 0 or not line.startswith(f"{username}:$2"):
        raise LabError(f"htpasswd -B failed ({result.returncode}): {result.stderr.strip() or line[:80]}")
    return line


def _write_private(path: Path, text: str) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


class Registry:
    """The registry of the lab rooted at `lab_root`, serving on `port` of every host address."""

    def __init__(self, lab_root: Path, binary: Path, port: int):
        self.layout = RegistryLayout(lab_root)
        self.binary = binary
        self.port = port

    @property
    def local_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        return self.layout.ca_cert

    def password(self) -> str:
        try:
            return self.layout.password_file.read_text().strip()
        except OSError as error:
            raise LabError(f"the lab's registry has no password ({error}); is the lab up?") from None

    def create(self, node_addresses: tuple[str, ...]) -> None:
        """Its CA, serving certificate (127.0.0.1 and `node_addresses`), password, htpasswd and config.yml."""
        layout = self.layout
        for directory in (layout.trust_dir, layout.pki_dir, layout.storage):
            directory.mkdir(parents=True, exist_ok=True)
        layout.pki_dir.chmod(0o700)
        pki.create_ca(layout.ca_cert, layout.ca_key, "catamaran-lab registry CA")
        pki.issue(
            layout.ca_cert,
            layout.ca_key,
            layout.pki_dir / "serving",
            common_name="catamaran-lab registry",
            server_names=("localhost",),
            server_ips=tuple(dict.fromkeys(("127.0.0.1", *node_addresses))),
        )
        password = secrets.token_urlsafe(24)
        _write_private(layout.password_file, password + "\n")
        _write_private(layout.htpasswd, bcrypt_htpasswd_line(USERNAME, password) + "\n")
        _write_private(layout.auth_file, json.dumps(auth_file(self.local_address, password), indent=2))
        config = registry_config(layout, self.port, secrets.token_hex(32))
        _write_private(layout.config, yaml.safe_dump(config, sort_keys=False))

    def start(self, node_addresses: tuple[str, ...], log=print) -> None:
        """Create its state and start it; returns once it answers `/v2/` with 401 over verified TLS."""
        self.create(node_addresses)
        # Its traces would go to an OTLP collector on localhost:4318 by default: none here. REGISTRY_* variables
        # would override config.yml, so none are passed on.
        env = {key: value for key, value in os.environ.items() if not key.startswith("REGISTRY_")}
        env["OTEL_TRACES_EXPORTER"] = "none"
        with self.layout.log.open("ab") as log_file:
            process = subprocess.Popen(
                [str(self.binary), "serve", str(self.layout.config)],
                cwd=self.layout.dir,  # Lab.down finds it by its working directory under the lab root
                env=env,
                stdout=log_file,
                stderr=log_file,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.layout.pid_file.write_text(str(process.pid))
        self.wait_ready(process)
        log(f"lab: registry serving https://{self.local_address} (CA {self.ca_cert})")

    def wait_ready(self, process: subprocess.Popen | None = None, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                last = f"the registry exited with status {process.returncode}"
                break
            answered = self.probe()
            if answered == 401:
                return
            last = f"/v2/ answered {answered}" if isinstance(answered, int) else answered
            time.sleep(0.2)
        raise LabError(
            f"the lab's registry did not answer https://{self.local_address}/v2/ with 401 ({last}); "
            f"last lines of {self.layout.log}:\n  " + "\n  ".join(self.log_tail())
        )

    def probe(self) -> int | str:
        """The HTTP status of an unauthenticated `GET /v2/` (401 when up), or why there was none."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        try:
            with urllib.request.urlopen(f"https://{self.local_address}/v2/", context=context, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, OSError) as error:
            return str(getattr(error, "reason", error))

    def log_tail(self, count: int = 15) -> list[str]:
        try:
            lines = self.layout.log.read_text(errors="replace").splitlines()
        except OSError:
            return ["(no log)"]
        return [line[:300] for line in lines[-count:]] or ["(empty log)"]

    def running(self) -> bool:
        try:
            pid = int(self.layout.pid_file.read_text().strip())
        except (OSError, ValueError):
            return False
        return host.process_alive(pid)

    def push(self, image: Image, repository: str, tag: str | None = None) -> str:
        """Copy the OCI archive of `image` to `<repository>:<tag>` (the image's own tag by default); the tag pushed."""
        tag = tag or image.name.rsplit(":", 1)[1]
        skopeo = shutil.which("skopeo")
        if skopeo is None:
            raise LabError("skopeo is missing; pushing to the lab's registry needs it (Debian package skopeo)")
        command = [
            skopeo,
            "copy",
            "--quiet",
            # The source is a local archive the lab built: no signature policy applies to it.
            "--insecure-policy",
            "--dest-authfile",
            str(self.layout.auth_file),
            "--dest-cert-dir",
            str(self.layout.trust_dir),
            f"oci-archive:{image.archive}",
            f"docker://{self.local_address}/{repository}:{tag}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=PUSH_TIMEOUT_S, check=False)
        if result.returncode != 0:
            raise LabError(
                f"pushing {image.name} to the lab's registry as {repository}:{tag} failed: "
                f"{(result.stderr or result.stdout).strip()[-2000:]}"
            )
        return tag
