"""The lab's real nodes (catamaran_lab/realnode.py): last errors, the sandbox image."""

from __future__ import annotations

from pathlib import Path

from catamaran_lab import images
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
