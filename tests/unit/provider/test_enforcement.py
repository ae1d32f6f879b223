"""Whether the provider enforces NetworkPolicies (provider/enforcement.py, provider/enforcement_probe.py): what two
connections to a canary say, and the probe's rounds on a fake provider (the connections faked; the lab proves them in
test_deployment_federation.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.networking_v1 import NetworkPolicy

from catamaran.constants import NETWORK_POLICY_CONDITION, RESOURCE_OFFER_NAME, SYSTEM_NAMESPACE
from catamaran.kube.resources import ResourceOffer
from catamaran.provider import enforcement
from catamaran.provider.enforcement import Canary, not_probed, summarize_canary, verdict
from catamaran.provider.enforcement_probe import EnforcementProbe
from tests.unit.fakes.offloading import TENANT, Provider, run

READY = Canary(placement="k", ip="10.245.0.9", ready_since="2026-01-01T00:00:00Z", waiting="")
REAL_NODE = {"nodeSelector": {"kind": "real"}, "tolerations": [{"key": "kind", "operator": "Exists"}]}


def test_a_guarded_port_refused_beside_an_open_one_is_enforcement():
    assert verdict(READY, open_answered=True, guarded_answered=False, settled=True).status == "True"


def test_a_guarded_port_answering_is_no_enforcement_once_settled():
    found = verdict(READY, open_answered=True, guarded_answered=True, settled=True)
    assert (found.status, found.reason) == ("False", "NotEnforced")
    assert "not confined" in found.message
    young = verdict(READY, open_answered=True, guarded_answered=True, settled=False)
    assert (young.status, young.reason) == ("Unknown", "Settling")


def test_an_open_port_not_answering_proves_nothing():
    for guarded in (True, False):
        found = verdict(READY, open_answered=False, guarded_answered=guarded, settled=True)
        assert (found.status, found.reason) == ("Unknown", "CanaryUnreachable")


def test_a_canary_missing_or_not_ready_is_not_probed_and_says_why():
    assert not_probed(None, "c").reason == "CanaryStarting"
    pulling = Canary(placement="k", ip="", ready_since="", waiting="ImagePullBackOff: back-off pulling image")
    assert not_probed(pulling, "c").reason == "CanaryNotReady"
    assert "ImagePullBackOff" in not_probed(pulling, "c").message
    assert not_probed(READY, "c") is None


def test_a_canary_pod_is_summarized_from_its_status():
    pod = {
        "metadata": {"name": "c", "labels": {enforcement.LABEL_PLACEMENT: "abc"}},
        "status": {
            "phase": "Running",
            "podIP": "10.1.0.5",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        },
    }
    assert summarize_canary(pod) == Canary("abc", "10.1.0.5", "2026-01-01T00:00:00Z", "Running")
    pod["status"]["conditions"][0]["status"] = "False"
    assert summarize_canary(pod).ready_since == ""
    pod["status"]["phase"] = "Failed"
    assert summarize_canary(pod).finished


def test_the_canary_is_restricted_and_its_policy_admits_the_open_port_only():
    pod = enforcement.canary_pod("abc", "ghcr.io/catamaran/controller:1", ["registry-credentials"])
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert "imagePullSecrets" not in enforcement.canary_pod("abc", "ghcr.io/catamaran/controller:1")["spec"]
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["command"][-2:] == [str(enforcement.OPEN_PORT), str(enforcement.GUARDED_PORT)]
    policy = enforcement.canary_policy()["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": enforcement.OPEN_PORT}]}]
    assert policy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


class Connections:
    """The probe's connections: which ports of the canaries answer."""

    def __init__(self):
        self.answering = {enforcement.OPEN_PORT}

    async def __call__(self, address: str, port: int) -> bool:
        return port in self.answering


def _canary(provider: Provider) -> tuple[str, dict]:
    (pod,) = [p for p in provider.cluster.all(Pod, SYSTEM_NAMESPACE)]
    return pod["metadata"]["name"], pod


def _offer_condition(provider: Provider) -> dict:
    offer = provider.cluster.read(ResourceOffer, RESOURCE_OFFER_NAME, TENANT)
    (found,) = [c for c in offer["status"]["conditions"] if c["type"] == NETWORK_POLICY_CONDITION]
    return found


async def _verdict_after_a_round(provider: Provider, probe: EnforcementProbe) -> tuple[str, str]:
    """(status, reason) the tenant's offer carries after one probe round and one offer reconcile."""
    await provider.settle()
    await probe.round()
    await provider.offers.reconcile(TENANT)
    await provider.settle()
    found = _offer_condition(provider)
    return found["status"], found["reason"]


def _ready(provider: Provider, name: str) -> None:
    def running(pod: dict) -> None:
        pod["spec"]["nodeName"] = "provider-worker"
        pod["status"] = {
            "phase": "Running",
            "podIP": "10.245.0.9",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }

    provider.cluster.update(Pod, name, SYSTEM_NAMESPACE, running)


def test_the_probe_keeps_a_canary_where_the_tenant_runs_and_reports_on_its_offer():
    async def scenario():
        provider = Provider(offer_spec={"clusterID": "p1", **REAL_NODE})
        provider.cluster.add(Namespace, {"metadata": {"name": SYSTEM_NAMESPACE}})
        await provider.start()
        connections, later = Connections(), timedelta()
        probe = EnforcementProbe(
            provider.cluster.client(),
            provider.offers,
            "controller:1",
            connect=connections,
            clock=lambda: datetime.now(UTC) + later,
        )
        await provider.settle()

        await probe.round()
        await provider.settle()
        name, pod = _canary(provider)
        assert pod["spec"]["nodeSelector"] == REAL_NODE["nodeSelector"]  # where the tenant's pods run
        assert provider.cluster.read(NetworkPolicy, enforcement.CANARY_POLICY, SYSTEM_NAMESPACE) is not None
        await provider.offers.reconcile(TENANT)
        await provider.settle()
        assert _offer_condition(provider)["reason"] == "CanaryStarting"

        _ready(provider, name)
        assert await _verdict_after_a_round(provider, probe) == ("True", "Enforced")

        connections.answering.add(enforcement.GUARDED_PORT)
        # The policy was just made: it may not be programmed yet.
        assert await _verdict_after_a_round(provider, probe) == ("Unknown", "Settling")
        later = timedelta(seconds=enforcement.SETTLE_SECONDS)
        assert await _verdict_after_a_round(provider, probe) == ("False", "NotEnforced")

        await provider.cluster.client().delete(Namespace, TENANT)  # the tenant is gone: so are the canary and policy
        await provider.settle()
        await probe.round()
        await provider.settle()
        left = provider.cluster.all(Pod, SYSTEM_NAMESPACE)
        assert all(p["metadata"].get("deletionTimestamp") for p in left), left  # a kubelet's to finish
        assert provider.cluster.read(NetworkPolicy, enforcement.CANARY_POLICY, SYSTEM_NAMESPACE) is None

    run(scenario)


def test_a_canary_the_api_refuses_is_reported_as_such_and_the_round_goes_on():
    async def scenario():
        provider = Provider(offer_spec={"clusterID": "p1", **REAL_NODE})
        provider.cluster.add(Namespace, {"metadata": {"name": SYSTEM_NAMESPACE}})
        await provider.start()
        probe = EnforcementProbe(provider.cluster.client(), provider.offers, "controller:1", connect=Connections())
        provider.cluster.fail("create", Pod, 403, 'pods is forbidden: admission webhook "no-canaries" denied it')
        assert await _verdict_after_a_round(provider, probe) == ("Unknown", "CanaryFailed")
        assert "no-canaries" in _offer_condition(provider)["message"]
        await probe.round()  # the next round makes it
        await provider.settle()
        _canary(provider)

    run(scenario)


def test_a_tenants_enforcement_condition_is_its_weakest_placements_its_pools_included():
    from catamaran.provider.offers import weakest_enforcement

    enforced = {"type": "NetworkPolicyEnforced", "status": "True", "reason": "Enforced", "message": "ok"}
    unknown = {**enforced, "status": "Unknown", "reason": "CanaryPending", "message": "starting"}
    refused = {**enforced, "status": "False", "reason": "NotEnforced", "message": "open"}
    assert weakest_enforcement([(None, None), ("gpu", refused)]) is None, "its own placement not probed yet"
    assert weakest_enforcement([(None, enforced), ("gpu", None)]) == enforced
    assert weakest_enforcement([(None, enforced), ("a", unknown), ("b", refused)]) == {
        **refused,
        "message": "pool b: open",
    }
    assert weakest_enforcement([(None, unknown), ("gpu", unknown)]) == unknown
    assert weakest_enforcement([(None, refused), ("gpu", unknown)]) == refused
