"""`catamaran-lab build|up|down|status|leftovers|e2e-build|e2e-import`: the lab's command line (make lab-*)."""

from __future__ import annotations

import argparse
import sys
import time

from . import config as lab_config
from . import e2e
from .errors import LabError
from .lab import Lab
from .paths import labs_of_make_test


def _log(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="catamaran-lab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "build",
        help="install the real nodes' packages, build the pinned binaries and images into the cache (no-op when done)",
    )
    up = commands.add_parser("up", help="start the lab clusters (reuses a healthy identical lab)")
    up.add_argument("--clusters", type=int, help="how many clusters (default: as many as lab/lab.yaml declares)")
    up.add_argument(
        "--overlapping-pod-cidrs",
        action="store_const",
        const=True,
        help="give every cluster the same pod range (default: distinct; CATAMARAN_LAB_OVERLAP=1)",
    )
    down = commands.add_parser("down", help="stop every lab process and remove the lab's state")
    down.add_argument("--all", action="store_true", help="also the labs `make test` runs beside it (-gwN, -overlap)")
    commands.add_parser("status", help="list clusters, kubeconfigs, health and memory, real nodes included")
    leftovers = commands.add_parser(
        "leftovers", help="list what of the lab is still on the host (exit 1 if anything): processes, mounts, ..."
    )
    leftovers.add_argument("--all", action="store_true", help="also the labs `make test` runs beside it")
    commands.add_parser(
        "e2e-build",
        help="build e2e.test and the upstream e2e test images from the pinned module into the cache "
        "(minutes; no-op when done); `up` then imports the images into the real nodes",
    )
    commands.add_parser("e2e-import", help="import the e2e test images (built if need be) into the running lab")
    args = parser.parse_args(argv)

    lab = Lab(log=_log)
    try:
        if args.command == "build":
            started = time.monotonic()
            lab.prepare(lab_config.load())
            _log(f"lab binaries: ready in {lab.cache.bin_dir} ({time.monotonic() - started:.1f}s)")
        elif args.command == "up":
            wanted = lab_config.load(clusters=args.clusters, overlapping_pod_cidrs=args.overlapping_pod_cidrs)
            lab.up(wanted)
            _print_status(lab)
        elif args.command == "down":
            for each in _labs(lab, args.all):
                if each is lab or each.root.exists():
                    each.down()
        elif args.command == "status" and not _print_status(lab):
            sys.exit(1)
        elif args.command == "e2e-build":
            _print_e2e(e2e.ensure_e2e(lab.cache, _log))
        elif args.command == "e2e-import":
            lab.import_images(e2e.ensure_e2e(lab.cache, _log).images)
        elif args.command == "leftovers":
            labs = _labs(lab, args.all)
            found = [f"{each.root.name}: {line}" for each in labs for line in each.leftovers()]
            for line in found:
                _log(f"left behind: {line}")
            if found:
                sys.exit(1)
            _log(f"lab: nothing left on the host for {', '.join(str(each.root) for each in labs)}")
    except LabError as error:
        sys.exit(f"error: {error}")


def _labs(lab: Lab, every_test_lab: bool) -> list[Lab]:
    if not every_test_lab:
        return [lab]
    return [lab, *(Lab(root, lab.cache, log=_log) for root in labs_of_make_test(lab.root)[1:])]


def _print_e2e(build: e2e.E2EBuild) -> None:
    _log(f"e2e.test: {build.test_binary}")
    for image in build.images:
        _log(f"image: {image.name}  ({image.archive.stat().st_size / 1024**2:.1f} MiB, {image.archive.name})")
    _log(f"not provided ({len(build.not_provided)}; tests needing them cannot run): {', '.join(build.not_provided)}")


def _print_status(lab: Lab) -> bool:
    statuses = lab.status()
    if not statuses:
        _log(f"lab: not running (no state in {lab.root})")
        return False
    _log(f"{'CLUSTER':<12} {'READY':<6} {'NODES':<6} {'RSS MiB':>8} {'PEAK MiB':>9}  SERVER / KUBECONFIG")
    for status in statuses:
        _log(
            f"{status.name:<12} {'yes' if status.ready else 'no':<6} {status.ready_nodes:<6} "
            f"{status.rss_mib:>8.0f} {status.peak_rss_mib:>9.0f}  {status.server}  {status.kubeconfig}"
        )
        if status.processes:
            processes = ", ".join(f"{name} {'up' if alive else 'DOWN'}" for name, alive in status.processes.items())
            _log(f"  control plane: {processes}; metrics API: {status.metrics_api}")
        if status.real_node:
            node = status.real_node
            daemons = ", ".join(f"{name} {'up' if alive else 'DOWN'}" for name, alive in node.components.items())
            _log(
                f"  real node {node.name}: {'Ready' if node.ready else 'NOT Ready'}, {node.rss_mib:.0f} MiB ({daemons})"
            )
        if not status.ready:
            _log(f"  {status.detail}")
    registry_up = True
    recorded = lab.recorded_config()
    if recorded is not None and recorded.registry_port is not None:
        registry_up = lab.registry(recorded).running()
        _log(
            f"registry: https://127.0.0.1:{recorded.registry_port} {'up' if registry_up else 'DOWN'} "
            f"(per cluster: address, CA and credentials in {lab.root}/<cluster>/registry.json)"
        )
    _log(f"all contexts: {lab.merged_kubeconfig}   binaries: {lab.root / 'bin'}")
    return all(status.ready for status in statuses) and registry_up


if __name__ == "__main__":
    main()
