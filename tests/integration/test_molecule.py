"""Each role's Molecule scenarios (converge, idempotence, verify) against the lab's clusters."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from catamaran_lab.paths import REPO_ROOT

from . import commands
from .playbooks import ansible_env

SCENARIOS = sorted(
    (path.parents[2].name, path.parent.name) for path in (REPO_ROOT / "roles").glob("*/molecule/*/molecule.yml")
)


def test_every_role_has_a_scenario():
    roles = {path.name for path in (REPO_ROOT / "roles").iterdir() if path.is_dir()}
    assert roles == {role for role, _ in SCENARIOS}


# A scenario converges twice and verifies; the deployment one rolls the controller out in-cluster. Beside the 100-pod
# upgrade on the other worker it took 300 to over 900 s on 2 CPUs: a starved scenario is slow, not hung.
SCENARIO_TIMEOUT_S = 1700


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 60)
@pytest.mark.parametrize(("role", "scenario"), SCENARIOS, ids=[f"{r}-{s}" for r, s in SCENARIOS])
def test_molecule_scenario(lab, role, scenario):
    venv_bin = Path(sys.executable).parent
    env = ansible_env(
        PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        CATAMARAN_LAB_DIR=str(lab.root),
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"),
        # The deployment scenario takes one cluster; it works in its own namespace, beside local-mode processes.
        CATAMARAN_MOLECULE_KUBECONFIG=str(lab.kubeconfig("cluster-3")),
        CATAMARAN_MOLECULE_CONTEXT="cluster-3",
        NO_COLOR="1",
    )
    result = commands.run(
        [venv_bin / "molecule", "test", "--scenario-name", scenario],
        cwd=REPO_ROOT / "roles" / role,
        env=env,
        timeout=SCENARIO_TIMEOUT_S,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "idempotence" in output
    assert "verify" in output
