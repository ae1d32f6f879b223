"""Configuration files of a real node: containerd, CNI, kubelet, kube-proxy, kubeconfigs. Pure: text in, text out.

Every path and name comes from `NodeLayout`, so two clusters' nodes on one host never share a
socket, a state directory, a runc root, a bridge, an IPAM store or a cgroup.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from .config import CLUSTER_DNS_IP, CLUSTER_DOMAIN, ClusterSpec, RealNodeSpec

CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
BRIDGE = "cni0"
# Inside the node's own network namespace, the kubelet and kube-proxy keep their usual ports.
KUBELET_PORT = 10250


@dataclass(frozen=True)
class NodeLayout:
    """Where one real node keeps everything, and the host-level names it owns."""

    root: Path  # .lab/<cluster>/node
    lab_id: str
    cluster: str

    @property
    def host_tag(self) -> str:
        """`catamaran-<lab id>-<cluster>`: the network namespace, cgroup root and CNI network name."""
        return f"catamaran-{self.lab_id}-{self.cluster}"

    @property
    def netns(self) -> str:
        return self.host_tag

    @property
    def netns_path(self) -> Path:
        return Path("/run/netns") / self.netns

    @property
    def cgroup_root(self) -> str:
        return f"/{self.host_tag}"

    @property
    def cni_network(self) -> str:
        return self.host_tag

    def host_link(self, number: int) -> str:
        """The host's end of the veth pair (interface names have at most 15 characters)."""
        return f"cm{self.lab_id}h{number}"

    def node_link(self, number: int) -> str:
        return f"cm{self.lab_id}n{number}"

    def underlay_host_link(self, number: int) -> str:
        return f"cm{self.lab_id}u{number}"

    def underlay_node_link(self, number: int) -> str:
        return f"cm{self.lab_id}v{number}"

    def gateway_interface_prefix(self, number: int) -> str:
        """The tunnel interfaces of a gateway on this node: unique per host, and found by the lab's teardown."""
        return f"cm{self.lab_id}g{number}"

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @property
    def containerd_socket(self) -> Path:
        return self.path("containerd.sock")


def underlay_bridge(lab_id: str) -> str:
    """The lab's one underlay bridge (its links share the `cm<lab id>` prefix, so teardown finds them)."""
    return f"cm{lab_id}ul"


@dataclass(frozen=True)
class RegistryTrust:
    """The lab's registry (registry.py) as a node's containerd trusts it: every address it is reached at
    (`<host>:<port>`) and the CA that signed its serving certificate. No credentials: pods bring imagePullSecrets."""

    addresses: tuple[str, ...]
    ca_file: Path


def registry_config_dir(layout: NodeLayout) -> Path:
    """containerd's registry host directory (`config_path`): one `<host>:<port>/hosts.toml` per registry."""
    return layout.path("containerd", "certs.d")


def hosts_toml(address: str, ca_file: Path) -> str:
    """containerd's hosts.toml for the registry at `address`: HTTPS, its certificate verified against `ca_file`."""
    return (
        "# The lab's registry (catamaran-lab registry.py), verified against the lab registry's CA. No credentials\n"
        "# here: the kubelet passes a pod's imagePullSecrets.\n"
        f"server = {json.dumps(f'https://{address}')}\n"
        f"ca = {json.dumps(str(ca_file))}\n"
        "\n"
        '# containerd 1.6 rejects a hosts.toml without a `host` table ("invalid `host` tree") and falls back to\n'
        "# no CA at all; an empty one keeps `server` above the only endpoint.\n"
        "[host]\n"
    )


def registry_hosts(layout: NodeLayout, trust: RegistryTrust) -> dict[Path, str]:
    """The hosts.toml files of the node's containerd, by path."""
    directory = registry_config_dir(layout)
    return {directory / address / "hosts.toml": hosts_toml(address, trust.ca_file) for address in trust.addresses}


def containerd_config(layout: NodeLayout, pause_image: str, registry: RegistryTrust | None = None) -> str:
    """containerd 1.6 (CRI plugin), rooted entirely under the node's directory; trusting the lab's registry, if
    given, through the host directory `registry_hosts` fills."""
    runc_options = {"SystemdCgroup": False, "BinaryName": RUNC, "Root": str(layout.path("runc"))}
    config = {
        "version": 2,
        "root": str(layout.path("containerd", "root")),
        "state": str(layout.path("containerd", "state")),
        "disabled_plugins": [
            "io.containerd.snapshotter.v1.aufs",
            "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.zfs",
            "io.containerd.tracing.processor.v1.otlp",
            "io.containerd.internal.v1.tracing",
        ],
        "grpc": {"address": str(layout.containerd_socket)},
        "plugins": {
            "io.containerd.internal.v1.opt": {"path": str(layout.path("containerd", "opt"))},
            "io.containerd.grpc.v1.cri": {
                "sandbox_image": pause_image,
                # The shell lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj (docs/real-nodes.md).
                "restrict_oom_score_adj": True,
                # Pod network namespaces under the node's state, so the lab can find and remove them.
                "netns_mounts_under_state_dir": True,
                "enable_selinux": False,
                "stream_server_address": "127.0.0.1",
                "stream_server_port": "0",
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "runc",
                    "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2", "options": runc_options}},
                },
                "cni": {"bin_dir": CNI_BIN_DIR, "conf_dir": str(layout.path("cni", "net.d")), "max_conf_num": 1},
            },
        },
    }
    if registry is not None:
        config["plugins"]["io.containerd.grpc.v1.cri"]["registry"] = {"config_path": str(registry_config_dir(layout))}
    return _toml(config)


def cni_config(layout: NodeLayout, node: RealNodeSpec) -> str:
    """A bridge in the node's namespace; pods masquerade when they leave it (to the host, other clusters)."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": layout.cni_network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": node.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(layout.path("cni", "ipam")),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
            ],
        },
        indent=2,
    )


def kubelet_config(layout: NodeLayout, node: RealNodeSpec, ca_file: Path) -> str:
    """The settings this machine kind needs (docs/real-nodes.md) plus isolation from the other nodes."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "tlsCertFile": str(layout.path("pki", "kubelet-serving.crt")),
        "tlsPrivateKeyFile": str(layout.path("pki", "kubelet-serving.key")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True, "cacheTTL": "30s"},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "30s", "cacheUnauthorizedTTL": "10s"}},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failCgroupV1": False,
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "podLogsDir": str(layout.path("pod-logs")),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [CLUSTER_DNS_IP],
        "resolvConf": "/etc/resolv.conf",
        # Lab images cannot be pulled again: never collect them, and never evict for a nearly full disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # Lab images are imported, and tests pull the same images (same image ID) from the lab's registry with
        # credentials. Once the kubelet has pulled an image ID with credentials, KEP-2535 (beta and on since 1.35)
        # asks every pod using that ID under another name for matching credentials, so the imported image turns
        # ErrImageNeverPull for the lab's pods (run 22's and run 27's failures). Every image on a lab node is the lab's.
        "imagePullCredentialsVerificationPolicy": "NeverVerify",
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "10s",
        "nodeLeaseDurationSeconds": 40,
        "maxPods": 110,
        "protectKernelDefaults": False,
        "shutdownGracePeriod": "0s",
        "containerLogMaxSize": "10Mi",
    }
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(layout: NodeLayout, node: RealNodeSpec, cluster: ClusterSpec) -> str:
    """iptables mode inside the node's namespace; conntrack sysctls are left as they are (0 = do not set)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.path("kube-proxy.kubeconfig"))},
        "hostnameOverride": node.name,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        "clusterCIDR": cluster.pod_cidr,
        "nodePortAddresses": ["primary"],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "1s"},
    }
    return yaml.safe_dump(config, sort_keys=False)


def kubeconfig(server: str, ca_file: Path, cert_file: Path, key_file: Path, user: str) -> str:
    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority-data": data(ca_file)}}],
            "users": [
                {
                    "name": user,
                    "user": {"client-certificate-data": data(cert_file), "client-key-data": data(key_file)},
                }
            ],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user}}],
            "current-context": "lab",
        }
    )


def _toml(config: dict) -> str:
    """Just enough TOML for containerd's configuration: nested tables of strings, numbers, booleans, lists."""
    lines: list[str] = []

    def scalar(value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, list):
            return "[" + ", ".join(scalar(item) for item in value) + "]"
        return json.dumps(str(value))

    def table(prefix: list[str], values: dict) -> None:
        plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in values.items() if isinstance(v, dict)}
        if prefix and plain:
            lines.append("")
            lines.append("[" + ".".join(json.dumps(p) if "." in p else p for p in prefix) + "]")
        for key, value in plain.items():
            lines.append(f"{key} = {scalar(value)}")
        for key, value in nested.items():
            table([*prefix, key], value)

    table([], config)
    return "\n".join(lines) + "\n"
