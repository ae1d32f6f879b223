"""A virtual kubelet with an unusable credential says why on its ForeignCluster, and keeps trying."""

from __future__ import annotations

import base64
import json

import pytest

from catamaran.constants import SYSTEM_NAMESPACE

from . import federation
from .lab_access import get_json, wait_for

pytestmark = pytest.mark.integration

CONSUMER = "cluster-1"
NAME = "nowhere"


def ready_condition(lab) -> dict | None:
    result = lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "get", "foreigncluster", NAME, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), None)


def test_missing_then_malformed_credentials_are_reported(lab):
    federation.install_crds(lab, CONSUMER)
    lab.kubectl(CONSUMER, "create", "namespace", SYSTEM_NAMESPACE, check=False)
    foreign = {
        "apiVersion": "core.catamaran.io/v1alpha1",
        "kind": "ForeignCluster",
        "metadata": {"name": NAME, "namespace": SYSTEM_NAMESPACE},
        "spec": {"clusterID": NAME, "credentialsSecretRef": {"name": f"{NAME}-credentials"}},
    }
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(foreign))
    vk = federation.virtual_kubelet(lab, CONSUMER, NAME)
    vk.start()
    try:
        missing = wait_for(lambda: ready_condition(lab), what="a Ready condition on the ForeignCluster")
        assert (missing["status"], missing["reason"]) == ("False", "CredentialMissing")
        assert f"{NAME}-credentials" in missing["message"]

        secret_text = "this is not a kubeconfig: [token: s3cr3t-value"
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{NAME}-credentials", "namespace": SYSTEM_NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(secret_text.encode()).decode()},
        }
        lab.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(secret))
        invalid = wait_for(
            lambda: (c := ready_condition(lab)) and c["reason"] == "CredentialInvalid" and c,
            timeout=30,
            what="CredentialInvalid",
        )
        assert "unusable kubeconfig" in invalid["message"]
        events = get_json(
            lab, CONSUMER, "events", "-n", SYSTEM_NAMESPACE, "--field-selector", f"involvedObject.name={NAME}"
        )["items"]
        assert {e["reason"] for e in events} >= {"CredentialMissing", "CredentialInvalid"}
        assert lab.kubectl(CONSUMER, "get", "node", f"catamaran-{NAME}", check=False).returncode != 0
    finally:
        vk.stop()
        assert "s3cr3t-value" not in vk.log_path.read_text()  # the credential never reaches the logs
        lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "delete", "foreigncluster", NAME, check=False)
        lab.kubectl(CONSUMER, "-n", SYSTEM_NAMESPACE, "delete", "secret", f"{NAME}-credentials", check=False)
