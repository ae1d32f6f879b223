"""Benchmark: in-place resize (`pods/resize`) of offloaded pods against the same resize of pods on a real node.

Runs on the conformance lab (bench/conformance-lab.yaml, state in .lab-conformance/, ports 27000+): a consumer and a
provider, each with one real node (containerd, runc, kubelet) and nothing else to schedule on.

  local      `--pods` pods on the consumer's own real node, resized one after another (cpu 10m to 20m): each timed
             from the resize request to the consumer's watch showing the container's `resources` at 20m, which the
             kubelet reports once it applied them. The baseline, measured in the same run.
  offloaded  as many pods in an offloaded namespace, on the provider's real node through the virtual node, resized
             the same way on the consumer: each timed to the provider's pod resized (its spec, a watch on the
             provider: the issue's figure, "applied remotely") and to the consumer's pod showing what the remote
             kubelet applied.

Prints the settings, p50 and p99 of each and the ratios offloaded/local, and writes bench/results/resize.csv. Asserts
nothing.

    .venv/bin/python bench/resize.py                      # 50 pods
    .venv/bin/python bench/resize.py --pods 20 --keep-lab
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import conformance
import harness

from catamaran.constants import default_twin_namespace, virtual_node_name
from catamaran_lab.lab import Lab
from tests.integration import federation
from tests.integration.manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, real_pod

CONSUMER, PROVIDER = conformance.CONSUMER, conformance.PROVIDER
LOCAL_NAMESPACE, OFFLOADED_NAMESPACE = "resize-local", "resize-offloaded"
CPU_BEFORE, CPU_AFTER = "10m", "20m"


def resizable_pod(name: str, offloaded: bool) -> dict:
    """A busybox sleeping on a real node, requesting CPU_BEFORE, its CPU resized without a restart."""
    resources = {"requests": {"cpu": CPU_BEFORE, "memory": "16Mi"}, "limits": {"memory": "32Mi"}}
    policy = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    pod = real_pod(name, ["sleep", "3600"], container={"resources": resources, "resizePolicy": policy})
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    if offloaded:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": virtual_node_name(PROVIDER)}
        pod["spec"]["tolerations"] = [REAL_NODE_TOLERATION]
    else:
        pod["spec"]["nodeSelector"] = REAL_NODE_SELECTOR
    return pod


def create_pods(lab: Lab, namespace: str, count: int, offloaded: bool) -> list[str]:
    names = [f"resize-{i:03d}" for i in range(count)]
    pods = {"apiVersion": "v1", "kind": "List", "items": [resizable_pod(n, offloaded) for n in names]}
    lab.kubectl(CONSUMER, "-n", namespace, "apply", "-f", "-", input=json.dumps(pods))
    lab.kubectl(
        CONSUMER, "-n", namespace, "wait", "pods", "--all", "--for=condition=Ready", "--timeout=300s", timeout=330
    )
    return names


def cpu_requested(pod: dict) -> str | None:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return ((containers[0].get("resources") or {}).get("requests") or {}).get("cpu")


def cpu_applied(pod: dict) -> str | None:
    """What the kubelet reports it applied to the first container (status), None before it reports resources."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return ((statuses[0].get("resources") or {}).get("requests") or {}).get("cpu")


async def first_seen(client, namespace: str, name: str, version: str, reached) -> float:
    """When a watch of pod `name` first shows it as `reached` says (monotonic seconds)."""
    http = client._client._client
    params = {"watch": "true", "fieldSelector": f"metadata.name={name}", "resourceVersion": version}
    async with http.stream("GET", f"/api/v1/namespaces/{namespace}/pods", params=params, timeout=None) as response:
        async for line in response.aiter_lines():
            pod = json.loads(line)["object"] if line else None
            if pod and reached(pod):
                return time.monotonic()
    raise RuntimeError(f"the watch of pod {namespace}/{name} ended first")


async def resize_all(lab: Lab, namespace: str, names: list[str], remote: str | None) -> dict[str, list[float]]:
    """Resize each pod on the consumer in turn: seconds to the consumer's pod showing it applied, and with `remote`
    (the twin namespace) to the provider's pod resized."""
    consumer, provider = harness.client_for(lab, CONSUMER), harness.client_for(lab, PROVIDER)
    figures: dict[str, list[float]] = {"applied": [], **({"remote spec": []} if remote else {})}
    body = json.dumps({"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": CPU_AFTER}}}]}})
    for name in names:
        watches = {}
        for label, client, where, reached in (
            ("applied", consumer, namespace, lambda pod: cpu_applied(pod) == CPU_AFTER),
            *((("remote spec", provider, remote, lambda pod: cpu_requested(pod) == CPU_AFTER),) if remote else ()),
        ):
            listing = await client._client._client.get(
                f"/api/v1/namespaces/{where}/pods", params={"fieldSelector": f"metadata.name={name}"}
            )
            version = listing.json()["metadata"]["resourceVersion"]
            watches[label] = asyncio.create_task(first_seen(client, where, name, version, reached))
        asked = time.monotonic()
        response = await consumer._client._client.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/resize",
            content=body,
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        if response.status_code != 200:
            raise SystemExit(f"the resize of pod {namespace}/{name} was refused: {response.text}")
        for label, watch in watches.items():
            figures[label].append(await asyncio.wait_for(watch, 120) - asked)
    await consumer.close()
    await provider.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=50, help="pods resized one after another, each side")
    parser.add_argument("--keep-lab", action="store_true", help="leave the conformance lab running afterwards")
    harness.allow_noisy_argument(parser)
    args = parser.parse_args()
    harness.QUIET.allow_noisy = args.allow_noisy

    lab = conformance.conformance_lab()
    harness.QUIET.begin(lab.root)
    print(f"settings: {args.pods} pods each side, resized one after another, cpu {CPU_BEFORE} -> {CPU_AFTER}")
    print(f"  lab {conformance.LAB_FILE.relative_to(harness.REPO)}: {CONSUMER} and {PROVIDER}, one real node each")
    processes: list[federation.ControllerProcess] = []
    try:
        conformance.set_real_node_taint(lab, CONSUMER, tainted=False)
        lab.kubectl(CONSUMER, "create", "namespace", LOCAL_NAMESPACE)
        local = asyncio.run(resize_all(lab, LOCAL_NAMESPACE, create_pods(lab, LOCAL_NAMESPACE, args.pods, False), None))
        # The local pods stay until the lab goes: their containers ending now would be CPU the quiet check cannot
        # count as the bench's.
        conformance.set_real_node_taint(lab, CONSUMER, tainted=True)

        processes = conformance.start_federation(lab)
        lab.kubectl(CONSUMER, "create", "namespace", OFFLOADED_NAMESPACE)
        federation.offload_namespace(lab, CONSUMER, OFFLOADED_NAMESPACE)
        deadline = time.monotonic() + 120
        while not federation.twin_ready(lab, CONSUMER, PROVIDER, OFFLOADED_NAMESPACE):
            if time.monotonic() > deadline:
                raise SystemExit(f"the twin of {OFFLOADED_NAMESPACE} was never Ready; logs in {lab.root / 'logs'}")
            time.sleep(1)
        twin = default_twin_namespace(OFFLOADED_NAMESPACE, CONSUMER)
        names = create_pods(lab, OFFLOADED_NAMESPACE, args.pods, True)
        offloaded = asyncio.run(resize_all(lab, OFFLOADED_NAMESPACE, names, twin))

        rows = []
        baseline_p99 = harness.percentile(local["applied"], 0.99)
        for side, figures in (("local", local), ("offloaded", offloaded)):
            for label, values in figures.items():
                p50, p99 = harness.percentile(values, 0.5), harness.percentile(values, 0.99)
                ratio = p99 / baseline_p99
                print(f"  {side:9s} {label:11s}: p50 {p50:.3f} s, p99 {p99:.3f} s ({ratio:.1f} x local p99)")
                rows.append({"side": side, "until": label, "pods": len(values), "p50_s": p50, "p99_s": p99})
        print(f"\nfigures: {harness.write_csv('resize.csv', rows)}")
    finally:
        harness.finish(lab, processes, args.keep_lab)


if __name__ == "__main__":
    main()
