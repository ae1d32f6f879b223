"""The provider's terms a peering writes into the tenant's ResourceOffer, the consumer's announced pod ranges, the
cluster-wide objects all tenants share, and how the module, the inventory model and the role agree on the options."""

from __future__ import annotations

import copy
import sys

import pytest
import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.catamaran.federation.plugins.filter.federation_model import federation_model
from ansible_collections.catamaran.federation.plugins.module_utils import kube, validation
from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    DEFAULT_ALLOWED_SERVICE_TYPES,
    DEFAULT_CONTAINER_LIMITS,
    DEFAULT_CONTAINER_REQUESTS,
    DEFAULT_OBJECT_QUOTA,
    DEFAULT_TWIN_NAME_POLICY,
    LABEL_TYPE,
    TENANT_PRIORITY_CLASS,
    TYPE_VIRTUAL_NODE,
    tenant_namespace,
)
from ansible_collections.catamaran.federation.plugins.module_utils.peering import (
    CONSUMER_CRDS,
    CRD_API,
    PROVIDER_CRDS,
    Peering,
    terms,
)
from ansible_collections.catamaran.federation.plugins.module_utils.tenancy import (
    provider_cluster_objects,
    tenant_manifests,
)
from ansible_collections.catamaran.federation.plugins.modules import peering as peering_module

# -- fakes -----------------------------------------------------------------------------------------------------------


def _matches(obj, selector):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in (selector or "").split(","):
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        else:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
    return True


INSTALLED_CRDS = [
    yaml.safe_load(path.read_text()) for path in sorted((REPO_ROOT / "controller" / "crds").glob("*.yaml"))
]


class FakeCluster:
    """A cluster in memory: apply stores the object as sent (the server's dry run would add the same defaults to the
    live object and the planned one alike), paths come from kube.KINDS as a real Cluster builds them."""

    def __init__(self, label, objects=(), crds=True):
        self.label = label
        self.server = f"https://{label}.example:6443"
        self.ca_data = None
        self.objects = {}
        self.deleted = []
        # The checkout's CRDs are served, as the crds role installs them before any peering (crds=False: none).
        self.crds = {crd["metadata"]["name"]: crd for crd in INSTALLED_CRDS} if crds else {}
        for obj in objects:
            self._store(obj)

    def _store(self, obj):
        meta = obj["metadata"]
        self.objects[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = copy.deepcopy(obj)

    def path(self, api_version, kind, name=None, namespace=None):
        return kube.Cluster.path(self, api_version, kind, name, namespace)

    def get(self, api_version, kind, name, namespace=None):
        self.path(api_version, kind, name, namespace)
        if kind == "CustomResourceDefinition":
            return copy.deepcopy(self.crds.get(name))
        return copy.deepcopy(self.objects.get((api_version, kind, namespace, name)))

    def list(self, api_version, kind, namespace=None, labels=None, fields=None):
        return [
            copy.deepcopy(obj)
            for (api, k, ns, _), obj in sorted(self.objects.items(), key=lambda item: str(item[0]))
            if (api, k) == (api_version, kind) and namespace in (None, ns) and _matches(obj, labels)
        ]

    def apply(self, obj, dry_run=False, force=True):
        meta = obj["metadata"]
        self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        if not dry_run:
            self._store(obj)
        return copy.deepcopy(obj)

    def delete(self, api_version, kind, name, namespace=None, dry_run=False, grace_period=None):
        self.path(api_version, kind, name, namespace)
        if not dry_run:
            self.objects.pop((api_version, kind, namespace, name), None)
            self.deleted.append((kind, name))
        return True

    def watch_list_until(self, api_version, kind, namespace, done, timeout, labels=None, fields=None):
        items = self.list(api_version, kind, namespace, labels)
        return done(items), items


class FakeAnsible:
    def __init__(self):
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)


class FakeModule:
    def __init__(self, check_mode=True):
        self.check_mode = check_mode
        self.ansible = FakeAnsible()

    def hide(self, *values):
        pass


def node(name, pod_cidrs=None, pod_cidr=None, virtual=False):
    spec = {}
    if pod_cidrs:
        spec["podCIDRs"] = pod_cidrs
    if pod_cidr:
        spec["podCIDR"] = pod_cidr
    labels = {LABEL_TYPE: TYPE_VIRTUAL_NODE} if virtual else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec}


def crd(name):
    return {"apiVersion": CRD_API, "kind": "CustomResourceDefinition", "metadata": {"name": name}}


def clusters(consumer_nodes=(), provider_objects=()):
    consumer = FakeCluster("c1", [crd(n) for n in CONSUMER_CRDS] + list(consumer_nodes))
    provider = FakeCluster("p1", [crd(n) for n in PROVIDER_CRDS] + list(provider_objects))
    return consumer, provider


def params(**extra):
    return {"consumer_id": "c1", "provider_id": "p1", "provider": {}, "wait_timeout": 5, **extra}


OFFER = f"p1: ResourceOffer {tenant_namespace('c1')}/resources"


# -- terms(params) ---------------------------------------------------------------------------------------------------


def test_unset_terms_are_the_controllers_defaults():
    agreed = terms(params())
    assert agreed["services"] == {
        "allowedTypes": list(DEFAULT_ALLOWED_SERVICE_TYPES),
        "allowedLoadBalancerClasses": [],
    }
    assert agreed["twinNamespaceNames"] == DEFAULT_TWIN_NAME_POLICY
    assert agreed["priorityClassName"] == TENANT_PRIORITY_CLASS
    assert agreed["allowedPriorityClasses"] == []
    assert agreed["containerDefaults"] == {"requests": DEFAULT_CONTAINER_REQUESTS, "limits": DEFAULT_CONTAINER_LIMITS}
    assert agreed["objectQuota"] == DEFAULT_OBJECT_QUOTA


def test_the_modules_own_defaults_give_the_same_terms_as_unset_options():
    """What AnsibleModule fills in from the argument spec is what terms() takes for an unset option."""
    required = {"consumer": {"kubeconfig": "/k1"}, "provider": {"kubeconfig": "/k2"}, "consumer_id": "c1"}
    result = ArgumentSpecValidator(peering_module.argument_spec()).validate(dict(required, provider_id="p1"))
    assert not result.error_messages
    assert terms(result.validated_parameters) == terms(params())


@pytest.mark.parametrize(
    ("option", "value", "path", "written"),
    [
        ("allowed_service_types", ["ClusterIP", "NodePort"], ("services", "allowedTypes"), ["ClusterIP", "NodePort"]),
        ("allowed_service_types", ["NodePort", "NodePort"], ("services", "allowedTypes"), ["NodePort"]),
        (
            "allowed_load_balancer_classes",
            ["example.com/internal-vip"],
            ("services", "allowedLoadBalancerClasses"),
            ["example.com/internal-vip"],
        ),
        ("twin_namespace_names", "Any", ("twinNamespaceNames",), "Any"),
        ("priority_class", "batch-low", ("priorityClassName",), "batch-low"),
        ("allowed_priority_classes", ["batch-high"], ("allowedPriorityClasses",), ["batch-high"]),
        (
            "container_defaults",
            {"requests": {"memory": "256Mi"}, "limits": {"memory": "4Gi", "nvidia.com/gpu": 1}},
            ("containerDefaults",),
            {
                "requests": dict(DEFAULT_CONTAINER_REQUESTS, memory="256Mi"),
                "limits": dict(DEFAULT_CONTAINER_LIMITS, memory="4Gi", **{"nvidia.com/gpu": "1"}),
            },
        ),
        ("object_quota", {"services": 500}, ("objectQuota",), dict(DEFAULT_OBJECT_QUOTA, services="500")),
        (
            "object_quota",
            {"count/jobs.batch": "20", "requests.storage": "1Ti"},
            ("objectQuota",),
            dict(DEFAULT_OBJECT_QUOTA, **{"count/jobs.batch": "20", "requests.storage": "1Ti"}),
        ),
    ],
)
def test_each_option_reaches_its_field_of_the_offer(option, value, path, written):
    Peering.validate(params(**{option: value}))
    spec = Peering(None, None, None, "c1", "p1").resource_offer(params(**{option: value}))["spec"]
    for key in path:
        spec = spec[key]
    assert spec == written


def test_a_consumers_announced_pod_ranges_are_written_only_when_there_are_some():
    peering = Peering(None, None, None, "c1", "p1")
    assert "consumerPodCIDRs" not in peering.resource_offer(params())["spec"]
    spec = peering.resource_offer(params(), ["10.244.0.0/16"])["spec"]
    assert spec["consumerPodCIDRs"] == ["10.244.0.0/16"]


# -- validation ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"allowed_service_types": ["NodePort", "Ingress"]}, r"allowed_service_types\[1\] must be one of ClusterIP"),
        ({"allowed_service_types": "NodePort"}, "allowed_service_types must be a list"),
        (
            {"allowed_load_balancer_classes": ["Bad Class"]},
            r"allowed_load_balancer_classes\[0\]: load-balancer class 'Bad Class'",
        ),
        ({"allowed_load_balancer_classes": ["Example.com/vip"]}, "the prefix 'Example.com' must be a DNS-1123"),
        ({"twin_namespace_names": "Same"}, "twin_namespace_names must be one of Suffixed, Any, got 'Same'"),
        ({"priority_class": "High_Priority"}, "priority_class: 'High_Priority' is not a DNS-1123 subdomain"),
        ({"priority_class": "a" * 254}, "priority_class: 'a{254}' is not a DNS-1123 subdomain"),
        ({"allowed_priority_classes": ["ok", "-bad"]}, r"allowed_priority_classes\[1\]: '-bad' is not a DNS-1123"),
        ({"container_defaults": {"requests": {"cpu": "lots"}}}, "container_defaults.requests.cpu: 'lots' is not a"),
        ({"container_defaults": {"limits": {"memory": "-1Gi"}}}, "container_defaults.limits.memory: '-1Gi' is not a"),
        ({"container_defaults": {"limits": {"cpu": True}}}, "container_defaults.limits.cpu: True is not a"),
        (
            {"container_defaults": {"requests": {"bad key!": "1"}}},
            "container_defaults.requests: resource name 'bad key!'",
        ),
        (
            {"container_defaults": {"requests": {"memory": "3Gi"}}},
            r"container_defaults: requests.memory 3Gi is above limits.memory 2Gi",
        ),
        (
            {"container_defaults": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}},
            r"container_defaults: requests.cpu 2 is above limits.cpu 500m",
        ),
        ({"container_defaults": {"request": {}}}, "container_defaults: unknown request"),
        ({"object_quota": {"services": "many"}}, "object_quota.services: 'many' is not a non-negative"),
        ({"object_quota": ["services"]}, "object_quota must be a mapping of resource names to quantities"),
    ],
)
def test_bad_terms_are_refused_naming_the_option(extra, message):
    with pytest.raises(InvalidInput, match=message):
        Peering.validate(params(**extra))


def test_valid_quantities_pass():
    for value in ("100m", "1.5", "2Gi", "1e3", "0", 3, 0.5):
        validation.quantity(value, "q")


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


# -- against (fake) clusters -----------------------------------------------------------------------------------------


def test_the_consumers_pod_ranges_from_its_real_nodes_reach_the_offer():
    consumer, provider = clusters(
        consumer_nodes=[
            node("a", pod_cidrs=["10.244.0.0/24", "fd00:10::/64"]),
            node("b", pod_cidr="10.244.1.0/24"),
            node("catamaran-p9", pod_cidr="10.99.0.0/24", virtual=True),  # a provider's, not the consumer's
        ]
    )
    module = FakeModule()
    plan = Peering(module, consumer, provider, "c1", "p1").present(params())
    assert plan.after[OFFER]["spec"]["consumerPodCIDRs"] == ["10.244.0.0/23", "fd00:10::/64"]
    assert module.ansible.warnings == []


def test_a_consumer_without_pod_ranges_is_warned_about():
    consumer, provider = clusters(consumer_nodes=[node("a")])
    module = FakeModule()
    plan = Peering(module, consumer, provider, "c1", "p1").present(params())
    assert "consumerPodCIDRs" not in plan.after[OFFER]["spec"]
    assert len(module.ansible.warnings) == 1
    assert "no node reports spec.podCIDRs" in module.ansible.warnings[0]


def test_the_shared_cluster_objects_are_applied_with_the_peering():
    consumer, provider = clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    plan = Peering(FakeModule(), consumer, provider, "c1", "p1").present(params())
    for obj in provider_cluster_objects():
        assert f"create p1: {obj['kind']} {obj['metadata']['name']}" in plan.actions


@pytest.mark.parametrize("obj", provider_cluster_objects(), ids=lambda obj: obj["kind"])
def test_cluster_scoped_objects_are_planned_created_then_left_alone(obj):
    provider = FakeCluster("p1")
    assert kube.KINDS[(obj["apiVersion"], obj["kind"])][1] is False
    plural, name = kube.KINDS[(obj["apiVersion"], obj["kind"])][0], obj["metadata"]["name"]
    assert provider.path(obj["apiVersion"], obj["kind"], name) == f"/apis/{obj['apiVersion']}/{plural}/{name}"
    plan = ChangeSet(check_mode=True)
    plan.apply(provider, obj)
    assert plan.changed
    assert provider.objects == {}  # a dry run changes nothing
    assert plan.after[f"p1: {obj['kind']} {name}"] == obj
    changes = ChangeSet(check_mode=False)
    changes.apply(provider, obj)
    assert changes.changed
    again = ChangeSet(check_mode=True)
    again.apply(provider, obj)
    assert not again.changed


def test_a_priority_class_the_provider_lacks_is_refused_before_any_change():
    consumer, provider = clusters()
    peering = Peering(FakeModule(), consumer, provider, "c1", "p1")
    with pytest.raises(InvalidInput, match="p1: priority_class batch-low: no such PriorityClass"):
        peering.check_clusters(params(priority_class="batch-low"))
    provider._store({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "batch-low"}})
    peering.check_clusters(params(priority_class="batch-low"))
    peering.check_clusters(params())  # catamaran-tenant is applied with the peering


def tenant_namespace_object(consumer_id):
    (namespace,) = [obj for obj in tenant_manifests(consumer_id) if obj["kind"] == "Namespace"]
    return namespace


@pytest.mark.parametrize(("other_tenant", "removed"), [(True, False), (False, True)])
def test_unpeering_removes_the_shared_objects_only_with_the_last_tenant(other_tenant, removed):
    objects = [*provider_cluster_objects(), tenant_namespace_object("c1")]
    if other_tenant:
        objects.append(tenant_namespace_object("c2"))
    provider = FakeCluster("p1", objects)
    Peering(FakeModule(check_mode=False), None, provider, "c1", "p1")._remove_tenant(ChangeSet(False), 5)
    shared = [(obj["kind"], obj["metadata"]["name"]) for obj in provider_cluster_objects()]
    gone = [entry for entry in provider.deleted if entry in shared]
    assert gone == (list(reversed(shared)) if removed else [])


# -- the inventory model and the role pass the same options ----------------------------------------------------------


def inventory(allowances=None, **entry):
    provider = {"catamaran_cluster_id": "cluster-2", "catamaran_kubeconfig": "/k2"}
    if allowances is not None:
        provider["catamaran_tenant_allowances"] = allowances
    return {
        "h1": {
            "catamaran_cluster_id": "cluster-1",
            "catamaran_kubeconfig": "/k1",
            "catamaran_peerings": [{"provider": "cluster-2", **entry}],
        },
        "h2": provider,
    }


LENT = {"service_types": ["NodePort"], "twin_namespace_names": ["Suffixed", "Any"], "priority_classes": ["gold"]}


def test_the_model_passes_each_term_as_set_and_leaves_the_rest_to_the_module():
    entry = {
        "allowed_service_types": ["NodePort"],
        "twin_namespace_names": "Any",
        "allowed_priority_classes": ["gold"],
        "container_defaults": {"limits": {"memory": "4Gi"}},
        "object_quota": {"services": 500},
    }
    (peering,) = federation_model(inventory(LENT, **entry), ["h1", "h2"])["peerings"]["cluster-1"]
    for option in validation.TERMS_OPTIONS:
        assert peering.get(option) == entry.get(option)
    (unset,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    assert not set(validation.TERMS_OPTIONS) & set(unset)  # left out, for the role to omit


@pytest.mark.parametrize(
    ("entry", "lent"),
    [
        ({"allowed_service_types": ["ClusterIP", "LoadBalancer"]}, "catamaran_tenant_allowances.service_types"),
        ({"twin_namespace_names": "Any"}, "catamaran_tenant_allowances.twin_namespace_names"),
        ({"allowed_priority_classes": ["platinum"]}, "catamaran_tenant_allowances.priority_classes"),
        ({"allowed_load_balancer_classes": ["example.com/vip"]}, "catamaran_tenant_allowances.load_balancer_classes"),
    ],
)
def test_a_consumer_entry_cannot_ask_what_the_provider_does_not_lend(entry, lent):
    """The allowances are the provider's own inventory entry's to give, as privileged Pod Security is."""
    with pytest.raises(AnsibleFilterError, match=r"not lent by provider cluster-2 \(host h2: " + lent):
        federation_model(inventory({} if "Any" in str(entry) else None, **entry), ["h1", "h2"])
    with pytest.raises(AnsibleFilterError, match=r"host h2: catamaran_tenant_allowances: unknown keys \['nodeports'\]"):
        federation_model(inventory({"nodeports": True}), ["h1", "h2"])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"allowed_service_types": ["Ingress"]}, r"catamaran_peerings\[0\]: allowed_service_types\[0\] must be one"),
        ({"twin_namespace_names": "Same"}, r"catamaran_peerings\[0\]: twin_namespace_names must be one of"),
        ({"priority_class": "Gold"}, r"catamaran_peerings\[0\]: priority_class: 'Gold' is not a DNS-1123"),
        ({"object_quota": {"services": "lots"}}, r"catamaran_peerings\[0\]: object_quota.services: 'lots'"),
        ({"container_defaults": {"requests": {"cpu": "4"}}}, r"container_defaults: requests.cpu 4 is above limits"),
        ({"allowed_services": ["NodePort"]}, r"catamaran_peerings\[0\]: unknown keys \['allowed_services'\]"),
    ],
)
def test_bad_terms_in_the_inventory_name_the_host_and_field(entry, message):
    with pytest.raises(AnsibleFilterError, match=r"host h1: .*" + message):
        federation_model(inventory(**entry), ["h1", "h2"])


def test_the_role_validates_and_passes_every_option_the_model_resolves():
    (peering,) = federation_model(inventory(), ["h1", "h2"])["peerings"]["cluster-1"]
    specs = yaml.safe_load((REPO_ROOT / "roles/peering/meta/argument_specs.yml").read_text())["argument_specs"]
    for entry_point in ("main", "prune"):
        accepted = specs[entry_point]["options"]["peering_providers"]["options"]
        assert set(peering) - set(accepted) == set(), entry_point
    (task,) = yaml.safe_load((REPO_ROOT / "roles/peering/tasks/main.yml").read_text())
    arguments = task["catamaran.federation.peering"]
    for option in validation.TERMS_OPTIONS:
        assert arguments[option] == "{{ item." + option + " | default(omit, true) }}"
    module_options = peering_module.argument_spec()
    role_options = specs["main"]["options"]["peering_providers"]["options"]
    for option in validation.TERMS_OPTIONS:
        assert role_options[option]["type"] == module_options[option]["type"]
        assert role_options[option].get("choices") == module_options[option].get("choices")


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
