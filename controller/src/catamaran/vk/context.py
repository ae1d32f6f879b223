"""What every part of one virtual kubelet shares about the peering it serves; built once, in vk/assembly.py."""

from __future__ import annotations

from dataclasses import dataclass
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

    @cached_property
    def node_name(self) -> str:
        return constants.virtual_node_name(self.provider_id)

    @cached_property
    def tenant_namespace(self) -> str:
        """The consumer's namespace on the provider: its TwinNamespaces, ResourceOffer and credential."""
        return constants.tenant_namespace(self.consumer_id)
