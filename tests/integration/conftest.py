"""The lab, started once per session for tests that need real kube-apiservers.

A lab that cannot start fails the session with the reason; nothing here ever skips.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from catamaran_lab import config as lab_config
from catamaran_lab import controller_image as controller_image_build
from catamaran_lab.errors import LabError
from catamaran_lab.images import Image
from catamaran_lab.lab import Lab
from tests.parallel import built_once, group_of, lab_down_after_run

from . import collection, release
from .lab_access import require_real_node, wait_for

LABS_IN_USE: list[Lab] = []  # the session's lab once started: checked between groups for what a group left


@pytest.fixture(scope="session")
def lab(pytestconfig) -> Iterator[Lab]:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    # Show the lab's progress live: a cold start takes minutes and must not look like a hang.
    with capture.global_and_fixture_disabled():
        lab = Lab(log=lambda message: print(message, flush=True))
        try:
            lab.up(lab_config.load())
        except LabError as error:
            pytest.fail(f"the lab could not start, so no integration test can run:\n{error}", pytrace=False)
    LABS_IN_USE.append(lab)
    yield lab
    LABS_IN_USE.remove(lab)
    if lab_down_after_run():
        with capture.global_and_fixture_disabled():
            lab.down()


@pytest.fixture(scope="session", autouse=True)
def collection_artifact():
    """The collection's artifact, built once per run from this checkout (shared by the run's workers).

    Autouse: building it also puts the controller's wheel from the current sources into the checkout's controller
    role, which every playbook run from the checkout installs (a stale wheel would test old code).
    """
    (artifact,) = built_once("artifact", collection.build_artifact).glob("*.tar.gz")
    return artifact


@pytest.fixture(scope="session")
def installed_collections(collection_artifact, tmp_path_factory):
    """An empty collections path holding only that artifact, installed as users install it."""
    path = tmp_path_factory.mktemp("collections")
    collection.install_artifact(collection_artifact, path)
    return path


@pytest.fixture(scope="session")
def lab_config_in_use(lab):
    return lab.recorded_config()


@pytest.fixture(scope="session")
def controller_image_archive(lab) -> Image:
    """The controller's image as `make image` builds it (no container engine), imported into every real node of the
    lab, as users load it into their nodes or registry."""
    directory = built_once("controller-image", lambda into: controller_image_build.build(into, log=lambda _: None))
    (archive,) = directory.glob("*.oci.tar")
    image = Image(controller_image_build.image_reference(), archive)
    lab.import_images([image])
    return image


@pytest.fixture(scope="session")
def controller_image(controller_image_archive) -> str:
    """The reference of the controller's image, in every real node of the lab."""
    return controller_image_archive.name


@pytest.fixture(scope="session")
def previous_release() -> release.Release:
    """The previous release's artifact and image, built once per run from its commit (for the upgrade tests)."""
    return release.built_previous(built_once("previous-release", release.build_previous))


@pytest.fixture(params=[c.name for c in lab_config.load().clusters])
def cluster(request, lab_config_in_use):
    return lab_config_in_use.cluster(request.param)


@pytest.fixture
def real_node(cluster):
    return require_real_node(cluster)


@pytest.fixture
def namespace(lab, cluster):
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    lab.kubectl(cluster.name, "create", "namespace", name)
    # Pods are admitted only once the namespace's default ServiceAccount exists.
    wait_for(lambda: lab.kubectl(cluster.name, "-n", name, "get", "sa", "default", check=False).returncode == 0)
    yield name
    lab.kubectl(cluster.name, "delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """Once a group's fixtures are torn down and another group follows on this lab: what the group left (leftovers)
    is named in a warning and removed, and what it left running is stopped."""
    result = yield
    if nextitem is None or not LABS_IN_USE or group_of(nextitem.nodeid) == group_of(item.nodeid):
        return result
    from . import leftovers
    from .federation import ChildProcess

    lab = LABS_IN_USE[0]
    left = [f"process {process.name}" for process in ChildProcess.started if process.running]
    for process in list(ChildProcess.started):
        process.kill()
    for cluster in lab.recorded_config().clusters:
        found = leftovers.in_cluster(lab, cluster.name)
        leftovers.remove(lab, cluster.name, found)
        left += [f"{cluster.name}: {name}" for name in found]
    if left:
        item.warn(
            pytest.PytestWarning(f"{group_of(item.nodeid)} left this behind, removed before the next group: {left}")
        )
    return result
