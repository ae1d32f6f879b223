"""What every part of one virtual kubelet shares about the peering it serves; built once, in vk/assembly.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from lightkube import AsyncClient

from .. import constants
from ..kube.events import EventRecorder


@dataclass(frozen=True)
class PeeringContext:
    consumer_id: str
    provider_id: str
    local: AsyncClient  # the consumer's API server
    provider: AsyncClient  # the provider's, as its tenant
    events: EventRecorder  # Events on the consumer's objects
    foreign_cluster: tuple[str, str]  # (namespace, name) of the served ForeignCluster, where problems are reported
    # The peering's virtual nodes now: its one node, or one per node pool (vk/virtual_nodes.py keeps it).
    node_names: set[str] = field(default_factory=set, compare=False)

    @cached_property
    def node_name(self) -> str:
        """The peering's node without pools (and the name its kubelet-facing parts use when they need one)."""
        return constants.virtual_node_name(self.provider_id)

    @cached_property
    def tenant_namespace(self) -> str:
        """The consumer's namespace on the provider: its TwinNamespaces, ResourceOffer and credential."""
        return constants.tenant_namespace(self.consumer_id)
