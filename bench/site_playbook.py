"""Benchmark: `ansible-playbook playbooks/site.yml` from empty clusters to converged, and the no-op re-run.

Runs on its own 3-cluster lab (bench/site-lab.yaml, state in .lab-bench-site/, ports 28500+) with
the lab inventory (cluster-1 consumes cluster-2 and cluster-3 and offloads `demo`). The baseline,
measured in the same run, is the floor any playbook over these clusters pays: one play that only
reaches each cluster (catamaran.federation.cluster_info). It prints wall times and ratios; it
asserts nothing, but it says when a run failed or the re-run changed something.

    .venv/bin/python bench/site_playbook.py [--rounds 2] [--keep-lab]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from catamaran_lab import config as lab_config  # noqa: E402
from catamaran_lab.lab import Lab  # noqa: E402
from tests.integration.collection import build_artifact  # noqa: E402
from tests.integration.playbooks import lab_inventory, run_playbook, write_inventory  # noqa: E402

BASELINE_PLAYBOOK = """---
- name: Reach every cluster once (the floor of any playbook over the federation)
  hosts: catamaran_clusters
  gather_facts: false
  tasks:
    - name: Reach the cluster
      catamaran.federation.cluster_info:
        kubeconfig: "{{ catamaran_kubeconfig }}"
        context: "{{ catamaran_context }}"
"""


def timed(inventory: Path, playbook: str | Path) -> tuple[float, dict]:
    started = time.monotonic()
    run = run_playbook(inventory, playbook=playbook)
    elapsed = time.monotonic() - started
    if run.returncode != 0:
        raise SystemExit(f"{playbook} failed:\n" + "\n".join(run.failures()))
    return elapsed, run.changed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="converge/re-run/teardown rounds")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    args = parser.parse_args()

    config = lab_config.load(REPO / "bench" / "site-lab.yaml")
    os.environ["CATAMARAN_LAB_DIR"] = str(REPO / ".lab-bench-site")
    os.environ["CATAMARAN_LAB_BASE_PORT"] = str(config.base_port)
    lab = Lab(root=Path(os.environ["CATAMARAN_LAB_DIR"]))
    lab.up(config)
    with tempfile.TemporaryDirectory() as artifact:
        build_artifact(Path(artifact))  # the controller role installs the wheel this puts into the checkout
    rows = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            inventory = write_inventory(Path(scratch), lab_inventory(), lab)
            baseline_playbook = Path(scratch) / "baseline.yml"
            baseline_playbook.write_text(BASELINE_PLAYBOOK)
            for round_number in range(1, args.rounds + 1):
                baseline, _ = timed(inventory, baseline_playbook)
                converge, _ = timed(inventory, "site.yml")
                rerun, changed = timed(inventory, "site.yml")
                teardown, _ = timed(inventory, "teardown.yml")
                rows.append((round_number, baseline, converge, rerun, sum(changed.values()), teardown))
    finally:
        if not args.keep_lab:
            lab.down(quiet=True)
    print()
    print("site.yml on 1 consumer + 2 providers (lab inventory), wall seconds")
    header = ("round", 5), ("baseline", 9), ("converge", 9), ("ratio", 6), ("no-op", 7), ("ratio", 6)
    print(" ".join(f"{name:>{width}}" for name, width in header), f"{'changed':>8} {'teardown':>9}")
    for number, baseline, converge, rerun, changed, teardown in rows:
        print(
            f"{number:>5} {baseline:>9.1f} {converge:>9.1f} {converge / baseline:>6.1f} {rerun:>7.1f} "
            f"{rerun / baseline:>6.1f} {changed:>8} {teardown:>9.1f}"
        )
    print("targets: converge <= 90 s, no-op re-run <= 30 s with changed=0")


if __name__ == "__main__":
    main()
