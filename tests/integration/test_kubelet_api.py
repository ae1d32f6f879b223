"""The virtual node's kubelet API: logs, exec, attach, port-forward and top of offloaded pods, through the
consumer's API server, which dials the virtual kubelet over TLS and verifies its certificate.

cluster-1 consumes cluster-3 (pods on its real node, real containers) and cluster-2 (kwok pods). The tests
share one federation and run in file order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import http.client
import json
import os
import re
import select
import socket
import struct
import subprocess
import termios
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from catamaran.constants import VIRTUAL_NODE_TAINT, virtual_node_name
from catamaran.vk.kubelet.certificate import csr_manifest, serving_request

from . import federation
from .kubelet_client import admin_tls, kubelet_get, node_endpoint
from .lab_access import get_json, require_real_node, wait_for
from .manifests import REAL_NODE_SELECTOR, REAL_NODE_TOLERATION, container, real_pod

pytestmark = pytest.mark.integration

CONSUMER, REAL_PROVIDER, KWOK_PROVIDER = "cluster-1", "cluster-3", "cluster-2"
REAL_NODE, KWOK_NODE = virtual_node_name(REAL_PROVIDER), virtual_node_name(KWOK_PROVIDER)
NAMESPACE = "kubelet-api"
# The real node's certificate is requested for 10 minutes (the API's minimum) and renewed after 5 % of it.
CERT_SECONDS, RENEW_FRACTION = 600, 0.05

TALKER_SCRIPT = f"""
for i in 1 2 3 4 5; do echo "line $i from {REAL_PROVIDER}"; done
mkdir -p /tmp/www
echo "served by $(hostname) on {REAL_PROVIDER}" > /tmp/www/index.html
httpd -f -p 8080 -h /tmp/www &
mkdir -p /tmp/other && echo "second port" > /tmp/other/index.html
httpd -f -p 8081 -h /tmp/other &
i=0
while true; do i=$((i+1)); echo "tick $i"; sleep 0.5; done
"""
# First run: one line, then fail; the restarted container has the first run as its previous log.
RESTARTER_SCRIPT = """
if [ -f /data/ran ]; then echo "second run"; exec sleep 3600; fi
touch /data/ran
echo "first run"
exit 1
"""


@pytest.fixture(scope="module")
def fed(lab, lab_config_in_use):
    require_real_node(lab_config_in_use.cluster(REAL_PROVIDER))
    for cluster in (CONSUMER, REAL_PROVIDER, KWOK_PROVIDER):
        federation.install_crds(lab, cluster)
    for provider in (REAL_PROVIDER, KWOK_PROVIDER):
        federation.peer(lab, CONSUMER, provider)
    federation.place(lab, CONSUMER, REAL_PROVIDER, REAL_NODE_SELECTOR, [REAL_NODE_TOLERATION])
    real_vk = federation.virtual_kubelet(
        lab,
        CONSUMER,
        REAL_PROVIDER,
        metrics_port=federation.free_port(),
        extra=("--kubelet-certificate-seconds", str(CERT_SECONDS), "--kubelet-renew-fraction", str(RENEW_FRACTION)),
    )
    kwok_vk = federation.virtual_kubelet(lab, CONSUMER, KWOK_PROVIDER)
    processes = [
        federation.consumer_manager(lab, CONSUMER),
        federation.manager(lab, REAL_PROVIDER),
        federation.manager(lab, KWOK_PROVIDER),
        real_vk,
        kwok_vk,
    ]
    try:
        for process in processes:
            process.start()
        for node in (REAL_NODE, KWOK_NODE):
            wait_for(lambda n=node: federation.node_ready(lab, CONSUMER, n) == "True", timeout=60, what=f"{node} Ready")
        lab.kubectl(CONSUMER, "create", "namespace", NAMESPACE)
        federation.offload_namespace(lab, CONSUMER, NAMESPACE)
        wait_for(lambda: lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "sa", "default", check=False).returncode == 0)
        pods = [
            pinned(real_pod("talker", ["sh", "-c", TALKER_SCRIPT]), REAL_NODE),
            pinned(
                real_pod(
                    "restarter",
                    ["sh", "-c", RESTARTER_SCRIPT],
                    volumes=[{"name": "data", "emptyDir": {}}],
                    container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                ),
                REAL_NODE,
            ),
            pinned(
                real_pod(
                    "attachable", ["sh", "-c", 'while read line; do echo "got:$line"; done'], container={"stdin": True}
                ),
                REAL_NODE,
            ),
            pinned(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "fake"},
                    "spec": {"containers": [container()]},
                },
                KWOK_NODE,
            ),
        ]
        lab.kubectl(CONSUMER, "-n", NAMESPACE, "apply", "-f", "-", input=federation.as_list(pods))
        for name in ("talker", "attachable", "fake"):
            wait_for(lambda n=name: pod_phase(lab, n) == "Running", timeout=120, what=f"pod {name} Running")
        yield {"real_vk": real_vk, "kwok_vk": kwok_vk}
    finally:
        lab.kubectl(CONSUMER, "delete", "namespace", NAMESPACE, "--timeout=60s", check=False, timeout=90)
        for provider in (REAL_PROVIDER, KWOK_PROVIDER):
            lab.kubectl(
                provider, "-n", f"catamaran-tenant-{CONSUMER}", "delete", "twinnamespaces", "--all",
                "--timeout=60s", check=False, timeout=90,
            )  # fmt: skip
        federation.stop(lab, CONSUMER, processes)
        for provider in (REAL_PROVIDER, KWOK_PROVIDER):
            federation.unpeer(lab, CONSUMER, provider)


def pinned(pod: dict, node: str) -> dict:
    """A pod for one virtual node: it tolerates the virtual-node taint and selects that node only."""
    spec = pod["spec"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    spec["tolerations"] = [{"key": VIRTUAL_NODE_TAINT["key"], "operator": "Exists"}]
    pod["metadata"]["namespace"] = NAMESPACE
    return pod


def pod_phase(lab, name: str) -> str | None:
    result = lab.kubectl(CONSUMER, "-n", NAMESPACE, "get", "pod", name, "-o", "jsonpath={.status.phase}", check=False)
    return result.stdout if result.returncode == 0 else None


def kubectl(lab, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return lab.kubectl(CONSUMER, "-n", NAMESPACE, *args, check=check, **kwargs)


def kubectl_command(lab, *args: str) -> list[str]:
    return [str(lab.cache.path("kubectl")), "--kubeconfig", str(lab.kubeconfig(CONSUMER)), "-n", NAMESPACE, *args]


# -- logs -------------------------------------------------------------------------------------------------


def test_logs_of_a_real_remote_container_with_every_option(lab, fed):
    # Eight ticks: the first lines are more than two seconds old, so --since=2s must leave them out.
    wait_for(lambda: "tick 8" in kubectl(lab, "logs", "talker").stdout, what="the talker's ticks")
    whole = kubectl(lab, "logs", "talker", "-c", "main").stdout.splitlines()
    assert whole[:5] == [f"line {i} from {REAL_PROVIDER}" for i in range(1, 6)]

    assert len(kubectl(lab, "logs", "talker", "--tail=3").stdout.splitlines()) == 3
    stamped = kubectl(lab, "logs", "talker", "--timestamps", "--tail=2").stdout.splitlines()
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ", line) for line in stamped), stamped
    assert len(kubectl(lab, "logs", "talker", "--limit-bytes=12").stdout.encode()) == 12
    assert "line 1" in kubectl(lab, "logs", "talker", "--since=1h").stdout
    recent = kubectl(lab, "logs", "talker", "--since=2s").stdout
    assert "line 1" not in recent
    assert "tick" in recent
    since_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    assert kubectl(lab, "logs", "talker", f"--since-time={since_time}").stdout == ""


def test_logs_of_the_previous_container(lab, fed):
    wait_for(lambda: "second run" in kubectl(lab, "logs", "restarter", check=False).stdout, timeout=90,
             what="the restarter's second run")  # fmt: skip
    assert kubectl(lab, "logs", "restarter", "--previous").stdout.strip() == "first run"
    missing = kubectl(lab, "logs", "talker", "--previous", check=False)
    assert missing.returncode != 0
    assert "previous terminated container" in missing.stderr, missing.stderr


def test_follow_streams_lines_as_the_remote_container_writes_them(lab, fed):
    last_tick = int(re.findall(r"tick (\d+)", kubectl(lab, "logs", "talker", "--tail=1").stdout)[-1])
    follower = subprocess.Popen(
        kubectl_command(lab, "logs", "-f", "talker", "--tail=1"), stdout=subprocess.PIPE, text=True
    )
    try:
        seen: list[int] = []
        started = time.monotonic()
        while len(seen) < 4 and time.monotonic() - started < 30:
            line = follower.stdout.readline()
            if match := re.match(r"tick (\d+)", line):
                seen.append(int(match.group(1)))
        assert len(seen) == 4, f"only {seen} arrived while following"
        assert seen == sorted(seen), seen
        assert seen[-1] > last_tick + 1, seen
    finally:
        follower.kill()
        follower.wait()


def test_logs_of_a_kwok_remote_pod(lab, fed):
    result = kubectl(lab, "logs", "fake")
    assert result.stdout.strip(), "kwok's emulated log came back empty"


def test_provider_errors_come_back_with_their_status(lab, fed):
    result = kubectl(lab, "logs", "talker", "-c", "nope", check=False)
    assert result.returncode != 0
    assert "nope" in result.stderr, result.stderr


# -- exec and attach --------------------------------------------------------------------------------------


def test_exec_returns_output_and_exit_code(lab, fed):
    result = kubectl(lab, "exec", "talker", "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert result.stdout == "out\n"
    assert "err" in result.stderr
    assert result.returncode == 3
    assert kubectl(lab, "exec", "talker", "--", "cat", "/tmp/www/index.html").stdout.startswith("served by")
    piped = kubectl(lab, "exec", "-i", "talker", "--", "sh", "-c", "cat; echo done", input="from stdin\n")
    assert piped.stdout == "from stdin\ndone\n"


def test_exec_over_a_websocket_the_api_server_passes_on(lab, fed):
    """`channel.k8s.io` is not translated to SPDY by the API server: the virtual node relays the WebSocket itself."""
    server = yaml.safe_load(lab.kubeconfig(CONSUMER).read_text())["clusters"][0]["cluster"]["server"]
    command = "&".join(f"command={part}" for part in ("sh", "-c", "echo%20over-ws%3Bexit%202"))
    url = f"{server}/api/v1/namespaces/{NAMESPACE}/pods/talker/exec?{command}&stdout=true&stderr=true"

    async def run() -> tuple[str | None, bytes, bytes]:
        tls = admin_tls(lab, CONSUMER, with_client_certificate=True)
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, protocols=["channel.k8s.io"], ssl=tls) as socket,
        ):
            out, error = b"", b""
            async for message in socket:
                if message.type == aiohttp.WSMsgType.BINARY and message.data[:1] == b"\x01":
                    out += message.data[1:]
                elif message.type == aiohttp.WSMsgType.BINARY and message.data[:1] == b"\x03":
                    error += message.data[1:]
            return socket.protocol, out, error

    protocol, out, error = asyncio.run(asyncio.wait_for(run(), 30))
    assert protocol == "channel.k8s.io"
    assert out == b"over-ws\n"
    assert b"exit code 2" in error  # the provider kubelet's own words for the command's end


def _read_until(fd: int, wanted: str, timeout: float = 20) -> str:
    output = ""
    deadline = time.monotonic() + timeout
    while wanted not in output and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                output += os.read(fd, 4096).decode(errors="replace")
            except OSError:
                break
    return output


def _remote_size_reaches(controller: int, size: str, timeout: float = 20) -> str:
    """Asks the remote shell its terminal size (`stty size`) until it answers `size`, and returns what it printed.

    kubectl sends a size on the resize stream, beside the shell's input: a command typed at once may run before it
    has arrived (busybox then prints "stty: standard input"), as with any kubelet. The size must arrive, not first.
    """
    output, asked = "", 1000
    deadline = time.monotonic() + timeout
    while size not in output and time.monotonic() < deadline:
        asked += 1
        # The shell's arithmetic marks its answer; the terminal's echo of the command line does not match it.
        os.write(controller, f"stty size; echo asked=$(({asked}+1))\n".encode())
        output += _read_until(controller, f"asked={asked + 1}", max(deadline - time.monotonic(), 0.5))
        if size not in output:
            time.sleep(0.5)
    return output


@contextlib.contextmanager
def remote_shell(lab, rows: int = 24, columns: int = 80):
    """`kubectl exec -it talker -- sh` on a pseudo-terminal of the given size: the kubectl process and our end."""
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    session = subprocess.Popen(
        kubectl_command(lab, "exec", "-it", "talker", "--", "sh"),
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    try:
        yield session, controller
    finally:
        session.kill()
        os.close(controller)


def test_exec_interactive_with_a_terminal(lab, fed):
    with remote_shell(lab, rows=33, columns=101) as (session, controller):
        os.write(controller, b"echo answer=$((6*7)); tty\n")
        output = _read_until(controller, "/dev/pts")
        assert "answer=42" in output, output
        output = _remote_size_reaches(controller, "33 101")
        assert "33 101" in output, f"the terminal size did not reach the remote shell: {output!r}"
        # Resize the local terminal: kubectl sends the new size on the resize stream.
        fcntl.ioctl(controller, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.kill(session.pid, 28)  # SIGWINCH
        output = _remote_size_reaches(controller, "40 120")
        assert "40 120" in output, f"the resize did not reach the remote terminal: {output!r}"
        os.write(controller, b"exit 7\n")
        assert session.wait(timeout=20) == 7


def test_an_interrupted_shell_leaves_nothing_open_on_the_provider(lab, fed):
    with remote_shell(lab) as (session, controller):
        os.write(controller, b"echo ready=$((1+1))\n")
        assert "ready=2" in _read_until(controller, "ready=2")
        assert metric(fed["real_vk"], 'catamaran_kubelet_provider_streams{kind="exec"}') == 1
        session.kill()  # as an interrupted kubectl: the shell on the provider never exits by itself
        session.wait()
        wait_for(
            lambda: metric(fed["real_vk"], 'catamaran_kubelet_provider_streams{kind="exec"}') == 0,
            timeout=30,
            what="the provider's exec stream to close after the caller left",
        )


def test_attach_to_a_running_container(lab, fed):
    attach = subprocess.Popen(
        kubectl_command(lab, "attach", "-i", "attachable"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(2)  # the session is up before the line is sent; lines sent earlier would go nowhere
        attach.stdin.write("ping\n")
        attach.stdin.flush()
        deadline = time.monotonic() + 20
        line = ""
        while "got:ping" not in line and time.monotonic() < deadline:
            line = attach.stdout.readline()
        assert "got:ping" in line
    finally:
        attach.kill()
        attach.wait()


def test_kubectl_debug_runs_an_ephemeral_container_in_the_remote_pod(lab, fed):
    """The debug container joins the remote pod (its network: the talker's page on localhost), its status comes back
    to the local pod and its output through `kubectl logs -c`."""
    script = "echo debugging $(hostname); timeout 5 wget -qO- http://127.0.0.1:8080/"
    kubectl(
        lab, "debug", "talker", "--image=catamaran.lab/busybox:1.35.0", "--image-pull-policy=Never",
        "--profile=restricted", "-c", "debugger", "--", "sh", "-c", script,
    )  # fmt: skip

    def debugger_state() -> dict:
        statuses = get_json(lab, CONSUMER, "-n", NAMESPACE, "pod", "talker")["status"].get("ephemeralContainerStatuses")
        return next((s.get("state") or {} for s in statuses or [] if s["name"] == "debugger"), {})

    state = wait_for(lambda: debugger_state().get("terminated"), timeout=90, what="the debugger's status terminated")
    assert state["exitCode"] == 0, state
    remote = get_json(lab, REAL_PROVIDER, "-n", f"{NAMESPACE}-{CONSUMER}", "pod", "talker")
    assert [c["name"] for c in remote["spec"]["ephemeralContainers"]] == ["debugger"]
    assert kubectl(lab, "logs", "talker", "-c", "debugger").stdout.splitlines() == [
        "debugging talker",
        f"served by talker on {REAL_PROVIDER}",
    ]


# -- port-forward -----------------------------------------------------------------------------------------


def metric(process: federation.ControllerProcess, name: str) -> float:
    port = process.args[process.args.index("--metrics-port") + 1]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_port_forward_carries_concurrent_connections_and_leaves_nothing_open(lab, fed):
    forward = subprocess.Popen(
        kubectl_command(lab, "port-forward", "pod/talker", ":8080", ":8081"), stdout=subprocess.PIPE, text=True
    )
    try:
        ports = []
        while len(ports) < 2:
            line = forward.stdout.readline()
            if match := re.search(r"127\.0\.0\.1:(\d+) -> (\d+)", line):
                ports.append(int(match.group(1)))
        port, second = ports

        def fetch(_: int, port: int = port) -> str:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                connection.request("GET", "/index.html", headers={"Connection": "close"})
                return connection.getresponse().read().decode()
            finally:
                connection.close()

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            pages = list(pool.map(fetch, range(100)))
        assert pages == [pages[0]] * 100
        assert pages[0].startswith("served by talker")
        assert fetch(0, port=second) == "second port\n"
        assert metric(fed["real_vk"], "catamaran_kubelet_provider_streams") == 1
    finally:
        forward.terminate()
        forward.wait(timeout=10)
    wait_for(
        lambda: (
            metric(fed["real_vk"], "catamaran_kubelet_provider_streams") == 0
            and metric(fed["real_vk"], "catamaran_kubelet_port_forward_connections") == 0
        ),
        timeout=20,
        what="the provider connection of the port-forward closed",
    )


# -- top --------------------------------------------------------------------------------------------------


def _top(lab, *args: str) -> list[list[str]]:
    result = lab.kubectl(CONSUMER, "top", *args, "--no-headers", check=False)
    return [line.split() for line in result.stdout.splitlines()] if result.returncode == 0 else []


def _mebibytes(value: str) -> float:
    number = float(re.match(r"[\d.]+", value).group(0))
    return number / 1024 if value.endswith("Ki") else number * 1024 if value.endswith("Gi") else number


def test_top_shows_offloaded_pods_and_the_virtual_nodes_own_figures(lab, fed):
    rows = wait_for(
        lambda: (rows := _top(lab, "pod", "-n", NAMESPACE)) and {"talker", "fake"} <= {row[0] for row in rows} and rows,
        timeout=120,
        interval=5,
        what="kubectl top pod to list the offloaded pods",
    )
    by_name = {row[0]: row for row in rows}
    assert {"talker", "fake"} <= set(by_name), rows
    node_row = wait_for(
        lambda: {row[0]: row for row in _top(lab, "node")}.get(REAL_NODE), timeout=120, interval=5,
        what=f"kubectl top node to show {REAL_NODE}",
    )  # fmt: skip
    provider_rows = {row[0]: row for row in lab_top(lab, REAL_PROVIDER)}
    real_provider_node = next(name for name in provider_rows if "real" in name or name.endswith("-node"))
    # The virtual node reports its own pods' load, not the provider node's whole usage.
    node_memory = _mebibytes(node_row[3])
    pods_memory = sum(_mebibytes(by_name[name][2]) for name in ("talker", "attachable", "restarter") if name in by_name)
    assert node_memory < _mebibytes(provider_rows[real_provider_node][3])
    assert node_memory <= 2 * pods_memory + 4, (node_row, rows)


def lab_top(lab, cluster: str) -> list[list[str]]:
    result = lab.kubectl(cluster, "top", "node", "--no-headers", check=False)
    return [line.split() for line in result.stdout.splitlines()] if result.returncode == 0 else []


# -- refusals ---------------------------------------------------------------------------------------------


def _call(lab, node: str, path: str, *, client_certificate: bool = False, token: str | None = None):
    return kubelet_get(lab, CONSUMER, node, path, client_certificate=client_certificate, token=token)


def test_callers_without_credentials_or_rights_are_refused(lab, fed):
    assert _call(lab, REAL_NODE, "/pods")[0] == 401
    assert _call(lab, REAL_NODE, "/pods", token="not-a-token")[0] == 401
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "create", "serviceaccount", "nobody", check=False)
    token = lab.kubectl(CONSUMER, "-n", NAMESPACE, "create", "token", "nobody").stdout.strip()
    status, body = _call(lab, REAL_NODE, f"/containerLogs/{NAMESPACE}/talker/main", token=token)
    assert status == 403, body
    assert "nodes" in body, body
    assert _call(lab, REAL_NODE, "/stats/summary", token=token)[0] == 403
    # The cluster admin may, through this node, reach this node's pods only.
    status, body = _call(lab, REAL_NODE, f"/containerLogs/{NAMESPACE}/talker/main", client_certificate=True)
    assert status == 200
    assert "line 1" in body
    status, body = _call(lab, REAL_NODE, f"/containerLogs/{NAMESPACE}/fake/app", client_certificate=True)
    assert status == 404
    assert f"not on node {REAL_NODE}" in body
    status, body = _call(lab, KWOK_NODE, f"/containerLogs/{NAMESPACE}/talker/main", client_certificate=True)
    assert status == 404


def _node_proxy_token(lab, name: str, verbs: list[str]) -> str:
    """A service account of NAMESPACE holding only `verbs` on nodes/proxy (a monitoring agent's usual right)."""
    lab.kubectl(CONSUMER, "-n", NAMESPACE, "create", "serviceaccount", name, check=False)
    rbac = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{NAMESPACE}-{name}"},
            "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": verbs}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{NAMESPACE}-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{NAMESPACE}-{name}"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
        },
    ]
    lab.kubectl(CONSUMER, "apply", "-f", "-", input=federation.as_list(rbac))
    return lab.kubectl(CONSUMER, "-n", NAMESPACE, "create", "token", name).stdout.strip()


def _kubelet_websocket(lab, path: str, token: str) -> tuple[int, bytes]:
    """A WebSocket GET to the virtual node's kubelet API itself: (101 and stdout) or (the refusal's status, b"")."""
    host, port = node_endpoint(lab, CONSUMER, REAL_NODE)

    async def run() -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}"}
        tls = admin_tls(lab, CONSUMER, with_client_certificate=False)
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(
                    f"wss://{host}:{port}{path}", protocols=["v4.channel.k8s.io"], headers=headers, ssl=tls
                ) as socket:
                    out = b""
                    async for message in socket:
                        if message.type == aiohttp.WSMsgType.BINARY and message.data[:1] == b"\x01":
                            out += message.data[1:]
                    return 101, out
            except aiohttp.WSServerHandshakeError as refused:
                return refused.status, b""

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_get_on_nodes_proxy_reads_logs_but_runs_no_command(lab, fed):
    """A GET WebSocket carries exec, attach and port-forward: the virtual node asks for `create`, not the method's
    verb, so a monitoring agent's `get nodes/proxy` reads logs and opens nothing."""
    command = "command=sh&command=-c&command=echo%20ran&output=1&error=1"
    reader = _node_proxy_token(lab, "monitor", ["get"])
    try:
        status, body = _call(lab, REAL_NODE, f"/containerLogs/{NAMESPACE}/talker/main", token=reader)
        assert status == 200, body
        assert "line 1" in body
        assert _kubelet_websocket(lab, f"/exec/{NAMESPACE}/talker/main?{command}", reader) == (403, b"")
        assert _kubelet_websocket(lab, f"/attach/{NAMESPACE}/attachable/main?output=1", reader)[0] == 403
        assert _kubelet_websocket(lab, f"/portForward/{NAMESPACE}/talker?port=8080", reader)[0] == 403
        # The control: `create` on nodes/proxy runs the same command through the same door.
        runner = _node_proxy_token(lab, "runner", ["create"])
        assert _kubelet_websocket(lab, f"/exec/{NAMESPACE}/talker/main?{command}", runner) == (101, b"ran\n")
    finally:
        for name in ("monitor", "runner"):
            lab.kubectl(CONSUMER, "delete", "clusterrole,clusterrolebinding", f"{NAMESPACE}-{name}", check=False)


def _forged_status(remote: dict) -> dict:
    """The remote pod's status as a provider's admin may rewrite it: a container the spec does not have, another
    image, a restart count one recreation short of overflowing int32."""
    status = json.loads(json.dumps(remote["status"]))
    (main,) = status["containerStatuses"]
    main.update(image="evil.example/backdoor:latest", restartCount=2147483000)
    status["containerStatuses"].append(dict(main, name="ghost", containerID="containerd://" + "e" * 64))
    return status


def test_a_forged_pod_status_never_reaches_the_consumers_pod(lab, fed):
    twin = f"{NAMESPACE}-{CONSUMER}"
    remote = get_json(lab, REAL_PROVIDER, "pod", "-n", twin, "talker")
    forged = _forged_status(remote)
    spec_image = get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "talker")["spec"]["containers"][0]["image"]
    shown: list[dict] = []

    def remote_names() -> set[str]:
        return {
            s["name"] for s in get_json(lab, REAL_PROVIDER, "pod", "-n", twin, "talker")["status"]["containerStatuses"]
        }

    try:
        for _ in range(3):  # in a loop, as an admin fighting the kubelet (which reports its own again) would
            lab.kubectl(
                REAL_PROVIDER, "-n", twin, "patch", "pod", "talker", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": forged}),
            )  # fmt: skip
            time.sleep(2)
            shown += get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "talker")["status"]["containerStatuses"]

        def refused() -> set[str]:
            events = get_json(
                lab, CONSUMER, "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=talker"
            )
            return {e["reason"] for e in events["items"] if e["type"] == "Warning"}

        wanted = {"ContainerStatusRefused", "ContainerImageReplaced", "RestartCountClamped"}
        wait_for(lambda: wanted <= refused(), timeout=30, what=f"Warning Events {sorted(wanted)} on the pod")
        shown += get_json(lab, CONSUMER, "pod", "-n", NAMESPACE, "talker")["status"]["containerStatuses"]
        assert {s["name"] for s in shown} == {"main"}, shown
        assert {s["image"] for s in shown} == {spec_image}, shown
        assert max(s["restartCount"] for s in shown) <= 1_000_000, shown
    finally:  # the kubelet's status manager rewrites what differs from its own report, within its 10 s sync
        wait_for(lambda: remote_names() == {"main"}, timeout=60, what="the kubelet's own report on the remote pod")


# -- the serving certificate ------------------------------------------------------------------------------


def _served_certificate(lab, node: str) -> x509.Certificate:
    host, port = node_endpoint(lab, CONSUMER, node)
    context = admin_tls(lab, CONSUMER, with_client_certificate=False)
    with socket.create_connection((host, port), timeout=10) as raw, context.wrap_socket(raw) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))


def _serving_requests(lab, node: str) -> list[dict]:
    return get_json(lab, CONSUMER, "csr", "-l", f"catamaran.io/kubelet-serving-node={node}")["items"]


def test_the_serving_certificate_comes_from_an_approved_csr_and_is_renewed(lab, fed):
    pid = (lab.kwok_workdir / "clusters" / CONSUMER / "pids" / "kube-apiserver.pid").read_text().strip()
    apiserver_args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert any(a.startswith(b"--kubelet-certificate-authority=") for a in apiserver_args), (
        "the API server trusts any kubelet"
    )
    first = _served_certificate(lab, REAL_NODE)  # verified against the cluster CA by the handshake itself
    assert first.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{REAL_NODE}"
    requests = _serving_requests(lab, REAL_NODE)
    assert requests, "no CertificateSigningRequest for the virtual node"

    def approved_by_catamaran(request: dict) -> bool:
        status = request.get("status") or {}
        conditions = status.get("conditions") or []
        return bool(status.get("certificate")) and any(
            c["type"] == "Approved" and c["reason"] == "CatamaranVirtualKubelet" for c in conditions
        )

    approved = [r for r in requests if approved_by_catamaran(r)]
    assert approved
    assert all(r["spec"]["signerName"] == "kubernetes.io/kubelet-serving" for r in approved)
    lifetime = first.not_valid_after_utc - first.not_valid_before_utc
    assert lifetime.total_seconds() <= CERT_SECONDS + 300
    renewed = wait_for(
        lambda: (cert := _served_certificate(lab, REAL_NODE)).serial_number != first.serial_number and cert,
        timeout=CERT_SECONDS * RENEW_FRACTION + 60,
        interval=3,
        what="the serving certificate renewed",
    )
    assert renewed.not_valid_after_utc > first.not_valid_after_utc
    # A new request, by name: kube-controller-manager's hourly cleaner may have removed expired ones meanwhile.
    earlier = {r["metadata"]["name"] for r in requests}
    assert {r["metadata"]["name"] for r in _serving_requests(lab, REAL_NODE)} - earlier, "renewed without a new CSR"
    # Still verified by the API server after the renewal.
    assert "line 1" in kubectl(lab, "logs", "talker", "--tail=-1").stdout


def test_a_csr_for_a_virtual_node_from_anyone_else_is_denied(lab, fed):
    _, request_pem = serving_request(REAL_NODE, ["127.0.0.1"])
    manifest = csr_manifest(REAL_NODE, request_pem, None)
    manifest["metadata"] = {"name": "mallory-serving"}
    lab.kubectl(CONSUMER, "--as=mallory", "--as-group=system:masters", "create", "-f", "-", input=json.dumps(manifest))
    try:
        denied = wait_for(
            lambda: [
                c for c in get_json(lab, CONSUMER, "csr", "mallory-serving").get("status", {}).get("conditions", [])
                if c["type"] == "Denied"
            ],
            what="the manager to deny mallory's request",
        )  # fmt: skip
        assert "mallory" in denied[0]["message"]
    finally:
        lab.kubectl(CONSUMER, "delete", "csr", "mallory-serving", check=False)
