"""A pod as the consumer's user writes it, before the virtual kubelet forges its ShadowPod."""

from __future__ import annotations

from catamaran.constants import VIRTUAL_NODE_TAINT_KEY

KUBE_API_ACCESS = {
    "name": "kube-api-access-abc",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ],
    },
}


def local_pod(**spec_extra) -> dict:
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
        },
        "spec": {
            "nodeName": "catamaran-p",
            "nodeSelector": {"catamaran.io/type": "virtual-node"},
            "affinity": {"nodeAffinity": {}},
            "serviceAccountName": "builder",
            "priorityClassName": "high",
            "priority": 1000,
            "hostNetwork": True,
            "tolerations": [
                {"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            ],
            "volumes": [KUBE_API_ACCESS, {"name": "data", "emptyDir": {}}],
            "containers": [
                {
                    "name": "app",
                    "image": "nginx",
                    "volumeMounts": [{"name": "kube-api-access-abc", "mountPath": "/var/run"}, {"name": "data"}],
                }
            ],
            **spec_extra,
        },
        "status": {},
    }
