"""The lab's real nodes (catamaran_lab/realnode.py): last errors, the sandbox image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from catamaran_lab import images
from catamaran_lab.errors import LabError
from catamaran_lab.images import Image
from catamaran_lab.realnode import _pause


def test_a_real_node_that_stays_not_ready_names_its_components_last_errors(tmp_path):
    from catamaran_lab.realnode import last_error_lines

    log = tmp_path / "kubelet.log"
    log.write_text(
        "I1123 10:00:00.000 1 server.go:1] started\n"
        'E1123 10:00:01.000 1 kubelet.go:2] "Container runtime network not ready" err="cni config uninitialized"\n'
        'time="2026-11-23T10:00:02Z" level=error msg="failed to load cni"\n'
        "W1123 10:00:03.000 1 x.go:3] a warning\n"
    )
    assert last_error_lines(log) == [
        'E1123 10:00:01.000 1 kubelet.go:2] "Container runtime network not ready" err="cni config uninitialized"',
        'time="2026-11-23T10:00:02Z" level=error msg="failed to load cni"',
    ]
    assert last_error_lines(tmp_path / "missing.log") == []


def test_sandbox_image_is_the_labs_pause_even_beside_upstreams_name():
    archive = Path("unused.tar")
    assert _pause([Image("registry.k8s.io/pause:3.10.2", archive), Image(images.PAUSE_IMAGE, archive)]) == (
        images.PAUSE_IMAGE
    )


@pytest.fixture(autouse=True)
def busybox_of_the_lab(monkeypatch):
    """The command lines name the lab's busybox image by the installed busybox's version; the lab build installs it
    (busybox-static) after the unit tests run, so a fresh machine has none yet."""
    monkeypatch.setattr(images, "busybox_version", lambda: "1.37.0")


def _real_node(tmp_path):
    from catamaran_lab import binaries, config, nodeconfig
    from catamaran_lab.realnode import RealNode

    cluster = config.load(real_nodes=True).clusters[0]
    layout = nodeconfig.NodeLayout(root=tmp_path / cluster.name / "node", lab_id="abc123", cluster=cluster.name)
    paths = {name: tmp_path / "bin" / name for name in binaries.ALL_BINARIES}
    return RealNode(cluster, layout, paths, tmp_path / "pki", kubectl=None)


def test_kube_router_runs_its_network_policy_controller_alone_on_the_real_node(tmp_path):
    from catamaran_lab import config
    from catamaran_lab.realnode import NODE_COMPONENTS

    node = _real_node(tmp_path)
    # Started after kube-proxy (once the node is Ready), so stopped before it (components stop in reverse).
    assert NODE_COMPONENTS.index("kube-router") > NODE_COMPONENTS.index("kube-proxy")
    argv = node.command("kube-router")
    assert argv[0] == str(tmp_path / "bin" / "kube-router")
    flags = dict(arg.split("=", 1) for arg in argv[1:])
    assert flags == {
        "--run-firewall": "true",
        "--run-router": "false",
        "--run-service-proxy": "false",
        "--kubeconfig": str(node.layout.path("kube-router.kubeconfig")),
        "--hostname-override": node.spec.name,
        "--service-cluster-ip-range": config.SERVICE_CLUSTER_IP_RANGE,
        "--health-port": "0",  # serves nothing in the node's network
        "--metrics-port": "0",
    }
    assert config.CLUSTER_DNS_IP.rsplit(".", 1)[0] == config.SERVICE_CLUSTER_IP_RANGE.rsplit(".", 1)[0]
    # kube-router finds its Node by NODE_NAME before the host name; the other components get the lab's environment.
    assert node.environment("kube-router")["NODE_NAME"] == node.spec.name
    assert node.environment("kubelet").get("NODE_NAME") == os.environ.get("NODE_NAME")


def test_every_real_node_component_has_a_command_line(tmp_path):
    from catamaran_lab.realnode import NODE_COMPONENTS, PROVISIONER

    node = _real_node(tmp_path)
    assert node.components == (*NODE_COMPONENTS, PROVISIONER)  # the cluster's first real node: its storage too
    for component in node.components:
        assert node.command(component)
    with pytest.raises(LabError, match="kube-router"):
        node.command("kube-flannel")


def test_the_first_real_node_provisions_the_default_class_on_its_own_disk_only(tmp_path):
    import json

    from catamaran_lab import localpath
    from catamaran_lab.realnode import PROVISIONER

    node = _real_node(tmp_path)
    flags = dict(arg.split("=", 1) for arg in node.command(PROVISIONER)[3:])
    assert flags["--provisioner-name"] == localpath.PROVISIONER
    assert flags["--kubeconfig"] == str(node.layout.path(f"{PROVISIONER}.kubeconfig"))
    config = json.loads(localpath.config_json(node.spec.name, str(node.layout.path("local-path"))))
    # No DEFAULT_PATH_FOR_NON_LISTED_NODES: a claim on a kwok node fails, never writes to the host elsewhere.
    assert config == {"nodePathMap": [{"node": node.spec.name, "paths": [str(node.layout.path("local-path"))]}]}
    [storage_class] = [m for m in localpath.manifests(node.spec.name) if m["kind"] == "StorageClass"]
    assert storage_class["metadata"]["annotations"] == {"storageclass.kubernetes.io/is-default-class": "true"}
    assert (storage_class["provisioner"], storage_class["volumeBindingMode"]) == (
        localpath.PROVISIONER,
        "WaitForFirstConsumer",
    )
    [topology] = storage_class["allowedTopologies"][0]["matchLabelExpressions"]
    assert topology == {"key": "kubernetes.io/hostname", "values": [node.spec.name]}
