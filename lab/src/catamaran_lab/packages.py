"""The Debian packages a real node needs, installed by the lab's own set-up (never by hand)."""

from __future__ import annotations

import os
import shutil
import subprocess

from .errors import LabError

# package -> a file of it the lab runs or reads; the file, not dpkg's database, is what is checked,
# so a machine that has the tool from elsewhere is not forced through apt.
REAL_NODE_PACKAGES = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "busybox-static": "/bin/busybox",
    "iptables": "/usr/sbin/iptables",
    "ipset": "/usr/sbin/ipset",  # kube-router's network policies match peers through ip sets
    "conntrack": "/usr/sbin/conntrack",
    "iproute2": "/usr/sbin/ip",
    "util-linux": "/usr/bin/nsenter",
    "procps": "/usr/sbin/sysctl",
    "curl": "/usr/bin/curl",  # the demo fetches the remote pages with it
    # The fabric's tunnels are configured with `wg` (the lab builds wireguard-go: lab/gomod-wireguard).
    "wireguard-tools": "/usr/bin/wg",
    "gcc": "/usr/bin/gcc",
    "libc6-dev": "/usr/include/stdio.h",
    # Not the nodes': `make image` builds the controller's image with mmdebstrap (no container engine), and
    # tests/integration/test_image.py reads it with skopeo, which also pushes it.
    "mmdebstrap": "/usr/bin/mmdebstrap",
    "skopeo": "/usr/bin/skopeo",
    # The lab's registry (registry.py) takes bcrypt password hashes only: `htpasswd -B` makes them.
    "apache2-utils": "/usr/bin/htpasswd",
}


def missing_packages() -> list[str]:
    return [package for package, path in REAL_NODE_PACKAGES.items() if not os.path.exists(path)]


def ensure_packages(log=print) -> None:
    """Install what is missing with apt-get, or say exactly what to install and why it could not be done."""
    missing = missing_packages()
    if not missing:
        return
    command = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    fix = f"install them with: apt-get update && {' '.join(command)} (or run the lab with CATAMARAN_LAB_REAL_NODES=0)"
    if shutil.which("apt-get") is None:
        raise LabError(f"the real lab nodes need the Debian packages {', '.join(missing)}; apt-get is missing; {fix}")
    if os.geteuid() != 0:
        raise LabError(f"the real lab nodes need the Debian packages {', '.join(missing)}; as root, {fix}")
    log(f"lab packages: installing {', '.join(missing)} (apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for step in (["apt-get", "update", "-qq"], command):
        result = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise LabError(f"'{' '.join(step)}' failed; {fix}\n{tail}")
    still = missing_packages()
    if still:
        raise LabError(f"apt-get reported success but {', '.join(still)} still lack their files; {fix}")
    log(f"lab packages: installed {', '.join(missing)}")
