"""Process entry points: `python -m catamaran manager|virtual-kubelet`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from . import logs, metrics
from .constants import SYSTEM_NAMESPACE
from .kube.clients import CredentialError, async_client, kubeconfig_from_file
from .provider.manager import provider_tasks
from .vk.runner import VirtualKubelet

log = logging.getLogger("catamaran")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catamaran", description=__doc__)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="local cluster kubeconfig")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--cluster-id", required=True, help="this cluster's id (a DNS-1123 label)")
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus metrics port (0: off)")
    parser.add_argument("--metrics-address", default="127.0.0.1")
    parser.add_argument("--log-level", default="info")
    commands = parser.add_subparsers(dest="command", required=True)
    manager = commands.add_parser("manager", help="run the manager (provider side: ShadowPods, offers, twins)")
    manager.add_argument("--workers", type=int, default=8)
    vk = commands.add_parser("virtual-kubelet", help="run the virtual kubelet of one ForeignCluster")
    vk.add_argument("--foreign-cluster", required=True, help="ForeignCluster name")
    vk.add_argument("--namespace", default=SYSTEM_NAMESPACE, help="namespace of the ForeignCluster and its Secret")
    vk.add_argument("--node-ip", default=os.environ.get("POD_IP", "127.0.0.1"), help="address of the virtual node")
    vk.add_argument("--workers", type=int, default=16)
    return parser


async def _main(args) -> None:
    config = kubeconfig_from_file(args.kubeconfig, args.context)
    if args.command == "manager":
        client = async_client(config, args.context, "catamaran-manager")
        tasks = provider_tasks(client, args.cluster_id, workers=args.workers)
    else:
        client = async_client(config, args.context, "catamaran-virtual-kubelet")
        vk = VirtualKubelet(
            client,
            foreign_cluster=args.foreign_cluster,
            namespace=args.namespace,
            consumer_id=args.cluster_id,
            node_ip=args.node_ip,
            workers=args.workers,
        )
        tasks = [vk.run()]
    log.info("starting", extra=logs.fields(command=args.command, cluster_id=args.cluster_id))
    async with asyncio.TaskGroup() as group:
        for task in tasks:
            group.create_task(task)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logs.setup(args.log_level)
    metrics.serve(args.metrics_port, args.metrics_address)
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
    finally:
        loop.close()


if __name__ == "__main__":
    main()
