"""ConfigMaps: data, binaryData and immutability. The consumer's CA bundle keeps out of the provider's way."""

from __future__ import annotations

from lightkube.resources.core_v1 import ConfigMap

from ...constants import CONSUMER_ROOT_CA_CONFIGMAP, ROOT_CA_CONFIGMAP
from .kind import Context, ReflectedKind, present


class ConfigMaps(ReflectedKind):
    setting = "configMaps"
    resource = ConfigMap
    api_version = "v1"
    kind = "ConfigMap"

    def remote_name(self, local_name: str) -> str:
        return CONSUMER_ROOT_CA_CONFIGMAP if local_name == ROOT_CA_CONFIGMAP else local_name

    def local_name(self, remote_name: str) -> str | None:
        if remote_name == ROOT_CA_CONFIGMAP:
            return None  # the provider's own
        return ROOT_CA_CONFIGMAP if remote_name == CONSUMER_ROOT_CA_CONFIGMAP else remote_name

    def content(self, obj: dict, context: Context, *, local: bool) -> dict:
        return present(
            metadata=self.metadata(obj, context),
            data=obj.get("data"),
            binaryData=obj.get("binaryData"),
            immutable=obj.get("immutable") or None,
        )
