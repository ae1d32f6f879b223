"""The Pod Security Standards (baseline and restricted, latest version), checked on a pod spec. Pure.

The provider's manager checks every ShadowPod's pod spec against its tenant's level before it
creates the Pod, so a refusal names every violation on the ShadowPod (and, through the virtual
kubelet, on the local pod) instead of surfacing as an admission error. The twin namespaces carry
the same level as Pod Security Admission labels, the second line of defence.

Messages follow Pod Security Admission's: `<check> (<who> must ...)`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..constants import POD_SECURITY_LEVELS

RESTRICTED, BASELINE, PRIVILEGED = POD_SECURITY_LEVELS  # strictest first
# The namespace label through which Pod Security Admission enforces a level.
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
SECCOMP_ALLOWED = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def stricter(level: str, other: str | None) -> str:
    """The stricter of two levels; `other` may be absent or unknown (then `level`)."""
    if other not in POD_SECURITY_LEVELS:
        return level
    return min(level, other, key=POD_SECURITY_LEVELS.index)


def violations(pod_spec: dict, level: str, annotations: dict | None = None) -> list[str]:
    """Every way `pod_spec` breaks `level`; empty when it complies. An unknown level is checked as restricted."""
    if level == PRIVILEGED:
        return []
    level = level if level in POD_SECURITY_LEVELS else RESTRICTED
    spec = pod_spec or {}
    found = list(_baseline(spec, annotations or {}))
    if level != BASELINE:
        found += list(_restricted(spec))
    return found


def _containers(spec: dict) -> list[dict]:
    return [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]


def _context(container: dict) -> dict:
    return container.get("securityContext") or {}


def _profile(context: dict, field: str) -> str | None:
    """The type of a seccompProfile or appArmorProfile in a security context."""
    return (context.get(field) or {}).get("type")


def _quoted(names) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _who(names: list[str], pod_too: bool = False) -> str:
    """Who must change: the containers named, or the pod when only its own security context is at fault."""
    if not names:
        return "pod"
    quoted = _quoted(names)
    noun = "container" if len(names) == 1 else "containers"
    return f"pod or {noun} {quoted}" if pod_too else f"{noun} {quoted}"


def _baseline(spec: dict, annotations: dict) -> Iterator[str]:
    pod_context = spec.get("securityContext") or {}
    containers = _containers(spec)

    hosts = [f"{field}=true" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]
    if hosts:
        yield f"host namespaces ({', '.join(hosts)})"

    windows = [c["name"] for c in containers if (_context(c).get("windowsOptions") or {}).get("hostProcess")]
    if (pod_context.get("windowsOptions") or {}).get("hostProcess") or windows:
        who = _who(windows, pod_too=True)
        yield f"hostProcess ({who} must not set securityContext.windowsOptions.hostProcess=true)"

    privileged = [c["name"] for c in containers if _context(c).get("privileged")]
    if privileged:
        yield f"privileged ({_who(privileged)} must not set securityContext.privileged=true)"

    for container in containers:
        added = (_context(container).get("capabilities") or {}).get("add") or []
        beyond = [cap for cap in added if cap not in BASELINE_CAPABILITIES]
        if beyond:
            listed = _quoted(beyond)
            yield (
                f'non-default capabilities (container "{container["name"]}" must not include {listed} '
                "in securityContext.capabilities.add)"
            )

    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        yield f"hostPath volumes ({_quoted(host_paths)})"

    for container in containers:
        ports = [str(p["hostPort"]) for p in container.get("ports") or [] if p.get("hostPort")]
        if ports:
            yield f'hostPort (container "{container["name"]}" uses hostPort {", ".join(ports)})'

    apparmor = [c["name"] for c in containers if _profile(_context(c), "appArmorProfile") == "Unconfined"]
    if _profile(pod_context, "appArmorProfile") == "Unconfined" or apparmor:
        yield f'appArmorProfile ({_who(apparmor, pod_too=True)} must not set appArmorProfile.type to "Unconfined")'
    for key, value in sorted(annotations.items()):
        if (
            key.startswith(APPARMOR_ANNOTATION_PREFIX)
            and value != "runtime/default"
            and not value.startswith("localhost/")
        ):
            yield f'AppArmor profile (annotation "{key}"="{value}")'

    selinux_owners = [("pod", pod_context), *((f'container "{c["name"]}"', _context(c)) for c in containers)]
    for owner, context in selinux_owners:
        options = context.get("seLinuxOptions") or {}
        bad = [f"type {options['type']!r}"] if options.get("type", "") not in SELINUX_TYPES else []
        bad += [f"{field} {options[field]!r}" for field in ("user", "role") if options.get(field)]
        if bad:
            yield f"seLinuxOptions ({owner} must not set securityContext.seLinuxOptions {', '.join(bad)})"

    proc_mounts = [c["name"] for c in containers if _context(c).get("procMount") not in (None, "", "Default")]
    if proc_mounts:
        yield f'procMount ({_who(proc_mounts)} must not set securityContext.procMount to anything but "Default")'

    unconfined = [c["name"] for c in containers if _profile(_context(c), "seccompProfile") == "Unconfined"]
    if _profile(pod_context, "seccompProfile") == "Unconfined" or unconfined:
        who = _who(unconfined, pod_too=True)
        yield f'seccompProfile ({who} must not set securityContext.seccompProfile.type to "Unconfined")'

    unsafe = [s["name"] for s in pod_context.get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    if unsafe:
        yield f"forbidden sysctls ({', '.join(unsafe)})"


def _restricted(spec: dict) -> Iterator[str]:
    pod_context = spec.get("securityContext") or {}
    containers = _containers(spec)
    windows = (spec.get("os") or {}).get("name") == "windows"

    for volume in spec.get("volumes") or []:
        kinds = [key for key in volume if key != "name"]
        forbidden = [kind for kind in kinds if kind not in RESTRICTED_VOLUME_TYPES and kind != "hostPath"]
        if forbidden:  # hostPath is already a baseline violation
            yield f'restricted volume types (volume "{volume["name"]}" uses {", ".join(forbidden)})'

    if not windows:
        escalating = [c["name"] for c in containers if _context(c).get("allowPrivilegeEscalation") is not False]
        if escalating:
            yield (
                f"allowPrivilegeEscalation != false ({_who(escalating)} must set "
                "securityContext.allowPrivilegeEscalation=false)"
            )

    pod_non_root = pod_context.get("runAsNonRoot")
    explicit_root = [c["name"] for c in containers if _context(c).get("runAsNonRoot") is False]
    unset = [c["name"] for c in containers if _context(c).get("runAsNonRoot") is None]
    if pod_non_root is False or explicit_root or (pod_non_root is not True and unset):
        names = explicit_root + ([] if pod_non_root is True else unset)
        yield f"runAsNonRoot != true ({_who(names, pod_too=True)} must set securityContext.runAsNonRoot=true)"

    root_users = [c["name"] for c in containers if _context(c).get("runAsUser") == 0]
    if pod_context.get("runAsUser") == 0 or root_users:
        yield f"runAsUser=0 ({_who(root_users, pod_too=True)} must not set runAsUser=0)"

    if not windows:
        pod_seccomp = _profile(pod_context, "seccompProfile")
        # A container's own profile wins; without one it inherits the pod's.
        missing = [
            c["name"]
            for c in containers
            if (_profile(_context(c), "seccompProfile") or pod_seccomp) not in SECCOMP_ALLOWED
        ]
        if missing:
            yield (
                f"seccompProfile ({_who(missing, pod_too=True)} must set securityContext.seccompProfile.type to "
                '"RuntimeDefault" or "Localhost")'
            )

        not_dropped, beyond = [], []
        for container in containers:
            capabilities = _context(container).get("capabilities") or {}
            if "ALL" not in (capabilities.get("drop") or []):
                not_dropped.append(container["name"])
            extra = [cap for cap in capabilities.get("add") or [] if cap not in RESTRICTED_CAPABILITIES]
            if extra:
                beyond.append((container["name"], extra))
        if not_dropped:
            yield f'unrestricted capabilities ({_who(not_dropped)} must set securityContext.capabilities.drop=["ALL"])'
        for name, extra in beyond:
            listed = _quoted(extra)
            yield (
                f'unrestricted capabilities (container "{name}" must not include {listed} in '
                'securityContext.capabilities.add; only "NET_BIND_SERVICE" is allowed)'
            )
