"""The default storage class of a lab cluster with a real node: Rancher's local-path-provisioner (pure: returns
manifests and configuration).

Every real cluster has a default class with a dynamic provisioner; the lab's is `local-path`: a claim waits for its
first pod (WaitForFirstConsumer), then the provisioner runs a helper pod on the pod's node that makes a directory
under the node's data directory (NodeLayout `local-path`), and binds a hostPath volume pinned to that node. Only the
cluster's first real node has a directory, and the class's allowed topology is that node: a pod with such a claim is
scheduled there or nowhere (the scheduler says why). The provisioner runs as a host process of the real node
(realnode.py), as the identity USER bound here to upstream's rights.
"""

from __future__ import annotations

import json

NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
PROVISIONER = "rancher.io/local-path"
CONFIG_MAP = "local-path-config"
SERVICE_ACCOUNT = "local-path-provisioner"  # the helper pods'
USER = "catamaran-lab:local-path-provisioner"  # its client certificate's name
LABELS = {"app.kubernetes.io/managed-by": "catamaran-lab"}
# The helper pod's scripts, as upstream ships them: the volume's directory made world-writable (any pod user may
# write its claim), removed with the volume.
SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def config_json(node: str, data_dir: str) -> str:
    """Where volumes go: `data_dir` on `node`, nowhere else (no DEFAULT_PATH_FOR_NON_LISTED_NODES)."""
    return json.dumps({"nodePathMap": [{"node": node, "paths": [data_dir]}]}, indent=2)


def helper_pod(image: str) -> str:
    """The helper pod template (the provisioner adds the node, volumes, command and a toleration of every taint):
    the lab's imported busybox, never pulled."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod", "labels": LABELS},
        "spec": {"containers": [{"name": "helper-pod", "image": image, "imagePullPolicy": "Never"}]},
    }
    return json.dumps(pod, indent=2)


def command(binary: str, config: str, helper_pod_file: str, kubeconfig: str, image: str) -> list[str]:
    return [
        binary,
        "--debug",
        "start",
        f"--config={config}",
        f"--provisioner-name={PROVISIONER}",
        f"--namespace={NAMESPACE}",
        f"--helper-image={image}",
        f"--configmap-name={CONFIG_MAP}",
        f"--service-account-name={SERVICE_ACCOUNT}",
        f"--helper-pod-file={helper_pod_file}",
        f"--kubeconfig={kubeconfig}",
        "--worker-threads=4",
    ]


def manifests(node: str) -> list[dict]:
    """Its namespace, the helper pods' service account and scripts, the default class (its volumes on `node` only:
    the scheduler places a pod with such a claim there, never on a node without a directory), and upstream's rights
    for USER (cluster-wide reads, volumes, Events; helper pods in its namespace)."""
    rbac = "rbac.authorization.k8s.io/v1"
    meta = {"labels": LABELS}
    cluster_rules = [
        {
            "apiGroups": [""],
            "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [""],
            "resources": ["persistentvolumes"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
    ]
    pod_rules = [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        }
    ]
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
    name = USER  # its roles are named after it
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, **meta}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, **meta},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE, **meta},
            "data": {"setup": SETUP, "teardown": TEARDOWN},
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                **meta,
            },
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "kubernetes.io/hostname", "values": [node]}]}],
            "reclaimPolicy": "Delete",
        },
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name, **meta}, "rules": cluster_rules},
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subject,
        },
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": {"name": name, "namespace": NAMESPACE, **meta},
            "rules": pod_rules,
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": NAMESPACE, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subject,
        },
    ]
