"""The virtual kubelet API's authorization (vk/kubelet/auth.py): subresources and users."""

from __future__ import annotations

import pytest

from catamaran.vk.kubelet.auth import subresources_for, user_from_certificate


@pytest.mark.parametrize(
    ("path", "subresources"),
    [
        ("/stats/summary", ["stats"]),
        ("/metrics/resource", ["metrics"]),
        ("/logs/", ["log"]),
        ("/healthz", ["healthz", "proxy"]),
        ("/pods", ["pods", "proxy"]),
        ("/containerLogs/ns/pod/c", ["proxy"]),
        ("/exec/ns/pod/c", ["proxy"]),
        ("/portForward/ns/pod", ["proxy"]),
    ],
)
def test_paths_map_to_the_kubelets_node_subresources(path, subresources):
    assert subresources_for(path) == subresources


def test_a_client_certificate_names_user_and_groups():
    certificate = {
        "subject": (
            (("organizationName", "system:masters"),),
            (("organizationName", "kubeadm:cluster-admins"),),
            (("commonName", "kube-apiserver-kubelet-client"),),
        )
    }
    user = user_from_certificate(certificate)
    assert user.name == "kube-apiserver-kubelet-client"
    assert user.groups == ("system:masters", "kubeadm:cluster-admins")
    assert user_from_certificate({"subject": ((("organizationName", "x"),),)}) is None
