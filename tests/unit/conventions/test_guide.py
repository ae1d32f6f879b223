"""The user guide stays true: its inventory (docs/guide/inventory.yml) is one the collection accepts and declares what
the guide says, and the page that shows it shows it unchanged."""

from __future__ import annotations

import re
import sys

import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model

GUIDE = REPO_ROOT / "docs" / "guide"
INVENTORY = GUIDE / "inventory.yml"


def guide_hostvars() -> tuple[dict, list[str]]:
    """Each cluster host's variables as Ansible reads the inventory file (group vars merged), and the hosts."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(INVENTORY)])
    variables = VariableManager(loader=loader, inventory=inventory)
    hosts = [host.name for host in inventory.groups["catamaran_clusters"].get_hosts()]
    return {name: variables.get_vars(host=inventory.get_host(name), include_hostvars=False) for name in hosts}, hosts


def test_the_guides_inventory_is_valid_and_declares_what_the_guide_describes():
    hostvars, hosts = guide_hostvars()
    model = federation_model(hostvars, hosts)
    assert model["hosts"] == {"cluster-1": "cluster-1", "cluster-2": "cluster-2"}
    (peering,) = model["peerings"]["cluster-1"]
    assert peering["provider_id"] == "cluster-2"
    # Through the fabric, the provider's gateway behind a NodePort Service (docs/guide/peer.md says why).
    assert peering["network"] == {
        "mode": "fabric",
        "gateway_address": None,
        "gateway_port": 51820,
        "gateway_service": {"type": "NodePort"},
    }
    assert model["peerings"]["cluster-2"] == []
    (offloading,) = model["offloadings"]["cluster-1"]
    assert (offloading["namespace"], offloading["pod_offloading_strategy"]) == ("shop", "Remote")
    assert model["offloadings"]["cluster-2"] == []


def test_the_guides_inventory_keeps_the_default_controller_mode():
    """The guide is for deployment mode, the controller role's default: the inventory must not have to say it."""
    hostvars, _ = guide_hostvars()
    assert {
        host: variables["controller_mode"] for host, variables in hostvars.items() if "controller_mode" in variables
    } == {}
    assert all(variables["controller_gateway"] is True for variables in hostvars.values())


def test_the_guides_image_is_the_collections_version():
    """The image the guide pushes and names is this release's, as make image tags it."""
    version = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"]
    hostvars, _ = guide_hostvars()
    assert {variables["controller_image"].rpartition(":")[2] for variables in hostvars.values()} == {version}


def test_the_peering_page_shows_the_inventory_file_unchanged():
    page = (GUIDE / "peer.md").read_text()
    shown = re.search(r"^```yaml\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    assert shown, "docs/guide/peer.md shows no YAML block"
    assert shown.group(1) == INVENTORY.read_text(), "copy docs/guide/inventory.yml into docs/guide/peer.md again"
