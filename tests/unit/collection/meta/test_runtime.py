"""The collection's action group (meta/runtime.yml)."""

from __future__ import annotations

import yaml

from catamaran_lab.paths import REPO_ROOT

# -- the action group ----------------------------------------------------------------------------------


def test_the_action_group_holds_every_module_that_takes_the_connection_options():
    runtime = yaml.safe_load((REPO_ROOT / "meta" / "runtime.yml").read_text())
    modules = {path.stem for path in (REPO_ROOT / "plugins" / "modules").glob("*.py")}
    connected = {
        name
        for name in modules
        if "catamaran.federation.connection" in (REPO_ROOT / "plugins" / "modules" / f"{name}.py").read_text()
    }
    assert set(runtime["action_groups"]["all"]) == connected == modules - {"controller_process"}
    assert runtime["requires_ansible"] == ">=2.19.0,<2.20.0"
