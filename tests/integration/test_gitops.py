"""examples/gitops: the pipeline's own steps, run as a CI runner runs them, against the lab.

An inventory repository is made from the template (its inventory pointed at the lab, its collection
pinned to the previous release's artifact) and every job runs in a fresh clone of it, with the
commands of its workflow's steps and the federation's kubeconfig given as the secret would be.
A pull request upgrading the collection to the artifact this checkout builds is planned (the diff
shows the new release, nothing changes) and its merge upgrades the federation. A proposed change's
plan shows its diff and changes nothing; the merge applies it; a revert prunes it.

The tests run in order and share one federation (cluster-1 consumes cluster-2), which the module
fixture converges with the first push to main, upgrades, and takes apart with the collection's
teardown playbook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from catamaran_lab.paths import REPO_ROOT

from . import commands, release
from .federation import node_ready, twin_ready
from .lab_access import get_json, wait_for
from .playbooks import ansible_env

TEMPLATE = REPO_ROOT / "examples" / "gitops" / "inventory-repo"
WORKFLOW = TEMPLATE / ".github" / "workflows" / "federation.yml"
BIN = Path(sys.executable).parent
CONSUMER, PROVIDER = "cluster-1", "cluster-2"
VIRTUAL_NODE = f"catamaran-{PROVIDER}"
UPGRADE: dict = {}
NAMESPACE = "gitops-web"  # the namespace the proposed change offloads
PLAN_MARKER = "<!-- catamaran-federation-plan -->"
# The template offloads nothing; the proposal offloads NAMESPACE (a one-line change, as a person makes it).
NO_OFFLOADING = "      catamaran_offloaded_namespaces: []\n"
OFFLOADING = (
    f"      catamaran_offloaded_namespaces:\n        - {{namespace: {NAMESPACE}, pod_offloading_strategy: Remote}}\n"
)


@dataclass
class StepRun:
    step: str
    returncode: int
    output: str


def workflow_steps(job: str) -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=Federation Admin", "-c", "user.email=admin@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1"),
    )
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout


class Runner:
    """A CI runner: a fresh clone per job, the workflow's run steps in order, secrets from its store.

    Steps that need GitHub itself (installing Python packages on a bare runner, commenting on the pull
    request) are not run; the packages are those of this virtual environment, checked against the
    inventory repository's requirements.txt by a test below.
    """

    def __init__(self, origin: Path, workspace: Path, runner_temp: Path, secrets: dict[str, str]):
        self.origin = origin
        self.workspace = workspace
        # Stable across jobs: the lab's controller runs on this host (local mode) and reads the
        # kubeconfig the jobs write there. On GitHub the controller runs in the clusters.
        self.runner_temp = runner_temp
        self.secrets = secrets
        self.jobs = 0

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "K8S_AUTH_", "CATAMARAN_"))}
        env.pop("KUBECONFIG", None)
        env.update(
            PATH=f"{BIN}:{env['PATH']}",
            CI="true",
            GITHUB_ACTIONS="true",
            RUNNER_TEMP=str(self.runner_temp),
            # kubernetes.core's discovery cache lives and dies with the lab (see playbooks.ansible_env).
            TMPDIR=ansible_env()["TMPDIR"],
        )
        return env

    def checkout(self, ref: str) -> Path:
        self.jobs += 1
        clone = self.workspace / f"job-{self.jobs}"
        git(self.workspace, "clone", "--quiet", "--branch", ref, str(self.origin), str(clone))
        return clone

    def run_job(self, job: str, ref: str) -> tuple[Path, list[StepRun]]:
        """Every step of the job, stopping at the first failure as Actions does."""
        clone = self.checkout(ref)
        (self.runner_temp / "plan.md").unlink(missing_ok=True)
        runs = []
        for step in workflow_steps(job):
            command = step.get("run")
            if command is None or not command.startswith("ci/") or command.startswith("ci/comment"):
                continue
            env = self.environment()
            for name, value in (step.get("env") or {}).items():
                secret = re.fullmatch(r"\$\{\{ secrets\.(\w+) \}\}", value)
                env[name] = self.secrets[secret.group(1)] if secret else value
            result = commands.run(["bash", "-c", command], cwd=clone, env=env, timeout=900)
            runs.append(StepRun(step.get("name", command), result.returncode, result.stdout + result.stderr))
            if result.returncode != 0:
                break
        return clone, runs


def succeeded(runs: list[StepRun]) -> str:
    """The jobs' log; fails naming the step that failed."""
    for run in runs:
        assert run.returncode == 0, f"step {run.step!r} failed ({run.returncode}):\n{run.output[-4000:]}"
    return "\n".join(run.output for run in runs)


def secrets_in(text: str, kubeconfig: str) -> list[str]:
    """Which credentials of the kubeconfig (keys, certificates, tokens) the text shows, by user; none, hopefully."""
    found = []
    for user in yaml.safe_load(kubeconfig)["users"]:
        for field, value in (user.get("user") or {}).items():
            if isinstance(value, str) and len(value) >= 16 and value[:40] in text:
                found.append(f"{user['name']}.{field}")
    return found


def recap(log: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP's counters per host."""
    counters = {}
    for host, fields in re.findall(r"^(cluster-\d+)\s+:\s+(.*)$", log, re.MULTILINE):
        counters[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", fields)}
    return counters


def pin_collection(repository: Path, artifact: Path) -> None:
    """collections/requirements.yml installs catamaran.federation from `artifact` (where users pin a version)."""
    path = repository / "collections" / "requirements.yml"
    requirements = yaml.safe_load(path.read_text())
    # The template's entry names the collection; a pinned artifact is the entry of type file.
    collections = requirements["collections"]
    (entry,) = [e for e in collections if e.get("type") == "file" or e["name"] == "catamaran.federation"]
    entry.clear()
    entry.update(name=str(artifact), type="file")
    path.write_text("---\n" + yaml.safe_dump(requirements, sort_keys=False))


def lab_repository(seed: Path, lab, artifact: Path) -> None:
    """The template, pointed at the lab: the collection from `artifact`, the controller on this host."""
    shutil.copytree(TEMPLATE, seed)
    pin_collection(seed, artifact)
    # The lab runs the controller on this host (local mode), on the ports examples/lab/inventory.yml gives it.
    config = lab.recorded_config()
    (seed / "inventory" / "group_vars" / "catamaran_clusters" / "controller.yml").write_text(
        yaml.safe_dump({"controller_mode": "local", "controller_state_dir": str(lab.root / "controller")})
    )
    (seed / "inventory" / "host_vars").mkdir()
    for index, name in enumerate((c.name for c in config.clusters), start=1):
        if name not in (CONSUMER, PROVIDER):
            continue
        ports = {
            "controller_metrics_port": config.base_port + 10 * index + 8,
            "controller_webhook_port": config.base_port + 10 * index + 9,
        }
        (seed / "inventory" / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(ports))
    git(seed, "init", "--quiet", "--initial-branch", "main")
    git(seed, "add", "--all")
    git(seed, "commit", "--quiet", "-m", "federation: cluster-1 consumes cluster-2")


def offloading(lab, cluster: str = CONSUMER) -> dict | None:
    result = lab.kubectl(
        cluster, "-n", NAMESPACE, "get", "namespaceoffloading", "offloading", "-o", "json", check=False
    )
    return yaml.safe_load(result.stdout) if result.returncode == 0 else None


def namespaces(lab, cluster: str) -> set[str]:
    return {item["metadata"]["name"] for item in get_json(lab, cluster, "namespaces")["items"]}


@pytest.fixture(scope="module")
def pipeline(lab, collection_artifact, previous_release, tmp_path_factory):
    """The repository starts pinned to the previous release; the first pull request upgrades it to this checkout's
    collection (UPGRADE holds what its jobs showed), so the later tests run the pipeline with this checkout's."""
    peerings = lab.kubectl(CONSUMER, "get", "foreignclusters", "-A", "-o", "name", check=False).stdout
    assert peerings.strip() == "", "the lab must start without peerings"
    root = tmp_path_factory.mktemp("gitops")
    seed = root / "seed"
    lab_repository(seed, lab, previous_release.artifact)
    origin = root / "origin.git"
    git(root, "clone", "--quiet", "--bare", str(seed), str(origin))
    developer = root / "developer"
    git(root, "clone", "--quiet", str(origin), str(developer))
    runner_temp = lab.root / "gitops-runner"
    runner_temp.mkdir(parents=True, exist_ok=True)
    runner = Runner(origin, root, runner_temp, {"FEDERATION_KUBECONFIG": lab.merged_kubeconfig.read_text()})

    try:
        # The repository's first push to main: the apply job converges the federation from nothing.
        _, runs = runner.run_job("apply", "main")
        succeeded(runs)
        wait_for(lambda: node_ready(lab, CONSUMER, f"catamaran-{PROVIDER}") == "True", what="the virtual node Ready")
        UPGRADE.update(
            upgrade(lab, runner, developer, collection_artifact, release.added_spec_fields(previous_release))
        )
        yield {"runner": runner, "developer": developer}
    finally:
        # Not a job of the pipeline: an administrator's clone, with the collection the pipeline installs.
        clone = runner.checkout("main")
        teardown = commands.run(
            [
                "bash",
                "-c",
                "ci/install-collection && source ci/lib.sh && ansible-playbook catamaran.federation.teardown",
            ],
            cwd=clone,
            env=dict(runner.environment(), FEDERATION_KUBECONFIG=runner.secrets["FEDERATION_KUBECONFIG"]),
            timeout=600,
        )
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, "--wait=false", check=False)
        lab.kubectl(CONSUMER, "delete", "mutatingwebhookconfiguration", "catamaran-pod-offloading", check=False)
        shutil.rmtree(runner_temp, ignore_errors=True)
        assert teardown.returncode == 0, (teardown.stdout + teardown.stderr)[-4000:]


def kubelet_version(lab) -> str:
    return get_json(lab, CONSUMER, "node", VIRTUAL_NODE)["status"]["nodeInfo"]["kubeletVersion"]


def upgrade(lab, runner: Runner, developer: Path, artifact: Path, added: dict[str, set[str]]) -> dict:
    """The pull request that pins this checkout's collection instead of the previous release: what its plan showed
    and left unchanged, then what its merge's apply changed."""
    git(developer, "switch", "--quiet", "-c", "upgrade-catamaran")
    pin_collection(developer, artifact)
    git(developer, "commit", "--quiet", "-am", "Upgrade catamaran.federation")
    git(developer, "push", "--quiet", "origin", "upgrade-catamaran")
    seen: dict = {
        "added": added,
        "fields": [release.served_spec_fields(lab, CONSUMER, added)],
        "kubelet": [kubelet_version(lab)],
    }
    _, runs = runner.run_job("plan", "upgrade-catamaran")
    seen["plan"] = succeeded(runs) + (runner.runner_temp / "plan.md").read_text()
    seen["fields"].append(release.served_spec_fields(lab, CONSUMER, added))
    seen["kubelet"].append(kubelet_version(lab))
    git(developer, "switch", "--quiet", "main")
    git(developer, "merge", "--quiet", "--no-ff", "-m", "Merge pull request #0", "upgrade-catamaran")
    git(developer, "push", "--quiet", "origin", "main")
    _, runs = runner.run_job("apply", "main")
    seen["apply"] = succeeded(runs)
    seen["fields"].append(release.served_spec_fields(lab, CONSUMER, added))
    return seen


def test_an_upgrade_is_a_pull_request_planned_then_applied_by_its_merge(lab, pipeline, previous_release):
    added, fields, kubelets = UPGRADE["added"], UPGRADE["fields"], UPGRADE["kubelet"]
    assert added, "this release adds no CRD field: the upgrade's plan proves nothing of CRD changes"
    # The plan shows the new release's CRD fields, and changes nothing.
    for crd, new in added.items():
        assert all(field in UPGRADE["plan"] for field in new), (crd, new, UPGRADE["plan"][-3000:])
        assert not new & fields[0][crd], (crd, new)
    assert fields[1] == fields[0]
    assert kubelets == [f"catamaran-v{previous_release.version}"] * 2
    # The merge's apply upgrades the CRDs and the controller; the federation stays up.
    for crd, new in added.items():
        assert new <= fields[2][crd], (crd, new)
    version = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"]
    wait_for(lambda: kubelet_version(lab) == f"catamaran-v{version}", what="the virtual kubelet of the new release")
    wait_for(lambda: node_ready(lab, CONSUMER, VIRTUAL_NODE) == "True", what="the virtual node Ready")
    assert secrets_in(UPGRADE["plan"] + UPGRADE["apply"], pipeline["runner"].secrets["FEDERATION_KUBECONFIG"]) == []


def test_the_workflow_runs_the_scripts_of_the_repository():
    """What the runner executes is the scripts this test runs, and the packages it installs are those tested."""
    plan = [step.get("run", "").split()[0] for step in workflow_steps("plan") if "run" in step]
    apply = [step.get("run", "").split()[0] for step in workflow_steps("apply") if "run" in step]
    assert plan == ["pip", "ci/install-collection", "ci/validate", "ci/plan", "ci/comment"]
    assert apply == ["pip", "ci/install-collection", "ci/validate", "ci/apply"]
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["pull_request"]["branches"] == ["main"]
    assert triggers["push"]["branches"] == ["main"]
    for line in (TEMPLATE / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            assert requirement.specifier.contains(version(requirement.name)), f"{line}: {version(requirement.name)}"


# A stand-in for the GitHub CLI: answers the comment listing from COMMENTS (the selector ci/comment passes with
# --jq, a startswith on the marker, applied to each comment's body) and records every call, with the body it
# would post, in CALLS.
FAKE_GH = r"""#!PYTHON
import json, os, re, sys
args = sys.argv[1:]
body = None
for i, arg in enumerate(args):
    if arg == "--body-file" or arg.startswith("body=@"):
        body = open(args[i + 1] if arg == "--body-file" else arg[len("body=@"):]).read()
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps({"args": args, "body": body}) + "\n")
if args[:2] == ["api", "--paginate"]:
    marker = re.fullmatch(r'\.\[\] \| select\(\.body \| startswith\("(.*)"\)\) \| \.id', args[args.index("--jq") + 1])
    for comment in json.loads(os.environ["COMMENTS"]):
        if comment["body"].startswith(marker.group(1)):
            print(comment["id"])
"""
NEW_COMMENT = ["pr", "comment", "7", "--repo", "owner/federation", "--body-file"]


@pytest.mark.parametrize(
    ("comments", "plan", "expected"),
    [
        ([], "the plan", NEW_COMMENT),
        (
            [{"id": 3, "body": f"{PLAN_MARKER}\nold"}, {"id": 4, "body": "LGTM"}, {"id": 5, "body": PLAN_MARKER}],
            "the plan",
            ["api", "--method", "PATCH", "repos/owner/federation/issues/comments/5", "-F"],
        ),
        ([{"id": 4, "body": "LGTM"}], None, NEW_COMMENT),
    ],
    ids=["first-plan", "replaces-the-last-plan", "plan-not-run"],
)
def test_the_plan_comment_is_posted_once_and_then_updated(tmp_path, comments, plan, expected):
    """ci/comment with a stand-in gh: a new comment, or the previous plan comment edited; a note when no plan ran."""
    (tmp_path / "bin").mkdir()
    gh = tmp_path / "bin" / "gh"
    gh.write_text(FAKE_GH.replace("PYTHON", sys.executable))
    gh.chmod(0o755)
    plan_file = tmp_path / "plan.md"
    if plan is not None:
        plan_file.write_text(f"{PLAN_MARKER}\n{plan}\n")
    env = dict(
        os.environ,
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        CALLS=str(tmp_path / "calls"),
        COMMENTS=json.dumps(comments),
        GITHUB_REPOSITORY="owner/federation",
        GITHUB_RUN_ID="99",
    )
    result = subprocess.run(
        [str(TEMPLATE / "ci" / "comment"), "7", str(plan_file)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    listing, post, *rest = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
    assert listing["args"][:3] == ["api", "--paginate", "repos/owner/federation/issues/7/comments"]
    assert rest == []
    assert post["args"][: len(expected)] == expected
    if plan is not None:
        assert post["body"] == plan_file.read_text()
    else:
        assert post["body"].startswith(f"{PLAN_MARKER}\n### Federation plan: not run")
        assert "https://github.com/owner/federation/actions/runs/99" in post["body"]


def test_a_proposal_is_planned_with_its_diff_and_changes_nothing(lab, pipeline):
    developer = pipeline["developer"]
    git(developer, "switch", "--quiet", "-c", "offload-web")
    hosts = developer / "inventory" / "hosts.yml"
    assert NO_OFFLOADING in hosts.read_text()
    hosts.write_text(hosts.read_text().replace(NO_OFFLOADING, OFFLOADING))
    git(developer, "commit", "--quiet", "-am", f"offload {NAMESPACE} from cluster-1")
    git(developer, "push", "--quiet", "origin", "offload-web")
    before = {cluster: namespaces(lab, cluster) for cluster in (CONSUMER, PROVIDER)}

    _, runs = pipeline["runner"].run_job("plan", "offload-web")
    log = succeeded(runs)
    comment = (pipeline["runner"].runner_temp / "plan.md").read_text()
    assert comment.startswith(PLAN_MARKER)
    for text in (log, comment):
        # The diff names the new objects, absent before: the namespace and its NamespaceOffloading as proposed.
        for line in (
            rf"-\s+'cluster-1: Namespace {NAMESPACE}': null",
            rf"-\s+'cluster-1: NamespaceOffloading {NAMESPACE}/offloading': null",
            rf"\+\s+'cluster-1: NamespaceOffloading {NAMESPACE}/offloading':",
            r"\+\s+podOffloadingStrategy: Remote",
            rf"changed: \[cluster-1\] => \(item={NAMESPACE}\)",
        ):
            assert re.search(rf"^{line}$", text, re.MULTILINE), f"the plan lacks {line}:\n{text[-3000:]}"
    assert recap(log)[CONSUMER]["changed"] >= 1
    assert recap(log)[PROVIDER]["changed"] == 0
    assert secrets_in(log + comment, pipeline["runner"].secrets["FEDERATION_KUBECONFIG"]) == []

    # Nothing changed on the clusters.
    assert offloading(lab) is None
    assert {cluster: namespaces(lab, cluster) for cluster in (CONSUMER, PROVIDER)} == before


def test_the_merge_applies_it(lab, pipeline):
    developer = pipeline["developer"]
    git(developer, "switch", "--quiet", "main")
    git(developer, "merge", "--quiet", "--no-ff", "-m", "Merge pull request #1 from offload-web", "offload-web")
    git(developer, "push", "--quiet", "origin", "main")

    _, runs = pipeline["runner"].run_job("apply", "main")
    log = succeeded(runs)
    assert recap(log)[CONSUMER]["changed"] >= 1
    assert secrets_in(log, pipeline["runner"].secrets["FEDERATION_KUBECONFIG"]) == []
    live = offloading(lab)
    assert live is not None
    assert live["spec"]["podOffloadingStrategy"] == "Remote"
    assert live["status"]["offloadingPhase"] == "Ready"
    assert twin_ready(lab, CONSUMER, PROVIDER, NAMESPACE)
    assert f"{NAMESPACE}-{CONSUMER}" in namespaces(lab, PROVIDER)


def test_a_revert_is_planned_as_a_removal_and_its_merge_prunes_it(lab, pipeline):
    developer = pipeline["developer"]
    git(developer, "switch", "--quiet", "-c", "revert-offload-web")
    git(developer, "revert", "--no-edit", "-m", "1", "HEAD")
    assert NO_OFFLOADING in (developer / "inventory" / "hosts.yml").read_text()
    git(developer, "push", "--quiet", "origin", "revert-offload-web")

    # It stops offloading the consumer's only namespace, which the inventory does not say it means: refused.
    _, runs = pipeline["runner"].run_job("plan", "revert-offload-web")
    assert runs[-1].returncode != 0, "the plan of a revert removing every offloaded namespace was not refused"
    refusal = f"This run would remove every offloaded namespace ({NAMESPACE}) of {CONSUMER}"
    assert refusal in runs[-1].output, runs[-1].output[-3000:]
    assert offloading(lab) is not None

    hosts = developer / "inventory" / "hosts.yml"
    hosts.write_text(
        hosts.read_text().replace(
            f"      catamaran_cluster_id: {CONSUMER}\n",
            f"      catamaran_cluster_id: {CONSUMER}\n      catamaran_allow_prune_all: true\n",
        )
    )
    git(developer, "commit", "--quiet", "-am", f"{CONSUMER} may offload nothing")
    git(developer, "push", "--quiet", "origin", "revert-offload-web")
    _, runs = pipeline["runner"].run_job("plan", "revert-offload-web")
    log = succeeded(runs)
    # The diff shows the NamespaceOffloading going (after: null); the namespace itself is not Catamaran's to remove.
    for line in (
        rf"-\s+'cluster-1: NamespaceOffloading {NAMESPACE}/offloading':",
        rf"\+\s+'cluster-1: NamespaceOffloading {NAMESPACE}/offloading': null",
        r"-\s+podOffloadingStrategy: Remote",
    ):
        assert re.search(rf"^{line}$", log, re.MULTILINE), f"the plan lacks {line}:\n{log[-3000:]}"
    assert offloading(lab) is not None, "the plan of the revert removed the offloading"

    git(developer, "switch", "--quiet", "main")
    git(developer, "merge", "--quiet", "--ff-only", "revert-offload-web")
    git(developer, "push", "--quiet", "origin", "main")
    _, runs = pipeline["runner"].run_job("apply", "main")
    succeeded(runs)
    assert offloading(lab) is None
    wait_for(
        lambda: f"{NAMESPACE}-{CONSUMER}" not in namespaces(lab, PROVIDER),
        timeout=60,
        what=f"the twin namespace {NAMESPACE}-{CONSUMER} removed from {PROVIDER}",
    )
    # The peering itself is still declared, and stays.
    assert node_ready(lab, CONSUMER, f"catamaran-{PROVIDER}") == "True"
