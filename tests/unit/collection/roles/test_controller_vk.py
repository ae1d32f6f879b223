"""A virtual kubelet's own rights on the consumer (roles/controller/templates/vk.yml.j2): its Nodes and their Leases
by name, the pools' nodes of its peering included, and no other."""

from __future__ import annotations

import sys

import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model

ROLE = REPO_ROOT / "roles" / "controller"


def rendered(provider, **variables):
    """The template's objects for one provider, with the role's defaults and deployment vars, as the role's
    `Apply one virtual kubelet per provider` task renders them."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(yaml.safe_load((ROLE / "vars" / "deployment.yml").read_text()))
    values.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()) or {})
    values.update(
        catamaran_cluster_id="cluster-1",
        catamaran_kubeconfig="/k1",
        controller__collection_version="0.0.0",
        ansible_playbook_python=sys.executable,
        __controller_provider=provider,
        **variables,
    )
    templar = Templar(loader=DataLoader(), variables=values)
    text = templar.template(trust_as_template((ROLE / "templates" / "vk.yml.j2").read_text()))
    return [obj for obj in yaml.safe_load_all(text) if obj]


def named(objects, kind, namespace=None):
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"].get("namespace") == namespace]
    return obj


def node_rights(objects):
    """resourceNames of each rule on nodes, nodes/status and (in kube-node-lease) leases."""
    nodes = named(objects, "ClusterRole")["rules"]
    leases = named(objects, "Role", "kube-node-lease")["rules"]
    return {
        "nodes": [rule.get("resourceNames") for rule in nodes if rule["resources"] == ["nodes"]],
        "nodes/status": [rule.get("resourceNames") for rule in nodes if rule["resources"] == ["nodes/status"]],
        "leases": [rule.get("resourceNames") for rule in leases if "create" not in rule["verbs"]],
    }


def test_without_pools_a_virtual_kubelet_manages_its_one_node_and_lease():
    assert node_rights(rendered("cluster-2")) == {
        "nodes": [["catamaran-cluster-2"]],
        "nodes/status": [["catamaran-cluster-2"]],
        "leases": [["catamaran-cluster-2"]],
    }


def test_with_pools_it_manages_its_pools_nodes_and_leases_too_and_no_other_peerings():
    pools = {"cluster-2": ["real", "gpu"], "cluster-3": ["other"]}
    own = ["catamaran-cluster-2", "catamaran-cluster-2.real", "catamaran-cluster-2.gpu"]
    assert node_rights(rendered("cluster-2", __controller_vk_pools=pools)) == {
        "nodes": [own],
        "nodes/status": [own],
        "leases": [own],
    }
    # A provider without pools of its own keeps its one node, whatever others have.
    assert node_rights(rendered("cluster-4", __controller_vk_pools=pools))["nodes"] == [["catamaran-cluster-4"]]


def tasks_in(tasks: list) -> list:
    """Every task of a task list, those in blocks included."""
    return [found for task in tasks for found in [task, *tasks_in(task.get("block") or [])]]


def vk_pools(**variables) -> dict:
    """The role's `Name each virtual kubelet's pools` fact (tasks/deployment.yml), rendered."""
    wanted = "Deployment | Name each virtual kubelet's pools, declared or still served"
    (task,) = [
        t for t in tasks_in(yaml.safe_load((ROLE / "tasks" / "deployment.yml").read_text())) if t.get("name") == wanted
    ]
    values = yaml.safe_load((ROLE / "vars" / "deployment.yml").read_text())
    values.update({"controller_virtual_kubelet_pools": {}, **variables})
    templar = Templar(loader=DataLoader(), variables=values)
    return templar.template(trust_as_template(task["ansible.builtin.set_fact"]["__controller_vk_pools"]))


def test_a_pool_keeps_its_nodes_rights_while_its_node_is_there_and_no_longer():
    nodes = {
        "resources": [{"metadata": {"name": n}} for n in ("catamaran-cluster-2.old", "catamaran-cluster-3.x", "worker")]
    }
    declared = {"cluster-2": ["gpu"]}
    assert vk_pools(
        controller_virtual_kubelets=["cluster-2", "cluster-3"],
        controller_virtual_kubelet_pools=declared,
        __controller_virtual_nodes=nodes,
    ) == {"cluster-2": ["gpu", "old"], "cluster-3": ["x"]}, "a declared pool, and one whose node is still there"
    # Once its virtual kubelet has deleted the node, the next run names the declared pools only.
    assert vk_pools(
        controller_virtual_kubelets=["cluster-2"],
        controller_virtual_kubelet_pools=declared,
        __controller_virtual_nodes={"resources": []},
    ) == {"cluster-2": ["gpu"]}


def test_the_models_pools_are_what_the_controller_role_takes():
    """site.yml passes catamaran_model.pools[<consumer>] as controller_virtual_kubelet_pools; the role names them."""
    hostvars = {
        "h1": {
            "catamaran_cluster_id": "cluster-1",
            "catamaran_kubeconfig": "/k1",
            "catamaran_peerings": [{"provider": "cluster-2", "pools": [{"name": "real"}, {"name": "gpu"}]}],
        },
        "h2": {"catamaran_cluster_id": "cluster-2", "catamaran_kubeconfig": "/k2"},
    }
    pools = federation_model(hostvars, ["h1", "h2"])["pools"]["cluster-1"]
    named_pools = vk_pools(controller_virtual_kubelets=["cluster-2"], controller_virtual_kubelet_pools=pools)
    rights = node_rights(rendered("cluster-2", __controller_vk_pools=named_pools))
    assert [sorted(names) for names in rights["leases"]] == [
        ["catamaran-cluster-2", "catamaran-cluster-2.gpu", "catamaran-cluster-2.real"]
    ]


def trusted(value):
    """Values as Ansible loads them from the role's own files: templates it may render."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    return value


def role_value(expression, **variables):
    """An expression over the role's defaults and deployment vars, as its tasks see them."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(yaml.safe_load((ROLE / "vars" / "deployment.yml").read_text()))
    values.update(catamaran_cluster_id="cluster-1", controller__collection_version="0.0.0", **variables)
    return Templar(loader=DataLoader(), variables=trusted(values)).template(trust_as_template(expression))


def selected(labels, selectors):
    """The label selector terms the role writes: `key=value`, `key` (exists) and `key notin (a,b)`."""
    for term in selectors:
        if " notin " in term:
            key, values = term.split(" notin ")
            if labels.get(key) in values.strip("()").split(","):
                return False
        elif "=" in term:
            key, value = term.split("=")
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def matched(obj, targets, selectors):
    """Whether one of the remove_objects targets (kind, namespace, name, label selectors) matches the object."""
    meta = obj["metadata"]
    return any(
        (target["kind"], target.get("namespace"), target.get("name", meta["name"]))
        == (obj["kind"], meta.get("namespace"), meta["name"])
        and selected(meta.get("labels") or {}, target.get("label_selectors", selectors))
        for target in targets
    )


def test_the_stop_and_the_prune_remove_all_a_virtual_kubelet_is_made_of():
    objects = rendered("cluster-2")
    stop = role_value(
        "{{ __controller_stop_workloads + __controller_removal_targets + __controller_stop_named }}",
        __controller_removal_kinds=trust_as_template("{{ __controller_stop_kinds }}"),
    )
    prune = role_value(
        "{{ __controller_removal_targets }}",
        __controller_removal_kinds=trust_as_template("{{ __controller_vk_kinds }}"),
    )
    managed = role_value("{{ [__controller_managed_selector] }}")
    unlisted = role_value("{{ __controller_vk_prune_selector }}", controller_virtual_kubelets=["cluster-3"])
    listed = role_value("{{ __controller_vk_prune_selector }}", controller_virtual_kubelets=["cluster-2"])
    assert sorted({obj["kind"] for obj in objects}) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    for obj in objects:
        assert matched(obj, stop, managed), obj["kind"]
        assert matched(obj, prune, unlisted), obj["kind"]
        assert not matched(obj, prune, listed), obj["kind"]
