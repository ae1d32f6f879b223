"""Process entry points: `python -m catamaran manager|virtual-kubelet|gateway|route-agent`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import uuid
from pathlib import Path

from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from . import health, logs
from .constants import (
    COUNTERS_SERVICE,
    KUBELET_PORT,
    LEADER_LABEL,
    MANAGER_COMPONENT,
    MANAGER_LEASE,
    SYSTEM_NAMESPACE,
    VIRTUAL_KUBELET_COMPONENT,
    VK_SERVICE_ACCOUNT_PREFIX,
)
from .consumer.manager import WebhookOptions, consumer_tasks
from .fabric.gateway import gateway_tasks
from .fabric.plan import DEFAULT_INTERFACE_PREFIX
from .fabric.routeagent import route_agent_tasks
from .kube.clients import CredentialError, async_client, kubeconfig_from_file
from .kube.leaderelection import LeaderElector, LeadershipLost
from .provider.counters import CounterOptions
from .provider.enforcement_probe import PROBE_INTERVAL_SECONDS
from .provider.manager import provider_tasks
from .provider.shadowpods import WORKERS as SHADOWPOD_WORKERS
from .vk.pods import WORKERS as POD_WORKERS
from .vk.runner import KubeletOptions, PeeringRemoved, VirtualKubelet

log = logging.getLogger("catamaran")


def _webhook(args) -> WebhookOptions | None:
    """The pod webhook's options from the command line; None when it is not served."""
    if not args.webhook_port:
        return None
    service = None
    if args.webhook_service:
        namespaced, _, port = args.webhook_service.partition(":")
        namespace, _, name = namespaced.partition("/")
        service = {"namespace": namespace, "name": name, "port": int(port or 443)}
    return WebhookOptions(
        port=args.webhook_port,
        cert_dir=Path(args.cert_dir),
        hosts=args.webhook_host or ["127.0.0.1"],
        url=args.webhook_url,
        service=service,
    )


def _counters(args) -> CounterOptions | None:
    """The pod counters API's options from the command line; None when it is not served."""
    if not args.counters_port:
        return None
    service_namespace = args.controller_namespace
    service_name, service_port = COUNTERS_SERVICE, 443
    if args.counters_external_name:  # local mode: the API server reaches this host's port by that name
        # A name of its own: the Service of a manager later deployed in the cluster never meets this one's ports.
        service_name, service_port = f"{COUNTERS_SERVICE}-external", args.counters_port
    return CounterOptions(
        port=args.counters_port,
        cert_dir=Path(args.cert_dir) / "counters",
        # The aggregator checks the name <service>.<namespace>.svc, whatever the Service's kind.
        hosts=[
            f"{service_name}.{service_namespace}.svc",
            *([args.counters_external_name] if args.counters_external_name else []),
        ],
        service_namespace=service_namespace,
        service_name=service_name,
        service_port=service_port,
        external_name=args.counters_external_name,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catamaran", description=__doc__)
    _process_arguments(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    _manager_arguments(commands)
    _virtual_kubelet_arguments(commands)
    _gateway_arguments(commands)
    _route_agent_arguments(commands)
    return parser


def _process_arguments(parser: argparse.ArgumentParser) -> None:
    """What every process takes: its cluster, its health and metrics server, logs and leader election."""
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="local cluster kubeconfig")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--cluster-id", required=True, help="this cluster's id (a DNS-1123 label)")
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="port of /metrics, /livez, /healthz and /readyz (0: off)"
    )
    parser.add_argument("--metrics-address", default="127.0.0.1")
    parser.add_argument(
        "--health-url-file",
        type=Path,
        help="write the base URL of that server here once it listens (with --metrics-port 0: any free port)",
    )
    parser.add_argument(
        "--liveness-stall-seconds",
        type=float,
        default=health.STALL_SECONDS,
        help="/livez fails once the event loop has not turned for this long",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="act only while holding a Lease (manager: catamaran-manager; virtual kubelet: catamaran-vk-<provider>)",
    )
    parser.add_argument(
        "--leader-elect-namespace",
        default=os.environ.get("POD_NAMESPACE", SYSTEM_NAMESPACE),
        help="namespace of the leader election Lease",
    )
    parser.add_argument(
        "--leader-elect-label-pod",
        action="store_true",
        help=f"label the leader's own pod {LEADER_LABEL}=true (Services of several replicas select it; needs "
        "$POD_NAMESPACE and $POD_NAME)",
    )
    parser.add_argument(
        "--leader-elect-identity",
        # Unique per start, as client-go's: a container restarted in the same pod is a new candidate, not the
        # holder of a Lease it can no longer vouch for.
        default=f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        help="this replica's name in the Lease (default: the pod's or host's name and a random suffix)",
    )


def _manager_arguments(commands) -> None:
    manager = commands.add_parser(
        "manager", help="run the manager: ShadowPods, offers and twins (provider); NamespaceOffloading and webhook"
    )
    manager.add_argument(
        "--workers", type=int, default=SHADOWPOD_WORKERS, help="ShadowPod workers (provider/shadowpods.py)"
    )
    manager.add_argument(
        "--credential-renew-fraction",
        type=float,
        default=0.8,
        help="renew each tenant's token once this fraction of its life has passed",
    )
    manager.add_argument(
        "--controller-namespace",
        default=os.environ.get("POD_NAMESPACE", SYSTEM_NAMESPACE),
        help="namespace of the virtual kubelets' service accounts, bound per offloaded namespace for reflection",
    )
    manager.add_argument("--webhook-port", type=int, default=0, help="serve the pod webhook on this port (0: off)")
    manager.add_argument("--webhook-url", help="URL the API server calls (out-of-cluster manager)")
    manager.add_argument("--webhook-service", help="namespace/name:port of the webhook Service (in-cluster manager)")
    manager.add_argument("--webhook-host", action="append", default=[], help="name or IP in the serving certificate")
    manager.add_argument("--cert-dir", default="/var/run/catamaran/webhook", help="webhook CA and certificates")
    manager.add_argument(
        "--counters-port",
        type=int,
        default=0,
        help="serve tenants' pod CPU and memory counters (the APIService metrics.catamaran.io) on this port (0: off)",
    )
    manager.add_argument(
        "--networkpolicy-canary-image",
        default="",
        help="image of the NetworkPolicy canary, the controller's own (its python -m catamaran.policy_canary): the "
        "manager keeps one where tenants' pods run and probes whether NetworkPolicies are enforced (empty: not probed)",
    )
    manager.add_argument(
        "--networkpolicy-canary-pull-secret",
        action="append",
        default=[],
        help="a Secret of the system namespace the canary pulls its image with (repeatable)",
    )
    manager.add_argument(
        "--networkpolicy-probe-seconds",
        type=_positive_seconds,
        default=PROBE_INTERVAL_SECONDS,
        help="how often the NetworkPolicy canaries are probed",
    )
    manager.add_argument(
        "--counters-external-name",
        help="out-of-cluster manager: the address the API server reaches this port at (an ExternalName Service)",
    )


def _virtual_kubelet_arguments(commands) -> None:
    vk = commands.add_parser("virtual-kubelet", help="run the virtual kubelet of one ForeignCluster")
    vk.add_argument("--foreign-cluster", required=True, help="ForeignCluster name")
    vk.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="namespace of the ForeignCluster and its Secret")
    vk.add_argument("--node-ip", default=os.environ.get("POD_IP", "127.0.0.1"), help="address of the virtual node")
    vk.add_argument("--workers", type=int, default=POD_WORKERS, help="pod workers (vk/pods.py)")
    kubelet = vk.add_argument_group("kubelet API")
    kubelet.add_argument(
        "--kubelet-port", type=int, default=KUBELET_PORT, help="HTTPS port (0: any free port, published)"
    )
    kubelet.add_argument("--kubelet-bind-address", help="address to listen on (default: --node-ip)")
    kubelet.add_argument(
        "--kubelet-serving-certificate",
        choices=["csr", "self-signed"],
        default="csr",
        help="csr: from the kubernetes.io/kubelet-serving signer, approved by the manager",
    )
    kubelet.add_argument("--kubelet-cert-dir", type=Path, help="where the serving key and certificate are written")
    kubelet.add_argument(
        "--kubelet-certificate-seconds", type=int, help="requested certificate lifetime (the signer may cap it)"
    )
    kubelet.add_argument(
        "--kubelet-renew-fraction", type=float, default=0.8, help="renew once this fraction of its life has passed"
    )
    kubelet.add_argument(
        "--client-ca-file",
        type=Path,
        help="CA for client certificates (default: kube-system's extension-apiserver-authentication)",
    )


def _fabric_command(commands, name: str, help: str) -> argparse.ArgumentParser:
    """A process of the network fabric: it follows the ForeignClusters of one namespace."""
    command = commands.add_parser(name, help=help)
    command.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="namespace of the ForeignClusters")
    return command


def _gateway_arguments(commands) -> None:
    gateway = _fabric_command(
        commands, "gateway", "run this cluster's network gateway: one WireGuard tunnel per peering in mode Fabric"
    )
    gateway.add_argument(
        "--interface-prefix",
        default=DEFAULT_INTERFACE_PREFIX,
        help="names of this gateway's tunnel interfaces (unique per host: two gateways on one host need two)",
    )
    gateway.add_argument(
        "--wireguard-go",
        default="wireguard-go",
        help="the userspace WireGuard run per tunnel where the kernel has no WireGuard (default: from PATH)",
    )


def _route_agent_arguments(commands) -> None:
    agent = _fabric_command(
        commands, "route-agent", "on a node other than the gateway's: route the peers' pod ranges to the gateway's node"
    )
    agent.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME"), help="this node's name (default: $NODE_NAME)"
    )
    agent.add_argument(
        "--gateway-selector",
        type=_labels,
        required=True,
        help="labels of the gateway's pods in namespace catamaran-fabric, as key=value,key=value",
    )
    agent.add_argument(
        "--daemonset",
        help="the DaemonSet in namespace catamaran-fabric that runs the agents: the routes stay when an agent stops "
        "while it remains (a restart), and go once it is deleted (default: none, they always go)",
    )


def _positive_seconds(text: str) -> float:
    seconds = float(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return seconds


def _labels(text: str) -> dict[str, str]:
    pairs = [item.partition("=") for item in text.split(",") if item]
    if not pairs or any(not key or not sep for key, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of key=value labels")
    return {key: value for key, _, value in pairs}


def _own_pod(args) -> tuple[str, str] | None:
    """This replica's pod (namespace, name), when it is to carry the leader label."""
    if not args.leader_elect_label_pod:
        return None
    return os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]


def _elector(args, client) -> LeaderElector | None:
    """The replica's leader election, when asked for: one Lease per manager, one per virtual kubelet."""
    if not args.leader_elect:
        return None
    lease = MANAGER_LEASE if args.command == "manager" else f"{VK_SERVICE_ACCOUNT_PREFIX}{args.foreign_cluster}"
    return LeaderElector(client, lease, args.leader_elect_namespace, args.leader_elect_identity)


async def _main(args) -> None:
    config = kubeconfig_from_file(args.kubeconfig, args.context)
    if args.command == "manager":
        client = async_client(config, args.context, MANAGER_COMPONENT)
        tasks = provider_tasks(
            client,
            args.cluster_id,
            workers=args.workers,
            credential_renew_fraction=args.credential_renew_fraction,
            counters=_counters(args),
            canary_image=args.networkpolicy_canary_image,
            canary_pull_secrets=args.networkpolicy_canary_pull_secret,
            probe_interval=args.networkpolicy_probe_seconds,
        )
        tasks += consumer_tasks(client, args.cluster_id, args.controller_namespace, _webhook(args))
    elif args.command == "gateway":
        client = async_client(config, args.context, "catamaran-gateway")
        tasks = gateway_tasks(client, args.interface_prefix, args.namespace, args.wireguard_go)
    elif args.command == "route-agent":
        client = async_client(config, args.context, "catamaran-route-agent")
        tasks = route_agent_tasks(client, args.node_name, args.gateway_selector, args.namespace, args.daemonset)
    else:
        client = async_client(config, args.context, VIRTUAL_KUBELET_COMPONENT)
        vk = VirtualKubelet(
            client,
            foreign_cluster=args.foreign_cluster,
            namespace=args.namespace,
            consumer_id=args.cluster_id,
            node_ip=args.node_ip,
            kubelet=KubeletOptions(
                bind_address=args.kubelet_bind_address,
                port=args.kubelet_port,
                self_signed=args.kubelet_serving_certificate == "self-signed",
                cert_dir=args.kubelet_cert_dir,
                certificate_seconds=args.kubelet_certificate_seconds,
                renew_fraction=args.kubelet_renew_fraction,
                client_ca_file=args.client_ca_file,
            ),
            workers=args.workers,
        )
        tasks = [vk.run()]
    log.info("starting", extra=logs.fields(command=args.command, cluster_id=args.cluster_id))
    elector = _elector(args, client)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(health.HEALTH.heartbeat())
            group.create_task(_run(tasks) if elector is None else _lead(elector, tasks, _own_pod(args)))
    except* PeeringRemoved as removed:
        # A deliberate end, not a failure: returning exits 0, so a supervisor does not restart the process.
        log.info("peering removed; exiting", extra=logs.fields(reason=str(removed.exceptions[0])))
    except* LeadershipLost as lost:
        raise lost.exceptions[0] from None
    finally:
        if elector is not None:
            await elector.release()  # every task has stopped: a standby may act from now on
        await client.close()  # its connections go with a clean close, not a warning at exit


async def _run(tasks: list) -> None:
    async with asyncio.TaskGroup() as group:
        for task in tasks:
            group.create_task(task)


async def _lead(elector: LeaderElector, tasks: list, pod: tuple[str, str] | None) -> None:
    """Wait for the Lease, then act for as long as it is renewed. A standby is ready (a hot spare); when `pod`
    (namespace, name) is given, only the leader's pod carries LEADER_LABEL, which Services select."""
    if pod is not None:
        await _label_leader(elector.client, pod, None)  # a replica restarted after losing the lead leads no more
    health.HEALTH.standby = True
    try:
        await elector.acquire()
    except BaseException:
        for task in tasks:
            task.close()  # never started: no "never awaited" warnings
        raise
    finally:
        health.HEALTH.standby = False
    if pod is not None:
        await _label_leader(elector.client, pod, "true")
    await _run([*tasks, elector.hold()])


async def _label_leader(client, pod: tuple[str, str], value: str | None) -> None:
    namespace, name = pod
    body = {"metadata": {"labels": {LEADER_LABEL: value}}}
    await client.patch(Pod, name, body, namespace=namespace, patch_type=PatchType.MERGE)


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.metrics_port < 0 or args.metrics_port > 65535:
        parser.error(f"--metrics-port: {args.metrics_port} is not a port number (0-65535)")
    if args.liveness_stall_seconds <= 2 * health.HEARTBEAT_SECONDS:
        parser.error(
            f"--liveness-stall-seconds: must be more than twice the event loop's heartbeat "
            f"({health.HEARTBEAT_SECONDS:g} s), not {args.liveness_stall_seconds:g}"
        )
    if args.leader_elect and args.command in ("gateway", "route-agent"):
        parser.error(f"--leader-elect: every {args.command} acts on its own node; there is no leader to elect")
    if args.command == "route-agent" and not args.node_name:
        parser.error("route-agent needs --node-name or $NODE_NAME (the Downward API's spec.nodeName)")
    if args.leader_elect_label_pod and not (os.environ.get("POD_NAMESPACE") and os.environ.get("POD_NAME")):
        parser.error("--leader-elect-label-pod needs $POD_NAMESPACE and $POD_NAME (the Downward API)")
    logs.setup(args.log_level)
    health.HEALTH.stall_seconds = args.liveness_stall_seconds
    health.serve(args.metrics_port, args.metrics_address, args.health_url_file)
    loop = asyncio.new_event_loop()
    main_task = loop.create_task(_main(args))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main_task.cancel)
    try:
        loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        log.info("stopped")
    except CredentialError as error:
        sys.exit(f"error: {error}")
    except LeadershipLost as error:
        sys.exit(f"error: {error}; exiting, to start again as a standby")
    finally:
        loop.close()


if __name__ == "__main__":
    main()
