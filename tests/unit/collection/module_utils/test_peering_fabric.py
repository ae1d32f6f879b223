"""What a peering exchanges for the network fabric (plugins/module_utils/peering.py): keys kept on their own
side, public keys and ports across, remapped ranges and the consent.
"""

from __future__ import annotations

import base64
import json
import sys

import pytest
import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils import fabric, fabric_keys
from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering

from tests.unit.collection.peering_fakes import OFFER, FakeModule, clusters, node, params, tenant_credential

FOREIGN = "c1: ForeignCluster catamaran-system/p1"
CONSUMER_KEY = "c1: Secret catamaran-fabric/catamaran-fabric-to-p1"
PROVIDER_KEY = "p1: Secret catamaran-fabric/catamaran-fabric-from-c1"
FABRIC = {"network": {"mode": "fabric", "gateway_address": "192.0.2.10", "gateway_port": 51820}}


def fabric_clusters(**nodes):
    return clusters(provider_objects=[tenant_credential("c1"), tenant_credential("c2")], **nodes)


def present(consumer, provider, check_mode=False, **extra):
    return Peering(FakeModule(check_mode), consumer, provider, "c1", "p1").present(params(**FABRIC, **extra))


def stored_key(cluster, name, namespace="catamaran-fabric"):
    secret = cluster.get("v1", "Secret", name, namespace)
    return base64.b64decode(secret["data"]["privateKey"]).decode()


def test_each_side_keeps_its_key_and_gets_the_others_public_key():
    consumer, provider = fabric_clusters(consumer_nodes=[node("a", pod_cidr="10.244.0.0/24")])
    changes = present(consumer, provider)
    consumer_key = stored_key(consumer, "catamaran-fabric-to-p1")
    provider_key = stored_key(provider, "catamaran-fabric-from-c1")
    assert changes.after[FOREIGN]["spec"]["networking"] == {
        "mode": "Fabric",
        "gateway": {"endpoint": "192.0.2.10:51820", "publicKey": fabric_keys.public_key(provider_key)},
    }
    assert changes.after[OFFER]["spec"]["network"] == {
        "mode": "Fabric",
        "gateway": {"listenPort": 51820, "publicKey": fabric_keys.public_key(consumer_key)},
    }
    # No private key crosses, and none is shown: the diff holds digests only.
    assert provider_key not in json.dumps(list(consumer.objects.values()))
    assert consumer_key not in json.dumps(list(provider.objects.values()))
    shown = json.dumps([changes.after, changes.before])
    assert consumer_key not in shown
    assert provider_key not in shown
    assert changes.after[CONSUMER_KEY]["data"]["privateKey"].startswith("<redacted sha256:")


def test_keys_are_kept_unless_rotated():
    consumer, provider = fabric_clusters()
    present(consumer, provider)
    first = stored_key(consumer, "catamaran-fabric-to-p1"), stored_key(provider, "catamaran-fabric-from-c1")
    again = present(consumer, provider, check_mode=True)
    assert not again.changed
    rotated_params = {**FABRIC["network"], "rotate_keys": True}
    Peering(FakeModule(False), consumer, provider, "c1", "p1").present(params(network=rotated_params))
    second = stored_key(consumer, "catamaran-fabric-to-p1"), stored_key(provider, "catamaran-fabric-from-c1")
    assert first[0] != second[0]
    assert first[1] != second[1]


def test_keys_kept_where_release_0_2_0_put_them_move_to_the_fabric_namespace():
    consumer, provider = fabric_clusters()
    present(consumer, provider)
    old = {}
    for cluster, name in ((consumer, "catamaran-fabric-to-p1"), (provider, "catamaran-fabric-from-c1")):
        secret = cluster.get("v1", "Secret", name, "catamaran-fabric")
        cluster.objects.pop(("v1", "Secret", "catamaran-fabric", name))
        cluster._store({**secret, "metadata": {**secret["metadata"], "namespace": "catamaran-system"}})
        old[name] = stored_key(cluster, name, "catamaran-system")
    changes = present(consumer, provider)
    assert stored_key(consumer, "catamaran-fabric-to-p1") == old["catamaran-fabric-to-p1"]  # the tunnel stays up
    assert stored_key(provider, "catamaran-fabric-from-c1") == old["catamaran-fabric-from-c1"]
    assert consumer.get("v1", "Secret", "catamaran-fabric-to-p1", "catamaran-system") is None
    assert provider.get("v1", "Secret", "catamaran-fabric-from-c1", "catamaran-system") is None
    assert "delete c1: Secret catamaran-system/catamaran-fabric-to-p1" in changes.actions


def test_the_peering_leaves_the_namespaces_the_controller_role_labelled_as_they_are():
    consumer, provider = fabric_clusters()
    for cluster in (consumer, provider):
        for name, level in (("catamaran-system", "restricted"), ("catamaran-fabric", "privileged")):
            labels = {"pod-security.kubernetes.io/enforce": level}
            cluster._store({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    present(consumer, provider)
    for cluster in (consumer, provider):
        for name, level in (("catamaran-system", "restricted"), ("catamaran-fabric", "privileged")):
            labels = cluster.get("v1", "Namespace", name)["metadata"]["labels"]
            assert labels == {"pod-security.kubernetes.io/enforce": level}


def test_each_tenant_of_a_provider_gets_its_own_port_and_keeps_it():
    consumer, provider = fabric_clusters()
    present(consumer, provider)
    other = {
        "apiVersion": "offloading.catamaran.io/v1alpha1",
        "kind": "ResourceOffer",
        "metadata": {"name": "resources", "namespace": "catamaran-tenant-c9"},
        "spec": {"network": {"mode": "Fabric", "gateway": {"listenPort": 51821, "publicKey": "x"}}},
    }
    provider._store(other)
    second_tenant = Peering(FakeModule(False), clusters()[0], provider, "c2", "p1")
    changes = second_tenant.present(params(consumer_id="c2", **FABRIC))
    offer = changes.after["p1: ResourceOffer catamaran-tenant-c2/resources"]
    assert offer["spec"]["network"]["gateway"]["listenPort"] == 51822  # 51820 is c1's, 51821 c9's
    assert not present(consumer, provider, check_mode=True).changed  # c1 keeps 51820


def test_flat_peerings_carry_no_key_and_leaving_the_fabric_removes_them():
    consumer, provider = fabric_clusters()
    present(consumer, provider)
    changes = Peering(FakeModule(False), consumer, provider, "c1", "p1").present(params())
    assert changes.after[FOREIGN]["spec"]["networking"] == {"mode": "Flat"}
    assert consumer.get("v1", "Secret", "catamaran-fabric-to-p1", "catamaran-fabric") is None
    assert provider.get("v1", "Secret", "catamaran-fabric-from-c1", "catamaran-fabric") is None
    assert CONSUMER_KEY in changes.before
    assert PROVIDER_KEY in changes.before


def test_fabric_without_the_providers_gateway_address_fails_before_any_change():
    with pytest.raises(InvalidInput, match=r"network\.gateway_address \(or network\.gateway_service\) is required"):
        Peering.validate(params(network={"mode": "fabric"}))


SERVICE = "p1: Service catamaran-fabric/catamaran-gw-c1"


def gateway_pod(node_name, phase="Running"):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "catamaran-gateway-x",
            "namespace": "catamaran-fabric",
            "labels": {"app.kubernetes.io/name": "catamaran", "app.kubernetes.io/component": "gateway"},
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


def addressed_node(name, **addresses):
    return {
        **node(name),
        "status": {"addresses": [{"type": kind, "address": address} for kind, address in addresses.items()]},
    }


def behind_a_service(service, address=None):
    return {"network": {**FABRIC["network"], "gateway_address": address, "gateway_service": service}}


def present_behind(consumer, provider, service, address=None, check_mode=False, consumer_id="c1"):
    """A peering whose provider's gateway is behind a Service."""
    return Peering(FakeModule(check_mode), consumer, provider, consumer_id, "p1").present(
        params(consumer_id=consumer_id, **behind_a_service(service, address))
    )


def test_a_gateway_behind_a_node_port_is_published_at_its_nodes_address_and_the_allocated_port():
    consumer, provider = fabric_clusters()
    provider._store(gateway_pod("gw-node"))
    provider._store(addressed_node("gw-node", InternalIP="10.0.0.7"))
    provider._store(addressed_node("other", InternalIP="10.0.0.8"))
    changes = present_behind(consumer, provider, {"type": "NodePort"})
    service = changes.after[SERVICE]
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["externalTrafficPolicy"] == "Local"
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "catamaran",
        "app.kubernetes.io/component": "gateway",
    }
    assert service["spec"]["ports"] == [
        {"name": "wireguard", "protocol": "UDP", "port": 51820, "targetPort": 51820, "nodePort": 30000}
    ]
    assert changes.after[FOREIGN]["spec"]["networking"]["gateway"]["endpoint"] == "10.0.0.7:30000"
    assert changes.after[OFFER]["spec"]["network"]["gateway"]["listenPort"] == 51820  # the gateway's own port
    again = present_behind(consumer, provider, {"type": "NodePort"}, check_mode=True)
    assert not again.changed, again.actions  # the allocated port is kept


def test_an_external_address_is_preferred_and_a_given_address_overrides_the_discovered_one():
    consumer, provider = fabric_clusters()
    provider._store(gateway_pod("gw-node"))
    provider._store(addressed_node("gw-node", InternalIP="10.0.0.7", ExternalIP="203.0.113.7"))
    changes = present_behind(consumer, provider, {"type": "NodePort"})
    assert changes.after[FOREIGN]["spec"]["networking"]["gateway"]["endpoint"] == "203.0.113.7:30000"
    given = present_behind(consumer, provider, {"type": "NodePort"}, address="gw.example.org")
    assert given.after[FOREIGN]["spec"]["networking"]["gateway"]["endpoint"] == "gw.example.org:30000"


def test_a_first_node_port_given_each_tenant_gets_it_plus_its_offset():
    consumer, provider = fabric_clusters()
    provider._store(gateway_pod("gw-node"))
    provider._store(addressed_node("gw-node", InternalIP="10.0.0.7"))
    present_behind(consumer, provider, {"type": "NodePort", "node_port": 31000})
    second = present_behind(clusters()[0], provider, {"type": "NodePort", "node_port": 31000}, consumer_id="c2")
    assert second.after["p1: Service catamaran-fabric/catamaran-gw-c2"]["spec"]["ports"][0]["nodePort"] == 31001
    assert second.after["c1: ForeignCluster catamaran-system/p1"]["spec"]["networking"]["gateway"]["endpoint"] == (
        "10.0.0.7:31001"
    )


def test_a_node_port_without_a_running_gateway_pod_fails_before_any_change_and_a_check_run_plans_it():
    consumer, provider = fabric_clusters()
    provider._store(gateway_pod("gw-node", phase="Pending"))
    with pytest.raises(InvalidInput, match=r"catamaran-gw-c1 \(NodePort\): no gateway pod runs in catamaran-fabric"):
        present_behind(consumer, provider, {"type": "NodePort"})
    assert provider.get("v1", "Service", "catamaran-gw-c1", "catamaran-fabric") is None
    assert provider.get("v1", "Secret", "catamaran-fabric-from-c1", "catamaran-fabric") is None
    plan = present_behind(consumer, provider, {"type": "NodePort"}, check_mode=True)
    assert any("publish the gateway node's address once it runs" in action for action in plan.actions)


def test_a_gateway_stopped_after_its_address_was_published_keeps_that_address_with_a_warning():
    consumer, provider = fabric_clusters()
    provider._store(gateway_pod("gw-node"))
    provider._store(addressed_node("gw-node", InternalIP="10.0.0.7"))
    present_behind(consumer, provider, {"type": "NodePort"})
    provider.objects.pop(("v1", "Pod", "catamaran-fabric", "catamaran-gateway-x"))
    module = FakeModule(False)
    again = Peering(module, consumer, provider, "c1", "p1").present(params(**behind_a_service({"type": "NodePort"})))
    assert not again.changed
    assert module.ansible.warnings[1:] == [
        "p1: Service catamaran-fabric/catamaran-gw-c1 (NodePort): no gateway pod runs in catamaran-fabric (NodePort "
        "needs the gateway as a pod: controller_mode deployment with controller_gateway); the address published "
        "before, 10.0.0.7, is kept"
    ]


def test_a_load_balancer_is_published_at_its_address_and_the_tenants_port():
    consumer, provider = fabric_clusters()
    provider._store(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "catamaran-gw-c1", "namespace": "catamaran-fabric"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 51820, "nodePort": 30500}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}},
        }
    )
    original_apply = provider.apply
    provider.apply = lambda obj, dry_run=False, force=True: {
        **original_apply(obj, dry_run, force),
        "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}},
    }
    changes = present_behind(consumer, provider, {"type": "LoadBalancer"})
    assert changes.after[FOREIGN]["spec"]["networking"]["gateway"]["endpoint"] == "lb.example.net:51820"


def test_a_load_balancer_without_an_address_fails_naming_the_service():
    consumer, provider = fabric_clusters()
    with pytest.raises(InvalidInput, match=r"catamaran-gw-c1 \(LoadBalancer\) has no address after 5s"):
        present_behind(consumer, provider, {"type": "LoadBalancer"})


def test_leaving_the_service_for_the_nodes_address_deletes_it():
    consumer, provider = fabric_clusters()
    provider._store(gateway_pod("gw-node"))
    provider._store(addressed_node("gw-node", InternalIP="10.0.0.7"))
    present_behind(consumer, provider, {"type": "NodePort"})
    changes = present(consumer, provider)
    assert SERVICE in changes.before
    assert changes.after[SERVICE] is None
    assert changes.after[FOREIGN]["spec"]["networking"]["gateway"]["endpoint"] == "192.0.2.10:51820"


def test_the_services_selector_is_the_gateway_pods_labels_the_controller_role_writes():
    deployment = yaml.safe_load((REPO_ROOT / "roles" / "controller" / "vars" / "deployment.yml").read_text())
    assert deployment["__controller_gateway_selector"] == fabric.GATEWAY_POD_SELECTOR
    assert deployment["__controller_gateway_namespace"] == "catamaran-fabric"


def test_a_service_type_outside_the_two_fails_before_any_change():
    with pytest.raises(InvalidInput, match=r"network\.gateway_service\.type: 'ClusterIP' is not one of"):
        Peering.validate(params(**behind_a_service({"type": "ClusterIP"})))


def test_overlapping_pod_ranges_are_remapped_each_way_and_the_mapping_is_kept():
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.100.0.0/24"), node("b", pod_cidr="10.100.255.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.100.255.0/24")],
    )
    changes = present(consumer, provider)
    networking = changes.after[FOREIGN]["spec"]["networking"]
    offer = changes.after[OFFER]["spec"]
    # The consumer sees the provider's 10.100.255.0/24 at a free /24 of the pool; the provider sees the consumer's
    # 10.100.0.0/16 at another range, which is all it is told of the consumer's pods.
    assert networking["podCIDRRemap"] == "100.64.0.0/24"
    assert offer["network"]["localPodCIDRRemap"] == [{"podCIDR": "10.100.255.0/24", "seenAs": "100.64.0.0/24"}]
    assert networking["localPodCIDRRemap"] == [{"podCIDR": "10.100.0.0/16", "seenAs": "100.64.0.0/16"}]
    assert offer["consumerPodCIDRs"] == ["100.64.0.0/16"]
    assert not present(consumer, provider, check_mode=True).changed  # the same mapping on the next run


def test_distinct_pod_ranges_are_not_remapped():
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.102.0.0/24")],
    )
    changes = present(consumer, provider)
    networking = changes.after[FOREIGN]["spec"]["networking"]
    assert "podCIDRRemap" not in networking
    assert "localPodCIDRRemap" not in networking
    assert changes.after[OFFER]["spec"]["consumerPodCIDRs"] == ["10.101.0.0/24"]


def other_fabric_provider(seen_as, consumer_seen_as):
    """The consumer's ForeignCluster of another fabric provider, p2, peered earlier, its ranges remapped."""
    return {
        "apiVersion": "core.catamaran.io/v1alpha1",
        "kind": "ForeignCluster",
        "metadata": {"name": "p2", "namespace": "catamaran-system"},
        "spec": {
            "clusterID": "p2",
            "networking": {
                "mode": "Fabric",
                "podCIDRRemap": seen_as,
                "localPodCIDRRemap": [{"podCIDR": "10.100.0.0/16", "seenAs": consumer_seen_as}],
            },
        },
        "status": {"network": {"remotePodCIDRs": [seen_as]}},
    }


def test_a_provider_reaches_the_consumers_other_providers_through_it_at_ranges_kept_apart():
    consumer, provider = clusters(
        consumer_nodes=[
            node("a", pod_cidr="10.100.0.0/24"),
            node("b", pod_cidr="10.100.255.0/24"),
            other_fabric_provider("100.64.0.0/24", "100.64.0.0/16"),
        ],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.100.255.0/24")],
    )
    changes = present(consumer, provider)
    networking = changes.after[FOREIGN]["spec"]["networking"]
    offer = changes.after[OFFER]["spec"]
    # p1's pods as the consumer sees them stay apart from p2's and from p2's view of the consumer (a packet from p2
    # to p1 must not look like one for the consumer's own pods); p1's view of the consumer stays apart from p2's pods.
    assert networking["podCIDRRemap"] == "100.65.0.0/24"
    assert networking["localPodCIDRRemap"] == [{"podCIDR": "10.100.0.0/16", "seenAs": "100.65.0.0/16"}]
    # Announced to p1: the consumer's pods, then p2's, both behind the consumer's gateway.
    assert offer["consumerPodCIDRs"] == ["100.65.0.0/16", "100.64.0.0/24"]


def test_another_providers_range_that_clashes_with_the_providers_own_is_not_announced():
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24"), other_fabric_provider("10.102.0.0/24", "10.101.0.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.102.0.0/24")],
    )
    offer = present(consumer, provider).after[OFFER]["spec"]
    assert offer["consumerPodCIDRs"] == ["10.101.0.0/24"]


def test_a_provider_reaches_only_the_peers_it_is_told_to():
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24"), other_fabric_provider("10.103.0.0/24", "10.101.0.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.102.0.0/24")],
    )
    fabric = {"network": {**FABRIC["network"], "reach_peers": []}}
    changes = Peering(FakeModule(False), consumer, provider, "c1", "p1").present(params(**fabric))
    assert changes.after[OFFER]["spec"]["consumerPodCIDRs"] == ["10.101.0.0/24"]
    assert present(consumer, provider).after[OFFER]["spec"]["consumerPodCIDRs"] == ["10.101.0.0/24", "10.103.0.0/24"]


def service_cidr(*cidrs):
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"},
        "spec": {"cidrs": list(cidrs)},
    }


def test_a_pod_range_over_the_other_sides_services_or_nodes_is_remapped_never_routed_there():
    provider_node = node("p", pod_cidr="10.102.0.0/24")
    provider_node["status"] = {"addresses": [{"type": "InternalIP", "address": "10.101.0.7"}]}
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24"), service_cidr("10.102.0.0/16")],
        provider_objects=[tenant_credential(), provider_node, service_cidr("10.0.0.0/24")],
    )
    changes = present(consumer, provider)
    networking = changes.after[FOREIGN]["spec"]["networking"]
    # The provider's pods sit in the consumer's Service range, the consumer's around a provider node's address:
    # each side sees the other's at a free range of the pool instead.
    assert networking["podCIDRRemap"] == "100.64.0.0/24"
    assert changes.after[OFFER]["spec"]["consumerPodCIDRs"] == ["100.64.0.0/24"]  # the provider's view


def announce(provider, pod_cidrs):
    """The provider's manager (or its administrator) announcing pod ranges in the tenant's ResourceOffer."""
    offer = provider.get("offloading.catamaran.io/v1alpha1", "ResourceOffer", "resources", "catamaran-tenant-c1")
    offer["status"] = {"podCIDRs": pod_cidrs}
    provider._store(offer)


def test_the_first_peering_records_the_providers_ranges_as_the_consent_and_a_later_run_keeps_it():
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.102.0.0/24")],
    )
    changes = present(consumer, provider)
    assert changes.after[FOREIGN]["spec"]["networking"]["podCIDRs"] == ["10.102.0.0/24"]
    # The provider's administrator announces more: no run widens the consent by itself, and the run says so.
    announce(provider, ["10.102.0.0/24", "8.8.8.0/24"])
    module_peering = Peering(FakeModule(True), consumer, provider, "c1", "p1")
    again = module_peering.present(params(**FABRIC))
    assert not again.changed
    assert "8.8.8.0/24 (outside the consented ranges (10.102.0.0/24))" in module_peering.module.ansible.warnings[-1]


def test_a_new_consent_is_a_change_the_plan_shows():
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.102.0.0/24")],
    )
    present(consumer, provider)
    plan = present(consumer, provider, check_mode=True, pod_cidrs=["10.102.0.0/24", "10.103.0.1/16"])
    assert plan.changed
    assert plan.before[FOREIGN]["spec"]["networking"]["podCIDRs"] == ["10.102.0.0/24"]
    assert plan.after[FOREIGN]["spec"]["networking"]["podCIDRs"] == ["10.102.0.0/24", "10.103.0.0/16"]
    assert consumer.get("core.catamaran.io/v1alpha1", "ForeignCluster", "p1", "catamaran-system")["spec"]["networking"][
        "podCIDRs"
    ] == ["10.102.0.0/24"]  # check mode changed nothing


def test_a_stated_consent_must_be_ranges():
    with pytest.raises(InvalidInput, match=r"pod_cidrs\[0\]"):
        Peering.validate(params(**FABRIC, pod_cidrs=["eight.eight"]))


def test_an_upgrade_plan_records_the_consent_once_the_crds_it_brings_serve_the_field():
    """A check-mode run of an upgrade: the crds step's dry run changed nothing, so the served ForeignCluster CRD is
    the previous release's, which a dry run of spec.networking.podCIDRs would fail against."""
    consumer, provider = clusters(
        consumer_nodes=[node("a", pod_cidr="10.101.0.0/24")],
        provider_objects=[tenant_credential(), node("p", pod_cidr="10.102.0.0/24")],
    )
    served = consumer.crds["foreignclusters.core.catamaran.io"]
    for version in served["spec"]["versions"]:
        networking = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["networking"]
        networking["properties"].pop("podCIDRs")
    plan = present(consumer, provider, check_mode=True)
    assert "podCIDRs" not in plan.after[FOREIGN]["spec"]["networking"]
    assert any("record the consent to p1's pod ranges 10.102.0.0/24" in action for action in plan.actions)
