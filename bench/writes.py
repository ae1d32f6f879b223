"""Benchmark: what one write costs the provider's API server, a ShadowPod's against the Pod's it stands for.

An offloaded pod is written on the provider as a ShadowPod (the virtual kubelet's create, the manager's status
copy) besides its Pod (the manager's create, the kubelet's status). This bench isolates those writes on one cluster
of the bench lab (bench/lab.yaml, state in .lab-bench/, control plane only): `--n` objects of each kind created,
then each one's status written once by a JSON merge patch, `--concurrency` requests at a time, as the agents send
them. The Pod is the baseline, in the same run: the same forged spec (a consumer's defaulted pod, as the virtual
kubelet sends it) with a scheduling gate, so that no scheduler or kwok node adds work; its status write is what a
kubelet reports, the ShadowPod's what the manager copies of it.

For each write: the kube-apiserver's and etcd's CPU per object, their idle CPU over the same seconds taken off
(measured first), and the wall time. Rounds alternate the kinds' order; each kind's namespace is deleted, and gone,
before the next phase. Prints the settings, the machine's load and speed, and writes bench/results/writes.csv (from a
quiet run). It asserts nothing.

    .venv/bin/python bench/writes.py                 # N = 1000, 3 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from catamaran.constants import OFFLOADING_GROUP, VERSION
from catamaran.vk.forge import shadowpod_for
from tests.integration import federation
from tests.timing import reference_cpu_seconds

CLUSTER = "bench-consumer"  # the lab's first cluster, as the provider here
KINDS = ("Pod", "ShadowPod")
IDLE_S = 10.0
GATE = "bench.catamaran.io/held"
ShadowPod = create_namespaced_resource(OFFLOADING_GROUP, VERSION, "ShadowPod", "shadowpods")

# A Deployment's pod as the consumer's API server returns it (defaulted, bound to the virtual node, its service
# account's token volume), which the virtual kubelet forges into the ShadowPod's spec.
CONSUMER_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "bench", "namespace": "bench", "uid": "", "labels": {"app": "bench"}},
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"cpu": "10m", "memory": "16Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [
                    {
                        "name": "kube-api-access-bench",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "nodeName": "catamaran-bench-provider",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "enableServiceLinks": True,
        "volumes": [
            {
                "name": "kube-api-access-bench",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        ],
    },
}
# What a kubelet reports of the running pod; the manager copies it into the ShadowPod's status.
RUNNING = {
    "phase": "Running",
    "podIP": "10.244.1.7",
    "podIPs": [{"ip": "10.244.1.7"}],
    "hostIP": "172.18.0.3",
    "startTime": "2026-11-30T12:00:00Z",
    "qosClass": "Guaranteed",
    "conditions": [
        {"type": kind, "status": "True", "lastTransitionTime": "2026-11-30T12:00:01Z"}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ],
    "containerStatuses": [
        {
            "name": "app",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10",
            "imageID": "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
            "containerID": "containerd://5e1bd2c81a5cd7d1e3b7c0d7c2a6f0f3d5b8e5a4c3b2a1f0e9d8c7b6a5f4e3d2",
            "state": {"running": {"startedAt": "2026-11-30T12:00:01Z"}},
        }
    ],
}


def forged(index: int, namespace: str) -> dict:
    """The ShadowPod the virtual kubelet would send for the index-th pod."""
    pod = copy.deepcopy(CONSUMER_POD)
    pod["metadata"].update(name=f"bench-{index}", uid=f"00000000-0000-0000-0000-{index:012d}")
    return shadowpod_for(
        pod,
        twin_namespace=namespace,
        consumer_id="bench-consumer",
        provider_id="bench-provider",
        token_secret="catamaran-token-default",
        home_api_server=("10.96.0.1", 443),
    )


def body(kind: str, index: int, namespace: str) -> dict:
    shadow = forged(index, namespace)
    if kind == "ShadowPod":
        return shadow
    template = shadow["spec"]["pod"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": shadow["metadata"]["name"], "namespace": namespace, **template["metadata"]},
        "spec": {**template["spec"], "schedulingGates": [{"name": GATE}]},
    }


def status_patch(kind: str) -> dict:
    if kind == "Pod":
        return {"status": RUNNING}
    return {
        "status": {
            "phase": "Running",
            "podUID": "11111111-2222-3333-4444-555555555555",
            "pod": RUNNING,
            "conditions": [
                {
                    "type": "PodCreated",
                    "status": "True",
                    "reason": "Created",
                    "lastTransitionTime": "2026-11-30T12:00:00Z",
                }
            ],
        }
    }


class Meter:
    """The CPU of the cluster's kube-apiserver and etcd, less their idle rate over the same seconds."""

    def __init__(self, lab):
        pids = harness.control_plane_pids(lab, CLUSTER)
        self.pids = {name: pids[name] for name in ("kube-apiserver", "etcd")}
        self.idle: dict[str, float] = {}

    def sample(self) -> tuple[float, dict[str, float]]:
        return time.monotonic(), {name: harness.cpu_seconds(pid) for name, pid in self.pids.items()}

    def measure_idle(self) -> None:
        start = self.sample()
        time.sleep(IDLE_S)
        end = self.sample()
        self.idle = {name: (end[1][name] - start[1][name]) / (end[0] - start[0]) for name in self.pids}

    def spent(self, start, end) -> dict[str, float]:
        seconds = end[0] - start[0]
        return {name: max(0.0, end[1][name] - start[1][name] - self.idle[name] * seconds) for name in self.pids}


async def each(count: int, concurrency: int, request) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with slots:
            await request(index)

    await asyncio.gather(*(one(index) for index in range(count)))


async def write_phase(lab, meter: Meter, kind: str, round_: int, args) -> list[dict]:
    namespace = f"writes-{kind.lower()}-{round_}"
    lab.kubectl(CLUSTER, "create", "namespace", namespace)
    lab.kubectl(CLUSTER, "wait", "--for=jsonpath={.status.phase}=Active", f"namespace/{namespace}")
    resource = Pod if kind == "Pod" else ShadowPod
    client = harness.client_for(lab, CLUSTER)
    rows = []
    try:
        writes = {
            "create": lambda i: client.create(resource.from_dict(body(kind, i, namespace)), namespace=namespace),
            "status patch": lambda i: client.patch(
                resource.Status, f"bench-{i}", status_patch(kind), namespace=namespace, patch_type=PatchType.MERGE
            ),
        }
        for verb, request in writes.items():
            start = meter.sample()
            await each(args.n, args.concurrency, request)
            end = meter.sample()
            spent = meter.spent(start, end)
            rows.append(
                {
                    "round": round_,
                    "kind": kind,
                    "write": verb,
                    "n": args.n,
                    "wall_s": end[0] - start[0],
                    "apiserver_ms_per_write": spent["kube-apiserver"] * 1000 / args.n,
                    "etcd_ms_per_write": spent["etcd"] * 1000 / args.n,
                }
            )
            row = rows[-1]
            print(
                f"  round {round_} {kind:<9} {verb:<12} {row['wall_s']:6.1f} s wall,"
                f" kube-apiserver {row['apiserver_ms_per_write']:5.2f} ms, etcd {row['etcd_ms_per_write']:5.2f} ms"
                " of CPU per write",
                flush=True,
            )
        example = await client.get(resource, "bench-0", namespace=namespace)
        size = len(json.dumps(example.to_dict() if hasattr(example, "to_dict") else dict(example)))
        for row in rows:
            row["object_bytes"] = size
    finally:
        await client.close()
    lab.kubectl(CLUSTER, "delete", "namespace", namespace, "--timeout=300s")
    return rows


def print_summary(rows: list[dict]) -> list[dict]:
    summary = []
    print("\nper write, mean of the rounds (idle CPU taken off)")
    print(f"  {'kind':<10}{'write':<14}{'apiserver ms':>14}{'etcd ms':>10}{'wall s':>9}{'bytes':>8}")
    for kind in KINDS:
        for verb in ("create", "status patch"):
            mine = [r for r in rows if r["kind"] == kind and r["write"] == verb]
            mean = {
                key: sum(r[key] for r in mine) / len(mine)
                for key in ("apiserver_ms_per_write", "etcd_ms_per_write", "wall_s")
            }
            summary.append(
                {"kind": kind, "write": verb, **mean, "object_bytes": mine[0]["object_bytes"], "rounds": len(mine)}
            )
            print(
                f"  {kind:<10}{verb:<14}{mean['apiserver_ms_per_write']:>14.2f}{mean['etcd_ms_per_write']:>10.2f}"
                f"{mean['wall_s']:>9.1f}{mine[0]['object_bytes']:>8}"
            )
    by = {(s["kind"], s["write"]): s["apiserver_ms_per_write"] for s in summary}
    for verb in ("create", "status patch"):
        print(f"  ShadowPod / Pod, {verb}: {by[('ShadowPod', verb)] / by[('Pod', verb)]:.2f} (kube-apiserver CPU)")
    print(
        "  a ShadowPod's status patch / its create:"
        f" {by[('ShadowPod', 'status patch')] / by[('ShadowPod', 'create')]:.2f} (kube-apiserver CPU)"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="objects of each kind per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the kinds' order alternating")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (the agents' workers)")
    parser.add_argument("--keep-lab", action="store_true", help="leave the bench lab running afterwards")
    harness.allow_noisy_argument(parser)
    args = parser.parse_args()
    harness.QUIET.allow_noisy = args.allow_noisy
    lab, wanted = harness.bench_lab(clusters=1)
    rows: list[dict] = []
    try:
        harness.print_settings(wanted, {})
        print(f"writes: {args.n} objects per kind and round, {args.rounds} rounds, {args.concurrency} in flight")
        federation.install_crds(lab, CLUSTER)
        speed_before = reference_cpu_seconds()
        meter = Meter(lab)
        meter.measure_idle()
        idle = ", ".join(f"{name} {rate * 1000:.0f} ms/s" for name, rate in meter.idle.items())
        print(f"idle CPU over {IDLE_S:.0f} s (taken off every phase): {idle}", flush=True)
        for round_ in range(args.rounds):
            for kind in KINDS if round_ % 2 == 0 else reversed(KINDS):
                rows += asyncio.run(write_phase(lab, meter, kind, round_, args))
        summary = print_summary(rows)
        speed_after = reference_cpu_seconds()
        print(
            f"  machine speed: the reference loop (tests/timing.py) took {speed_before:.2f} CPU s before,"
            f" {speed_after:.2f} after"
        )
        print(f"\nfigures: {harness.write_csv('writes.csv', rows)}")
        print(f"summary: {harness.write_csv('writes-summary.csv', summary)}")
    finally:
        harness.finish(lab, [], args.keep_lab)


if __name__ == "__main__":
    main()
