"""The upstream conformance yardstick: the same Kubernetes e2e tests with their pods on a real node, then offloaded.

Runs on its own lab (bench/conformance-lab.yaml, state in .lab-conformance/, ports 27000+): a consumer and a
provider, each with one real node (containerd, runc, kubelet) and nothing else to schedule on. `e2e.test` and the
upstream test images come from the lab's e2e build (catamaran_lab.e2e: the pinned kubernetes module, no registry).

  baseline    the chosen tests against the consumer, its real node untainted: every test's pods run there.
  offloaded   the consumer peered with the provider (its manager with the pod webhook, the provider's manager, the
              virtual kubelet; the remote pods on the provider's real node) and a NamespaceOffloadingPolicy that
              offloads every namespace the e2e framework creates (label `e2e-run`); the consumer's real node is
              tainted again, so the only node the tests may use is the virtual node. The same tests.

The provider's terms for this one peering allow the `privileged` Pod Security level: the framework labels each test
namespace with the level its test asks for, and the consumer enforces it on its side (every other peering keeps the
default, `restricted`).

Prints a table (test, baseline, offloaded, the reason of each test that passes on the real node and fails
offloaded), writes bench/results/conformance.csv, bench/results/conformance.png and the e2e reports under
.conformance-reports/. Asserts nothing.

    .venv/bin/python bench/conformance.py                 # make conformance
    .venv/bin/python bench/conformance.py --focus 'Downward API' --keep-lab
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

from catamaran.constants import VIRTUAL_NODE_TAINT_KEY, virtual_node_name
from catamaran_lab import config as lab_config
from catamaran_lab import e2e
from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT
from catamaran_lab.lab import Lab
from tests.integration import federation
from tests.integration.manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION

LAB_FILE = harness.REPO / "bench" / "conformance-lab.yaml"
LAB_DIR = harness.REPO / ".lab-conformance"
REPORTS = harness.REPO / ".conformance-reports"  # kept after the lab goes
CONSUMER, PROVIDER = "conf-consumer", "conf-provider"
POLICY = "e2e-namespaces"
SYSTEM_NAMESPACES = ("kube-system", "catamaran-system", "default")

# The starting set: sig-node's [NodeConformance] (pods, container runtime, lifecycle hooks, probes, init and
# ephemeral containers, variable expansion, security context, downward API), sig-storage's volumes a kubelet
# fills (ConfigMap, Secrets, Projected, Downward API, EmptyDir) and sig-cli's kubectl logs, exec, cp, port-forward.
FOCUS = (
    r"\[NodeConformance\]"
    r"|\[sig-storage\] (ConfigMap|Secrets|Projected \w+|Downward API volume|EmptyDir volumes) "
    r"|\[sig-cli\] Kubectl (Port forwarding|logs)"
    r"|\[sig-cli\] Kubectl client (Simple pod should support (exec|port-forward)|Kubectl (logs|copy))"
)
# What no single-node lab may run: disruptive or serial tests, features behind gates, tests marked flaky or slow.
SKIP = r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:|\[FeatureGate:|\[Alpha\]|\[Beta\]|\[NodeFeature:"

# Tests that pass on the real node and that Catamaran must not pass offloaded: the reason, kept with the test.
HOST_NAMESPACES = (
    "a tenant's pod never gets the provider node's host namespaces (hostNetwork, hostPID, hostIPC): the virtual "
    "kubelet forges them off, as the provider's node network is not the consumer's to use"
)
# test name pattern -> (the failure it must show, the reason): any other failure of that test counts against Catamaran.
BY_DESIGN: dict[str, tuple[str, str]] = {
    r"if pod uses host network": (r'expected "OK" in container output', HOST_NAMESPACES),
    r"KubeletManagedEtcHosts should test kubelet managed /etc/hosts file": (
        r"/etc/hosts file should no be kubelet managed \(name: busybox-1",  # the hostNetwork pod's
        HOST_NAMESPACES,
    ),
}


@dataclass
class Outcome:
    state: str  # passed, failed, skipped
    seconds: float
    message: str = ""


@dataclass
class SuiteRun:
    label: str
    outcomes: dict[str, Outcome]
    wall_s: float


# -- the e2e suite ---------------------------------------------------------------------------------------------


def run_suite(lab: Lab, build: e2e.E2EBuild, label: str, args, e2e_flags: list[str]) -> SuiteRun:
    """One run of the chosen tests against the consumer; the outcomes from the framework's own JUnit report."""
    report_dir = REPORTS / label
    subprocess.run(["rm", "-rf", str(report_dir)], check=True)
    report_dir.mkdir(parents=True)
    flags = [
        f"--kubeconfig={lab.kubeconfig(CONSUMER)}",
        "--provider=skeleton",
        f"--report-dir={report_dir}",
        f"--kubectl-path={lab.cache.path('kubectl')}",
        "--node-schedulable-timeout=2m",
        "--system-pods-startup-timeout=1m",
        *e2e_flags,
    ]
    focus = args.focus or FOCUS
    if args.procs > 1:
        command = [
            str(build.ginkgo),
            f"--procs={args.procs}",
            f"--focus={focus}",
            f"--skip={SKIP}",
            "--no-color",
            f"--timeout={args.timeout}s",
            str(build.test_binary),
            "--",
            *flags,
        ]
    else:
        command = [
            str(build.test_binary),
            f"--ginkgo.focus={focus}",
            f"--ginkgo.skip={SKIP}",
            "--ginkgo.no-color",
            f"--ginkgo.timeout={args.timeout}s",
            *flags,
        ]
    expected = listed_tests(build, focus, report_dir)
    log_path = report_dir / "e2e.log"
    print(f"\n== {label}: {' '.join(command[:6])} ... (log {log_path})", flush=True)
    started = time.monotonic()
    with log_path.open("wb") as log, PlacementWatch(lab, report_dir / "placements.txt") as placements:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, KUBECONFIG=""))
    wall_s = time.monotonic() - started
    print(f"   pods of the tests' namespaces by node: {placements.summary()}", flush=True)
    reports = sorted(report_dir.glob("junit*.xml"))
    if not reports:
        raise SystemExit(f"{label}: the e2e suite wrote no JUnit report; its log ends:\n{tail(log_path)}")
    outcomes = {}
    for report in reports:
        outcomes.update(parse_junit(report.read_text()))
    suite_failures = {name: o for name, o in outcomes.items() if not name.startswith("[It]") and o.state == "failed"}
    if suite_failures:
        details = "\n".join(f"  {name}: {o.message[:400]}" for name, o in suite_failures.items())
        raise SystemExit(f"{label}: the suite itself failed, no test is measured:\n{details}")
    ran = {name: o for name, o in outcomes.items() if name.startswith("[It]") and o.state != "skipped"}
    # A test the dry run lists that the report lacks (a parallel process that died, the suite's timeout) is a failure,
    # not a test that shrinks the table.
    for name in expected - set(outcomes):
        ran[name] = Outcome("failed", 0.0, "missing from the suite's report: it never finished")
    if result.returncode != 0 and all(o.state == "passed" for o in ran.values()):
        raise SystemExit(
            f"{label}: the suite exited {result.returncode} with every test passed; its log:\n{tail(log_path)}"
        )
    passed = sum(1 for o in ran.values() if o.state == "passed")
    print(f"== {label}: {passed}/{len(ran)} passed in {wall_s:.0f} s", flush=True)
    return SuiteRun(label, ran, wall_s)


class PlacementWatch:
    """Where the tests' pods were bound (a watch from kubectl): proof of which node each run used."""

    def __init__(self, lab: Lab, path: Path):
        self.lab, self.path = lab, path
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> PlacementWatch:
        columns = "custom-columns=NS:.metadata.namespace,POD:.metadata.name,NODE:.spec.nodeName"
        command = [str(self.lab.cache.path("kubectl")), "--kubeconfig", str(self.lab.kubeconfig(CONSUMER))]
        command += ["get", "pods", "-A", "--watch", "--no-headers", "-o", columns]
        with self.path.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *_) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=10)

    def summary(self) -> str:
        nodes: dict[tuple[str, str], str] = {}
        for line in self.path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2] != "<none>" and parts[0] not in SYSTEM_NAMESPACES:
                nodes[parts[0], parts[1]] = parts[2]
        counts: dict[str, int] = {}
        for node in nodes.values():
            counts[node] = counts.get(node, 0) + 1
        return ", ".join(f"{node} {count}" for node, count in sorted(counts.items())) or "none seen"


def listed_tests(build: e2e.E2EBuild, focus: str, report_dir: Path) -> set[str]:
    """The tests the chosen focus and skip select, by a dry run of the suite (it contacts no cluster)."""
    report = report_dir / "dry-run.xml"
    command = [str(build.test_binary), "--ginkgo.dry-run", f"--ginkgo.focus={focus}", f"--ginkgo.skip={SKIP}"]
    subprocess.run([*command, f"--ginkgo.junit-report={report}"], capture_output=True, check=False, timeout=300)
    if not report.exists():
        raise SystemExit(f"the dry run of the suite wrote no report ({' '.join(command)})")
    listed = parse_junit(report.read_text())
    return {without_labels(name) for name, o in listed.items() if name.startswith("[It]") and o.state != "skipped"}


def without_labels(name: str) -> str:
    """A dry run's report appends the test's labels ("[sig-node, Conformance]"), which the suite's own does not."""
    found = re.search(r" \[([^\[\]]*)\]$", name)
    if found is None:
        return name
    rest = name[: found.start()]
    labels = [label.strip() for label in found.group(1).split(",")]
    return rest if all(f"[{label}]" in rest for label in labels) else name


def parse_junit(text: str) -> dict[str, Outcome]:
    """Each test case of a Ginkgo JUnit report: its state, time and first failure line."""
    outcomes = {}
    for case in ElementTree.fromstring(text).iter("testcase"):
        name = " ".join(case.get("name", "").split())
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            state, message = "failed", (failure.get("message") or failure.text or "").strip()
        elif case.find("skipped") is not None or case.get("status") == "skipped":
            state, message = "skipped", ""
        else:
            state, message = "passed", ""
        outcomes[name] = Outcome(state, float(case.get("time") or 0), message)
    return outcomes


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


# -- the lab and the federation ----------------------------------------------------------------------------


def conformance_lab() -> Lab:
    """A new lab (`up` imports the e2e images built before into both real nodes), nothing but them to schedule on."""
    os.environ["CATAMARAN_LAB_DIR"] = str(LAB_DIR)
    lab = Lab(root=LAB_DIR)
    lab.down(quiet=True)  # clean clusters: no node or namespace of an earlier run in the framework's way
    lab.up(lab_config.load(LAB_FILE, real_nodes=True))
    for cluster in (CONSUMER, PROVIDER):
        lab.kubectl(cluster, "delete", "nodes", "-l", f"{NODE_KIND_LABEL}=fake", "--wait=true")
    return lab


def real_node(cluster: str) -> str:
    return f"{cluster}-real"


def set_real_node_taint(lab: Lab, cluster: str, tainted: bool) -> None:
    taint = f"{REAL_NODE_TAINT['key']}={REAL_NODE_TAINT['value']}:{REAL_NODE_TAINT['effect']}"
    lab.kubectl(cluster, "taint", "node", real_node(cluster), taint if tainted else f"{taint}-", check=False)


def start_federation(lab: Lab) -> list[federation.ControllerProcess]:
    """The consumer peered with the provider, the remote pods on the provider's real node, e2e namespaces offloaded."""
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER)
    federation.place(lab, CONSUMER, PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    federation.grant_terms(lab, CONSUMER, PROVIDER, field_manager="conformance", podSecurity="privileged")
    processes = federation.peering_processes(lab, CONSUMER, PROVIDER)
    for process in processes:
        process.start()
    node = virtual_node_name(PROVIDER)
    deadline = time.monotonic() + 120
    while federation.node_ready(lab, CONSUMER, node) != "True":
        if time.monotonic() > deadline:
            raise SystemExit(f"virtual node {node} never became Ready; logs in {LAB_DIR / 'logs'}")
        time.sleep(1)
    policy = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "NamespaceOffloadingPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "namespaceSelector": {"matchExpressions": [{"key": "e2e-run", "operator": "Exists"}]},
            "offloading": {"podOffloadingStrategy": "Remote"},
        },
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(policy))
    federation.webhook_registered(lab, CONSUMER)
    # The framework picks nodes for its pods among the untainted ones only (--non-blocking-taints is not applied
    # there). The taint is the virtual node's registration taint, as a kubelet's --register-with-taints: removed
    # here once, it is not put back. The policy's webhook still steers every e2e pod to the virtual node.
    lab.kubectl(CONSUMER, "taint", "node", node, f"{VIRTUAL_NODE_TAINT_KEY}-")
    return processes


# -- the table ---------------------------------------------------------------------------------------------


def short(name: str) -> str:
    return re.sub(r"^\[It\] ", "", name)


def group(name: str) -> str:
    found = re.search(r"\[sig-[a-z-]+\]", name)
    return found.group(0)[1:-1] if found else "other"


def reason_for(name: str, outcome: Outcome) -> str:
    for pattern, (failure, reason) in BY_DESIGN.items():
        if re.search(pattern, name) and re.search(failure, outcome.message):
            return f"by design: {reason}"
    first = next((line for line in outcome.message.splitlines() if line.strip()), "")
    return first[:300]


def table(baseline: SuiteRun, offloaded: SuiteRun) -> list[dict]:
    rows = []
    for name in sorted(set(baseline.outcomes) | set(offloaded.outcomes), key=short):
        base = baseline.outcomes.get(name)
        off = offloaded.outcomes.get(name)
        row = {
            "test": short(name),
            "group": group(name),
            "baseline": base.state if base else "not run",
            "offloaded": off.state if off else "not run",
            "baseline s": round(base.seconds, 1) if base else "",
            "offloaded s": round(off.seconds, 1) if off else "",
            "reason": "",
        }
        if base and base.state == "passed" and (off is None or off.state != "passed"):
            row["reason"] = reason_for(name, off) if off else "not run offloaded"
        elif base and base.state == "failed":
            row["reason"] = "fails on the real node: " + reason_for(name, base)
        rows.append(row)
    return rows


def print_table(rows: list[dict], baseline: SuiteRun, offloaded: SuiteRun) -> None:
    print("\n== conformance: baseline (the consumer's real node) vs offloaded (the provider's real node)")
    for row in rows:
        mark = "" if row["baseline"] == row["offloaded"] else "  <--"
        print(f"  {row['baseline']:8} {row['offloaded']:8} {row['test'][:150]}{mark}")
    gaps = [row for row in rows if row["baseline"] == "passed" and row["offloaded"] != "passed"]
    if gaps:
        print("\n  passing on the real node, not offloaded:")
        for row in gaps:
            print(f"    {row['test'][:150]}\n      {row['reason']}")
    passing_base = [row for row in rows if row["baseline"] == "passed"]
    passing_both = [row for row in passing_base if row["offloaded"] == "passed"]
    excepted = [row for row in gaps if row["reason"].startswith("by design")]
    ratio = len(passing_both) / max(1, len(passing_base) - len(excepted))
    print(
        f"\n  tests run {len(rows)}; passing on the real node {len(passing_base)}; of those passing offloaded "
        f"{len(passing_both)}; listed exceptions {len(excepted)}"
    )
    print(f"  figure: passing offloaded / passing on the real node (minus exceptions) = {ratio:.3f} (goal 1.0)")
    print(
        f"  figure: run time offloaded / on the real node = {offloaded.wall_s:.0f} s / {baseline.wall_s:.0f} s "
        f"= {offloaded.wall_s / max(1.0, baseline.wall_s):.2f} (goal <= 1.5)"
    )


def chart(rows: list[dict]):
    groups = sorted({row["group"] for row in rows})

    def draw(axes) -> None:
        width = 0.38
        for offset, column, colour in ((-width / 2, "baseline", "#888888"), (width / 2, "offloaded", "#1f77b4")):
            passed = [sum(1 for r in rows if r["group"] == g and r[column] == "passed") for g in groups]
            axes.bar([i + offset for i in range(len(groups))], passed, width, label=column, color=colour)
        totals = [sum(1 for r in rows if r["group"] == g) for g in groups]
        axes.set_xticks(range(len(groups)), [f"{g}\n({t} run)" for g, t in zip(groups, totals, strict=True)])
        axes.set_ylabel("tests passed")
        axes.set_title("Upstream e2e tests: real node (baseline) vs offloaded")
        axes.legend()

    return draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--focus", help="run only the tests matching this regular expression (default: the set)")
    parser.add_argument("--procs", type=int, default=4, help="parallel Ginkgo processes (both runs alike)")
    parser.add_argument("--timeout", type=int, default=5400, help="seconds one run may take")
    parser.add_argument("--keep-lab", action="store_true", help="leave the conformance lab running afterwards")
    args = parser.parse_args()

    build = e2e.ensure_e2e(log=print)
    lab = conformance_lab()
    print(f"settings: {args.procs} Ginkgo processes; focus {args.focus or FOCUS!r}; skip {SKIP!r}")
    print(f"  lab {LAB_FILE.relative_to(harness.REPO)}: {CONSUMER} and {PROVIDER}, one real node each")
    processes: list[federation.ControllerProcess] = []
    try:
        set_real_node_taint(lab, CONSUMER, tainted=False)
        baseline = run_suite(lab, build, "baseline", args, [])
        set_real_node_taint(lab, CONSUMER, tainted=True)
        processes = start_federation(lab)
        # The consumer's real node is tainted again: the framework counts it out, so only the virtual node is used.
        offloaded = run_suite(
            lab,
            build,
            "offloaded",
            args,
            ["--allowed-not-ready-nodes=1"],
        )
        rows = table(baseline, offloaded)
        print_table(rows, baseline, offloaded)
        print(f"\nwrote {harness.write_csv('conformance.csv', rows, timed=False)}")
        print(f"wrote {harness.plot('conformance.png', chart(rows), timed=False)}")
    finally:
        harness.finish(lab, processes, args.keep_lab)


if __name__ == "__main__":
    main()
