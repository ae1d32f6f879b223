"""Health that tells the truth: a wedged virtual kubelet is restarted, a silent watch is replaced.

Lab: consumer cluster-1, provider cluster-2. Local mode: the virtual kubelet runs under
`python -m catamaran.supervisor` exactly as the collection's controller_process starts it, with the
test hook (CATAMARAN_TEST_HOOKS=1) that blocks its event loop on demand.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request

import pytest
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import ConfigMap

from catamaran.constants import virtual_node_name
from catamaran.kube.informer import Informer
from catamaran_lab.paths import REPO_ROOT

from . import federation
from .lab_access import wait_for

sys.path.insert(0, str(REPO_ROOT / ".collections"))
from ansible_collections.catamaran.federation.plugins.module_utils.processes import SupervisedProcess

pytestmark = pytest.mark.integration

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
NODE = virtual_node_name(PROVIDER)


def ready(lab) -> bool:
    result = lab.kubectl(CONSUMER, "get", "node", NODE, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    conditions = json.loads(result.stdout)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_a_wedged_virtual_kubelet_is_restarted_by_its_liveness_probe(lab, tmp_path):
    for cluster in (CONSUMER, PROVIDER):
        federation.install_crds(lab, cluster)
    federation.peer(lab, CONSUMER, PROVIDER)
    provider_manager = federation.manager(lab, PROVIDER)
    provider_manager.start()
    vk = SupervisedProcess(str(tmp_path), f"vk-{CONSUMER}-{PROVIDER}", sys.executable)
    command = [
        "--kubeconfig",
        str(lab.kubeconfig(CONSUMER)),
        "--cluster-id",
        CONSUMER,
        "--liveness-stall-seconds",
        "3",
        "virtual-kubelet",
        "--foreign-cluster",
        PROVIDER,
        "--kubelet-port",
        "0",
        "--kubelet-cert-dir",
        str(tmp_path / "kubelet"),
    ]
    try:
        vk.start(command, {"CATAMARAN_TEST_HOOKS": "1"}, {"period": 1, "timeout": 1, "failure_threshold": 2})
        wait_for(lambda: ready(lab), timeout=90, what=f"{NODE} Ready")
        first = vk.describe()
        assert first["liveness_restarts"] == 0
        url = (tmp_path / f"{vk.name}.health-url").read_text().strip()
        with urllib.request.urlopen(f"{url}/livez", timeout=5) as answer:
            assert answer.status == 200
        request = urllib.request.Request(f"{url}/debug/block-event-loop?seconds=600", method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 200

        restarted = wait_for(
            lambda: (d := vk.describe())["child_pid"] not in (None, first["child_pid"]) and d,
            timeout=60,
            what="a new virtual kubelet process",
        )
        assert restarted["liveness_restarts"] == 1
        assert "event loop has not turned" in restarted["last_restart_reason"]
        wait_for(lambda: ready(lab), timeout=90, what=f"{NODE} Ready again")
        with _livez(tmp_path, vk) as answer:
            assert answer.status == 200
    finally:
        vk.stop()
        provider_manager.stop()
        lab.kubectl(CONSUMER, "delete", "node", NODE, check=False)
        federation.unpeer(lab, CONSUMER, PROVIDER)


def _livez(tmp_path, vk):
    """The new process serves /livez at its own (new) URL."""
    url = wait_for(lambda: (tmp_path / f"{vk.name}.health-url").exists() and (tmp_path / f"{vk.name}.health-url"))
    return urllib.request.urlopen(f"{url.read_text().strip()}/livez", timeout=5)


class FreezableProxy:
    """A TCP proxy to the API server whose open connections can be frozen: bytes stop flowing both ways
    and nothing is closed, as on a half-open connection. Connections made afterwards flow normally."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.connections = 0
        self.frozen: set[int] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self.frozen = set(range(1, self.connections + 1))

    async def _serve(self, reader, writer):
        self.connections += 1
        number = self.connections
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)

        async def pipe(source, sink):
            while data := await source.read(65536):
                if number in self.frozen:
                    await asyncio.Event().wait()  # never set: this connection stays silent
                sink.write(data)
                await sink.drain()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer), return_exceptions=True)
        writer.close()
        upstream_writer.close()


def test_a_watch_that_silently_stops_delivering_is_replaced(lab):
    asyncio.run(_silent_watch(lab))


async def _silent_watch(lab):
    config = yaml.safe_load(lab.kubeconfig(CONSUMER).read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    proxy = FreezableProxy(host, int(port))
    proxy_port = await proxy.start()
    config["clusters"][0]["cluster"]["server"] = f"https://{host}:{proxy_port}"
    client = AsyncClient(config=KubeConfig.from_dict(config).get())
    name = f"silent-watch-{int(time.time())}"
    informer = Informer(
        client, ConfigMap, name="silent-watch", namespace="default", fields={"metadata.name": name}, read_timeout=5
    )
    task = asyncio.get_running_loop().create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        await asyncio.sleep(1)  # the first watch request is out once the list is done
        proxy.freeze()
        watches, connections = informer.watches_started, proxy.connections
        # Made by kubectl, beside the proxy: the frozen watch cannot deliver it.
        lab.kubectl(CONSUMER, "-n", "default", "create", "configmap", name, "--from-literal=k=v")
        for _ in range(600):
            if informer.get("default", name) is not None:
                break
            await asyncio.sleep(0.1)
        assert informer.get("default", name) is not None, "the cache never caught up"
        assert informer.watches_started > watches
        assert proxy.connections > connections
        assert informer.consecutive_failures == 0
    finally:
        task.cancel()
        lab.kubectl(CONSUMER, "-n", "default", "delete", "configmap", name, check=False)
        await client.close()
        proxy.server.close()
