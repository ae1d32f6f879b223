"""The peering module (plugins/modules/peering.py): its argument spec, its defaults and its documentation."""

from __future__ import annotations

import sys

import pytest
import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, terms, virtual_nodes
from ansible_collections.catamaran.federation.plugins.modules import peering as peering_module
from ansible_collections.catamaran.federation.plugins.modules.peering import argument_spec
from ansible_collections.catamaran.federation.plugins.modules.peering import argument_spec as peering_spec

from tests.unit.collection.peering_fakes import params
from tests.unit.collection.reflection_argspec import module_argspec


@pytest.mark.parametrize(
    ("reflection", "message"),
    [
        ({"kinds": {"pods": {}}}, "reflection.kinds.pods. Supported parameters include: config_maps,"),
        (
            {"kinds": {"secrets": {"policy": "Allow"}}},
            "policy must be one of: DenyList, AllowList, got: Allow found in ",
        ),
        (
            {"kinds": {"secrets": {"workers": "many"}}},
            "'workers' is of type str found in 'reflection -> kinds -> secrets'",
        ),
        (
            {"kinds": {"persistent_volume_claims": {"policy": "Allow"}}},
            "policy must be one of: DenyList, AllowList, got: Allow found in reflection -> kinds -> "
            "persistent_volume_claims",
        ),
        ({"storageClassName": "fast"}, "reflection.storageClassName. Supported parameters include:"),
    ],
)
def test_the_modules_argument_spec_already_refuses_unknown_kinds_and_policies(reflection, message):
    assert message in " ".join(module_argspec(reflection).error_messages)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"pod_security": "root"}, "pod_security must be one of"),
        ({"sharing": 5}, "sharing. Supported parameters include"),
        ({"health_check": {"period": 5}}, "health_check.period. Supported parameters include"),
        ({"credential_lifetime": "a day"}, "credential_lifetime"),
        ({"node_taints": [{"key": "k"}]}, "missing required arguments: effect found in node_taints"),
        (
            {"node_taints": [{"key": "k", "effect": "Never"}]},
            "effect must be one of: NoSchedule, PreferNoSchedule, NoExecute, got: Never",
        ),
        ({"node_taints": [{"key": "k", "effect": "NoSchedule", "operator": "Exists"}]}, "node_taints.operator."),
    ],
)
def test_the_modules_argument_spec_refuses_unknown_options_and_levels(given, message):
    required = {"consumer": {"kubeconfig": "/k1"}, "provider": {"kubeconfig": "/k2"}}
    result = ArgumentSpecValidator(argument_spec()).validate(
        dict(required, consumer_id="c1", provider_id="p1", **given)
    )
    assert any(message in error for error in result.error_messages), result.error_messages


def test_the_peering_module_takes_only_contexts_per_side_when_the_kubeconfig_is_set_once():
    given = {
        "kubeconfig": "/shared/kubeconfig",
        "consumer": {"context": "cluster-2"},
        "provider": {"context": "cluster-3", "ssl_ca_cert": "/ca.crt"},
        "consumer_id": "cluster-2",
        "provider_id": "cluster-3",
    }
    result = ArgumentSpecValidator(peering_spec()).validate(given)
    assert not result.error_messages, result.error_messages
    assert result.validated_parameters["provider"]["ca_cert"] == "/ca.crt"  # kubernetes.core's alias
    assert result.validated_parameters["consumer"]["request_timeout"] is None  # so the top level can set it


def test_the_modules_own_defaults_give_the_same_terms_as_unset_options():
    """What AnsibleModule fills in from the argument spec is what terms() takes for an unset option."""
    required = {"consumer": {"kubeconfig": "/k1"}, "provider": {"kubeconfig": "/k2"}, "consumer_id": "c1"}
    result = ArgumentSpecValidator(peering_module.argument_spec()).validate(dict(required, provider_id="p1"))
    assert not result.error_messages
    assert terms(result.validated_parameters) == terms(params())


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"allowed_service_types": ["Ingress"]}, "allowed_service_types must be one or more of"),
        ({"twin_namespace_names": "Same"}, "twin_namespace_names must be one of"),
        ({"container_defaults": {"request": {}}}, "container_defaults.request. Supported parameters include"),
    ],
)
def test_the_argument_spec_refuses_unknown_choices_and_suboptions(given, message):
    required = {"consumer": {"kubeconfig": "/k1"}, "provider": {"kubeconfig": "/k2"}}
    result = ArgumentSpecValidator(peering_module.argument_spec()).validate(
        dict(required, consumer_id="c1", provider_id="p1", **given)
    )
    assert any(message in error for error in result.error_messages), result.error_messages


def documented_options():
    return yaml.safe_load(peering_module.DOCUMENTATION)["options"]


def _compare(documented, spec, where):
    for name, doc in documented.items():
        assert name in spec, f"{where}{name} is documented but not in the argument spec"
        option = spec[name]
        assert doc.get("default") == option.get("default"), f"{where}{name}: documented default"
        assert doc.get("choices") == option.get("choices"), f"{where}{name}: documented choices"
        assert doc.get("type", "str") == option.get("type", "str"), f"{where}{name}: documented type"
        if doc.get("suboptions"):
            _compare(doc["suboptions"], option.get("options") or {}, f"{where}{name}.")


def test_the_modules_documented_defaults_and_choices_are_its_argument_specs():
    """The defaults the documentation states are the constants the argument spec takes (as validate-modules checks
    in `make sanity`, here in seconds)."""
    _compare(documented_options(), peering_module.argument_spec(), "")


# -- node pools ------------------------------------------------------------------------------------------------------


def validated(**given):
    required = {"consumer": {"kubeconfig": "/k1"}, "provider": {"kubeconfig": "/k2"}}
    return ArgumentSpecValidator(argument_spec()).validate(dict(required, consumer_id="c1", provider_id="p1", **given))


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ([{"provider_node_selector": {}}], "missing required arguments: name found in pools"),
        ([{"name": "a", "gpus": 1}], "pools.gpus. Supported parameters include"),
        ([{"name": "a", "cordon": {"state": "paused"}}], "state must be one of: cordoned, drained, uncordoned"),
        (
            [{"name": "a", "node_taints": [{"key": "k"}]}],
            "missing required arguments: effect found in pools -> node_taints",
        ),
        (
            [{"name": "a", "provider_tolerations": [{"key": "k", "operator": "In"}]}],
            "operator must be one of: Equal, Exists, got: In",
        ),
        ([{"name": "a", "sharing_percentage": "half"}], "'sharing_percentage' is of type str"),
    ],
)
def test_the_argument_spec_refuses_a_pools_unknown_options_and_choices(pools, message):
    result = validated(pools=pools)
    assert any(message in error for error in result.error_messages), result.error_messages


def test_pools_as_the_argument_spec_gives_them_are_written_into_both_specs():
    """The module's body gets each suboption, unset ones as None or their default: what it writes is only what was
    set, and a pool's share is the peering's unless it has its own."""
    result = validated(
        sharing_percentage=60,
        pools=[
            {
                "name": "real",
                "provider_node_selector": {"catamaran.io/lab-node-kind": "real"},
                "provider_tolerations": [
                    {"key": "catamaran.io/lab-node-kind", "value": "real", "effect": "NoSchedule"}
                ],
            },
            {"name": "gpu", "sharing_percentage": 30, "node_labels": {"example.com/gpu": "true"}, "cordon": {}},
        ],
    )
    assert not result.error_messages, result.error_messages
    given = result.validated_parameters
    assert given["pools"][1]["cordon"] == {"state": "cordoned", "reason": None}
    Peering.validate(given)
    peering = Peering(None, None, None, "c1", "p1")
    assert peering.resource_offer(given)["spec"]["pools"] == [
        {
            "name": "real",
            "nodeSelector": {"catamaran.io/lab-node-kind": "real"},
            "tolerations": [
                {"key": "catamaran.io/lab-node-kind", "operator": "Equal", "value": "real", "effect": "NoSchedule"}
            ],
            "sharingPercentage": 60,
        },
        {"name": "gpu", "sharingPercentage": 30, "cordon": {"drain": False}},
    ]
    assert peering.foreign_cluster(given, {})["spec"]["pools"] == [
        {"name": "real"},
        {"name": "gpu", "nodeLabels": {"example.com/gpu": "true"}},
    ]


def test_without_pools_the_argument_spec_gives_an_empty_list_and_one_virtual_node():
    given = validated().validated_parameters
    assert given["pools"] == []
    assert virtual_nodes("p1", given) == ["catamaran-p1"]
    assert "pools" not in Peering(None, None, None, "c1", "p1").resource_offer(given)["spec"]


def test_the_modules_documented_return_names_the_virtual_nodes():
    returned = yaml.safe_load(peering_module.RETURN)["peering"]["contains"]
    assert returned["virtual_nodes"]["type"] == "list"
    assert returned["virtual_node"]["type"] == "str"
