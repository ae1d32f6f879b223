"""One peering for the package: cluster-1 consumes cluster-2, its provider's manager and virtual kubelet running."""

from __future__ import annotations

import pytest

from .. import federation
from . import CONSUMER, HEALTH, PROVIDER


@pytest.fixture(scope="package")
def peering(lab):
    """The processes by role (manager, vk)."""
    with federation.peered(lab, CONSUMER, PROVIDER, healthCheck=HEALTH) as processes:
        yield processes
