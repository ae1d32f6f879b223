"""The lab's e2e build (catamaran_lab/e2e.py): image names from `e2e.test --list-images`, rebuild decisions."""

from __future__ import annotations

import json

from catamaran_lab import binaries, e2e

LISTED = """\
registry.k8s.io/e2e-test-images/busybox:1.36.1-1
gcr.io/k8s-authenticated-test/agnhost:2.6
registry.k8s.io/e2e-test-images/agnhost:2.55
registry.k8s.io/e2e-test-images/nginx:1.27-0
invalid.registry.k8s.io/invalid/alpine:3.1
registry.k8s.io/pause:3.10.2
registry.k8s.io/e2e-test-images/agnhost:2.63.0
registry.k8s.io/e2e-test-images/node-perf/npb-is:1.7.0
registry.k8s.io/e2e-test-images/busybox:1.37.0-1
registry.k8s.io/e2e-test-images/nonewprivs:1.4
registry.k8s.io/e2e-test-images/nonroot:1.5
"""


def test_image_list_keeps_references_only_sorted_and_once():
    output = "I1125 10:00:00.000000 1 log.go:1] starting\n" + LISTED + "registry.k8s.io/pause:3.10.2\n\n"
    listed = e2e.parse_image_list(output)
    assert listed == sorted(set(LISTED.split()))
    assert "registry.k8s.io/e2e-test-images/node-perf/npb-is:1.7.0" in listed


def test_every_listed_tag_of_a_buildable_repository_is_provided_and_nothing_else():
    listed = e2e.parse_image_list(LISTED)
    assert e2e.provided(listed) == {
        "registry.k8s.io/e2e-test-images/agnhost:2.55": "agnhost",
        "registry.k8s.io/e2e-test-images/agnhost:2.63.0": "agnhost",
        "registry.k8s.io/e2e-test-images/busybox:1.36.1-1": "busybox",
        "registry.k8s.io/e2e-test-images/busybox:1.37.0-1": "busybox",
        "registry.k8s.io/e2e-test-images/nonewprivs:1.4": "nonewprivs",
        "registry.k8s.io/e2e-test-images/nonroot:1.5": "nonroot",
        "registry.k8s.io/pause:3.10.2": "pause",
    }
    # The private registry's agnhost must stay unpullable: a test expects its pull to fail.
    assert e2e.not_provided(listed) == [
        "gcr.io/k8s-authenticated-test/agnhost:2.6",
        "invalid.registry.k8s.io/invalid/alpine:3.1",
        "registry.k8s.io/e2e-test-images/nginx:1.27-0",
        "registry.k8s.io/e2e-test-images/node-perf/npb-is:1.7.0",
    ]


def test_archive_names_are_flat_and_distinct():
    names = e2e.parse_image_list(LISTED)
    archives = {e2e.archive_name(name) for name in names}
    assert len(archives) == len(names)
    assert all("/" not in archive and archive.endswith(".tar") for archive in archives)
    assert e2e.archive_name("registry.k8s.io/pause:3.10.2") == "registry.k8s.io_pause_3.10.2.tar"


def test_images_are_rebuilt_when_the_list_or_busybox_changes():
    listed = e2e.parse_image_list(LISTED)
    stamp = e2e.images_stamp(listed, "1.35.0")
    assert stamp == e2e.images_stamp(reversed(listed), "1.35.0")
    assert stamp != e2e.images_stamp(listed, "1.36.0")
    assert stamp != e2e.images_stamp([*listed, "registry.k8s.io/e2e-test-images/agnhost:2.64.0"], "1.35.0")


def test_up_imports_e2e_images_only_when_all_are_built(tmp_path):
    cache = binaries.BinaryCache(root=tmp_path)
    assert e2e.built_images(cache) == []
    out_dir = e2e.e2e_dir(cache) / e2e.IMAGES_DIR
    out_dir.mkdir(parents=True)
    stamp = e2e.images_stamp(e2e.parse_image_list(LISTED), "1.35.0")
    (out_dir / e2e.IMAGES_STAMP).write_text(json.dumps(stamp))
    names = sorted(stamp["provided"])
    for name in names[1:]:
        (out_dir / e2e.archive_name(name)).write_bytes(b"")
    assert e2e.built_images(cache) == []
    (out_dir / e2e.archive_name(names[0])).write_bytes(b"")
    assert [image.name for image in e2e.built_images(cache)] == names
