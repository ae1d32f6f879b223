"""The controller's image pulled from a registry, as users deploy it: the role in deployment mode on cluster-2, the
image pushed to the lab's registry (TLS, basic auth), the credentials given to the role (a pull Secret of every
controller pod). A wrong password fails the role at once, naming the image and the reason. The right one is the
guide's way, which test_deployment_fabric runs: every controller pod pulls from the registry with the pull Secret."""

from __future__ import annotations

import pytest

from catamaran_lab.config import NODE_KIND_LABEL, REAL_NODE_TAINT

from .lab_access import require_real_node
from .playbooks import controller_playbook, hosts, lab_inventory, run_playbook, write_inventory

pytestmark = pytest.mark.integration

CLUSTER = "cluster-2"
REPOSITORY = "catamaran/controller"
ROLLOUT_TASK = "Deployment | Wait for the manager"


@pytest.fixture(scope="module")
def pushed(lab, lab_config_in_use, controller_image_archive) -> dict:
    """The controller's image in the lab's registry, and cluster-2's address and credentials for it."""
    require_real_node(lab_config_in_use.cluster(CLUSTER))
    tag = lab.push_image(controller_image_archive, REPOSITORY)
    facts = lab.registry_facts(CLUSTER)
    return {**facts, "image": f"{facts['address']}/{REPOSITORY}:{tag}"}


def inventory(lab, directory, pushed: dict, password: str):
    declared = lab_inventory()
    settings = declared["catamaran_clusters"]["vars"]
    settings.update(
        controller_mode="deployment",
        controller_image=pushed["image"],
        controller_image_pull_policy="Always",  # from the registry every time: nothing imported by hand
        controller_image_pull_credentials=[
            {"registry": pushed["address"], "username": pushed["username"], "password": password}
        ],
        controller_node_selector={NODE_KIND_LABEL: "real"},
        controller_tolerations=[{**REAL_NODE_TAINT, "operator": "Equal"}],
        controller_gateway=False,
        catamaran_network={"mode": "flat"},
    )
    hosts(declared)[CLUSTER]["catamaran_peerings"] = []
    directory.mkdir(exist_ok=True)
    return write_inventory(directory, declared, lab)


def test_a_wrong_registry_password_fails_the_role_at_once_naming_image_and_reason(lab, pushed, tmp_path):
    wrong = inventory(lab, tmp_path / "wrong", pushed, "not-the-password")
    try:
        run = run_playbook(wrong, playbook=controller_playbook(tmp_path, CLUSTER))
        assert run.returncode != 0, "the role succeeded with a wrong registry password"
        (failure,) = [f for f in run.failures() if ROLLOUT_TASK in f]
        assert pushed["image"] in failure, failure
        assert "ErrImagePull" in failure or "ImagePullBackOff" in failure, failure
        assert "401 Unauthorized" in failure, failure
        assert "not-the-password" not in run.output  # the credential is never printed
        seconds = run.task_seconds(ROLLOUT_TASK)
        print(f"wrong registry password: the role failed {seconds:.1f}s into waiting for the manager")
        assert seconds < 60, f"the role took {seconds:.0f}s to fail on an image it cannot pull"
    finally:
        assert run_playbook(wrong, playbook=controller_playbook(tmp_path, CLUSTER, "stopped")).returncode == 0
