"""The provider's terms on a tenant's pod spec and twins (provider/terms.py): pure logic."""

from __future__ import annotations

from lightkube.models.core_v1 import PodSpec

from catamaran.constants import DEFAULT_CONTAINER_LIMITS, DEFAULT_CONTAINER_REQUESTS, TENANT_PRIORITY_CLASS
from catamaran.provider import terms
from catamaran.provider.offers import TenantTerms


def test_every_pod_spec_field_has_a_decision():
    """A field Kubernetes adds must be reviewed into the table (until then it is refused, which this flags)."""
    assert set(PodSpec.__annotations__) <= set(terms.POD_SPEC_FIELDS)


def test_unknown_and_refused_fields_are_named():
    spec = {"containers": [{"name": "a"}], "nodeName": "n1", "runtimeClassName": "kata", "futureField": {"x": 1}}
    assert terms.refused_fields(spec) == ["futureField", "nodeName", "runtimeClassName"]
    assert terms.refused_fields({"containers": [], "resourceClaims": []}) == []  # empty is unset


def test_pod_affinity_may_not_reach_other_namespaces():
    own = {"podAffinityTerm": {"topologyKey": "zone", "labelSelector": {}}, "weight": 1}
    assert not terms.pod_affinity_reaches_out(
        {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own]}}}
    )
    other = {"topologyKey": "zone", "namespaceSelector": {}}
    assert terms.pod_affinity_reaches_out(
        {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [other]}}}
    )


def test_rewritten_fields_and_container_defaults():
    spec = {
        "containers": [
            {"name": "best-effort"},
            {"name": "limited", "resources": {"limits": {"memory": "64Mi"}}},
            {"name": "big", "resources": {"requests": {"cpu": "3"}}},
        ],
        "priorityClassName": "provider-critical",
        "priority": 1000000000,
        "preemptionPolicy": "PreemptLowerPriority",
        "serviceAccountName": "builder",
        "schedulerName": "custom",
        "automountServiceAccountToken": True,
    }
    rewritten = terms.tenant_pod_spec(spec, TenantTerms())
    assert rewritten["priorityClassName"] == TENANT_PRIORITY_CLASS
    # Its own service account is refused; a token it asks for is the twin's default ServiceAccount's (bound to nothing).
    assert rewritten["serviceAccountName"] == "default"
    assert rewritten["automountServiceAccountToken"] is True
    unasked = terms.tenant_pod_spec(
        {k: v for k, v in spec.items() if k != "automountServiceAccountToken"}, TenantTerms()
    )
    assert unasked["automountServiceAccountToken"] is False
    assert not {"priority", "preemptionPolicy", "schedulerName"} & set(rewritten)
    best, limited, big = (c["resources"] for c in rewritten["containers"])
    assert best == {"requests": DEFAULT_CONTAINER_REQUESTS, "limits": DEFAULT_CONTAINER_LIMITS}
    assert limited["requests"]["memory"] == "64Mi"  # a request defaults to its own limit, as the API server does
    assert big["limits"]["cpu"] == "3"  # a default limit below the request is raised to it
    allowed = TenantTerms(allowed_priority_classes=("provider-critical",))
    assert terms.tenant_pod_spec(spec, allowed)["priorityClassName"] == "provider-critical"


def test_twin_names_and_endpoint_ranges():
    assert terms.twin_name_allowed("web-c1", "c1", "Suffixed")
    assert not terms.twin_name_allowed("payments", "c1", "Suffixed")
    assert not terms.twin_name_allowed("-c1", "c1", "Suffixed")
    assert terms.twin_name_allowed("payments", "c1", "Any")
    assert terms.endpoint_ranges(["10.101.0.0/16"], ["10.102.0.0/16"]) == (["10.101.0.0/16"], "")
    ranges, problem = terms.endpoint_ranges(["10.100.0.0/16", "bad"], ["10.100.0.0/24"])
    assert ranges == []
    assert "overlaps the provider's pod range 10.100.0.0/24" in problem
    assert "bad (not a CIDR)" in problem


def test_terms_from_the_offer_spec_keep_cluster_ip_and_refuse_unknown_values():
    parsed = TenantTerms.from_offer_spec(
        {"services": {"allowedTypes": ["NodePort", "Bogus"]}, "twinNamespaceNames": "Whatever"}
    )
    assert parsed.service_types == ("ClusterIP", "NodePort")
    assert parsed.twin_names == "Suffixed"
    guards = terms.twin_guards("web-c1", parsed)
    assert [g["kind"] for g in guards] == ["LimitRange", "ResourceQuota"]


def test_a_tenant_pods_grace_period_is_cut_to_the_terms_maximum():
    bounded = TenantTerms.from_offer_spec({"pods": {"maxTerminationGracePeriodSeconds": 60}})
    endless = {"containers": [{"name": "a"}], "terminationGracePeriodSeconds": 315_360_000}
    assert terms.tenant_pod_spec(endless, bounded)["terminationGracePeriodSeconds"] == 60
    assert terms.tenant_pod_spec(endless, TenantTerms())["terminationGracePeriodSeconds"] == 300
    short = {"containers": [{"name": "a"}], "terminationGracePeriodSeconds": 5}
    assert terms.tenant_pod_spec(short, bounded)["terminationGracePeriodSeconds"] == 5
    assert "terminationGracePeriodSeconds" not in terms.tenant_pod_spec({"containers": []}, bounded)  # 30, the API's
    none = TenantTerms.from_offer_spec({"pods": {"maxTerminationGracePeriodSeconds": 0}})
    assert terms.tenant_pod_spec(endless, none)["terminationGracePeriodSeconds"] == 0


def test_only_the_annotations_the_terms_allow_reach_the_providers_pod():
    asked = {
        "kubectl.kubernetes.io/default-container": "app",
        "container.apparmor.security.beta.kubernetes.io/app": "runtime/default",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "karpenter.sh/do-not-disrupt": "true",
        "k8s.v1.cni.cncf.io/networks": "provider-net",
        "prometheus.io/scrape": "true",
        "sidecar.istio.io/inject": "true",
    }
    assert terms.tenant_pod_annotations(asked, TenantTerms()) == {
        "kubectl.kubernetes.io/default-container": "app",
        "container.apparmor.security.beta.kubernetes.io/app": "runtime/default",
    }
    lent = TenantTerms.from_offer_spec({"pods": {"allowedAnnotations": ["prometheus.io/*"]}})
    assert terms.tenant_pod_annotations(asked, lent) == {"prometheus.io/scrape": "true"}
    assert terms.tenant_pod_annotations(asked, TenantTerms.from_offer_spec({"pods": {"allowedAnnotations": []}})) == {}
    # A prefix covers its own keys only, not a longer domain that starts the same.
    assert terms.tenant_pod_annotations({"prometheus.io.evil/x": "1"}, lent) == {}


def test_a_twins_pods_reach_their_twin_the_dns_and_the_fabric_and_what_the_terms_lend():
    from catamaran.provider.offers import TenantTerms
    from catamaran.provider.terms import Reachable, twin_isolation

    reachable = Reachable(dns=("172.31.0.1", "172.31.0.1"), provider_api_server=(("172.31.0.1", 6443),))
    policy = twin_isolation("shop-c1", TenantTerms(), ["10.244.0.0/16"], reachable)
    spec = policy["spec"]
    assert (policy["metadata"]["namespace"], spec["podSelector"], spec["policyTypes"]) == (
        "shop-c1",
        {},
        ["Ingress", "Egress"],
    )
    fabric = [{"ipBlock": {"cidr": "10.244.0.0/16"}}]
    assert spec["ingress"] == [{"from": [{"podSelector": {}}]}, {"from": fabric}]
    own, dns, back = spec["egress"]
    assert own == {"to": [{"podSelector": {}}]}
    assert back == {"to": fabric}
    assert {"ipBlock": {"cidr": "172.31.0.1/32"}} in dns["to"]
    assert len(dns["to"]) == 2
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    # Nothing announced yet: no fabric rule at all (an empty `from` would admit every source).
    bare = twin_isolation("shop-c1", TenantTerms(), [])["spec"]
    assert all(rule.get("from") for rule in bare["ingress"])
    assert all(rule.get("to") for rule in bare["egress"])
    assert len(bare["ingress"]) == 1
    lent = TenantTerms.from_offer_spec(
        {
            "isolation": {
                "ingressFromNamespaces": ["ingress-nginx"],
                "egressToNamespaces": ["shared-db"],
                "egressToCIDRs": ["203.0.113.0/24", "198.51.100.7/32"],
                "egressToAPIServer": True,
            }
        }
    )
    spec = twin_isolation("shop-c1", lent, [], reachable)["spec"]
    api = {"to": [{"ipBlock": {"cidr": "172.31.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}
    assert api in spec["egress"]  # lent: without the term (above) no rule names the API server's port
    by_name = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    assert {"from": [by_name]} in spec["ingress"]
    assert spec["egress"][-2:] == [
        {"to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}]},
        {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]},
    ]


def test_the_consumers_api_server_is_reachable_unless_it_is_an_address_of_the_providers():
    from catamaran.provider.terms import consumer_api_server_egress

    rule, problem = consumer_api_server_egress("https://172.31.0.1:26010", ["10.2.0.0/16"])
    assert rule == {"to": [{"ipBlock": {"cidr": "172.31.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 26010}]}
    assert problem == ""
    assert consumer_api_server_egress("https://203.0.113.9", [])[0]["ports"] == [{"protocol": "TCP", "port": 443}]
    assert consumer_api_server_egress("", []) == (None, "")
    for url in ("https://10.2.0.7:6443", "https://169.254.169.254", "https://127.0.0.1:6443", "https://0.0.0.0"):
        rule, problem = consumer_api_server_egress(url, ["10.2.0.0/16"])
        assert rule is None
        assert "an address of the provider's own" in problem
    rule, problem = consumer_api_server_egress("https://api.consumer.example:6443", [])
    assert rule is None
    assert "is not https://<IP address>" in problem


def test_what_is_lent_is_the_tenants_own_placement_or_a_pools_and_nothing_for_a_pool_not_lent():
    lent = TenantTerms.from_offer_spec(
        {
            "nodeSelector": {"kubernetes.io/hostname": "provider-worker"},
            "sharingPercentage": 80,
            "pools": [{"name": "gpu", "nodeSelector": {"pool": "gpu"}, "sharingPercentage": 50}],
        }
    )
    assert lent.lent(None) == (lent.placement, 80)
    pool = lent.pool("gpu")
    assert pool is not None
    assert lent.lent("gpu") == (pool.placement, 50)
    assert pool.placement != lent.placement
    assert lent.lent("small") is None
