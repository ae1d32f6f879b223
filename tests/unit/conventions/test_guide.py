"""The user guide stays true: its inventory (docs/guide/inventory.yml) is one the collection accepts and declares what
the guide says, the page that shows it shows it unchanged, and every relative Markdown link of the docs resolves."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model

GUIDE = REPO_ROOT / "docs" / "guide"
INVENTORY = GUIDE / "inventory.yml"
# The Markdown a reader of the checkout follows links in.
MARKDOWN = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
    *sorted((REPO_ROOT / "examples").rglob("*.md")),
]
FENCED_BLOCK = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# [text](target) and ![alt](target), with an optional "title"; the text may span lines.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
NOT_A_PATH = re.compile(r"^(https?:|mailto:|#)")


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


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link to a path in a Markdown file, code left out (it shows syntax, not links)."""
    text = path.read_text()
    # Blanked, not removed, so that line numbers stay those of the file.
    text = FENCED_BLOCK.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)
    text = CODE_SPAN.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(1))
        for match in LINK.finditer(text)
        if not NOT_A_PATH.match(match.group(1))
    ]


def test_the_link_scan_finds_links_to_paths_and_only_those(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "See [the guide](guide/README.md#peer) and\n"
        '![a chart](../bench/chart.png "title"), [a\nsplit text](other.md), [web](https://example.com),\n'
        "[here](#anchor), `[code](not-a-link.md)`.\n"
        "```yaml\n[fenced](not-a-link-either.md)\n```\n"
    )
    assert relative_links(page) == [(1, "guide/README.md#peer"), (2, "../bench/chart.png"), (2, "other.md")]


def test_every_relative_link_of_the_docs_resolves():
    broken = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {target}"
        for path in MARKDOWN
        for line, target in relative_links(path)
        if not (path.parent / unquote(target.partition("#")[0])).exists()
    ]
    assert broken == [], "links to nothing in the checkout:\n" + "\n".join(broken)
