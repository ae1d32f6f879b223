"""The peering role passes every option the inventory model resolves (roles/peering)."""

from __future__ import annotations

import sys

import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model
from ansible_collections.catamaran.federation.plugins.module_utils import validation
from ansible_collections.catamaran.federation.plugins.modules import peering as peering_module

from tests.unit.collection.peering_fakes import inventory


def test_the_role_validates_and_passes_every_option_the_model_resolves():
    (peering,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    specs = yaml.safe_load((REPO_ROOT / "roles/peering/meta/argument_specs.yml").read_text())["argument_specs"]
    for entry_point in ("main", "prune"):
        accepted = specs[entry_point]["options"]["peering_providers"]["options"]
        assert set(peering) - set(accepted) == set(), entry_point
    (task,) = yaml.safe_load((REPO_ROOT / "roles/peering/tasks/main.yml").read_text())
    arguments = task["catamaran.federation.peering"]
    # Unset terms are omitted (the module's defaults); where an empty value is a term of its own (no annotation
    # kept, no grace), only an unset one.
    meaningful_when_empty = {"max_termination_grace_period", "allowed_pod_annotations"}
    for option in validation.TERMS_OPTIONS:
        omitted = "default(omit)" if option in meaningful_when_empty else "default(omit, true)"
        assert arguments[option] == "{{ item." + option + " | " + omitted + " }}"
    module_options = peering_module.argument_spec()
    role_options = specs["main"]["options"]["peering_providers"]["options"]
    for option in validation.TERMS_OPTIONS:
        assert role_options[option]["type"] == module_options[option]["type"]
        assert role_options[option].get("choices") == module_options[option].get("choices")


def test_the_role_passes_the_peerings_pools_to_the_module():
    """Each pool as the model resolves it (its cordon merged in) is what the module takes: the role's and the module's
    pool options are the same, and the task passes the list as it is."""
    specs = yaml.safe_load((REPO_ROOT / "roles/peering/meta/argument_specs.yml").read_text())["argument_specs"]
    role_pool = specs["main"]["options"]["peering_providers"]["options"]["pools"]["options"]
    module_pool = peering_module.argument_spec()["pools"]["options"]
    assert set(role_pool) == set(module_pool)
    assert role_pool["cordon"]["options"]["state"]["choices"] == module_pool["cordon"]["options"]["state"]["choices"]
    hostvars = inventory(pools=[{"name": "gpu", "sharing_percentage": 40}])
    hostvars["h2"]["catamaran_cordoned_pools"] = {"cluster-1": {"gpu": {"state": "drained"}}}
    (peering,) = federation_model(hostvars, ["h1", "h2"])["peerings"]["cluster-1"]
    (pool,) = peering["pools"]
    assert set(pool) <= set(role_pool)
    assert pool["cordon"] == {"state": "drained"}
    (task,) = yaml.safe_load((REPO_ROOT / "roles/peering/tasks/main.yml").read_text())
    assert task["catamaran.federation.peering"]["pools"] == "{{ item.pools | default([]) }}"
