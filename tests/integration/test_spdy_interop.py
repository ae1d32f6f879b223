"""catamaran.vk.kubelet.spdy against the SPDY/3.1 implementation kube-apiserver uses towards kubelets.

lab/gomod/internal/spdyprobe is built with k8s.io/streaming/pkg/httpstream/spdy and github.com/moby/spdystream
at the versions lab/gomod pins, then plays kube-apiserver against a Python SpdySession server, and a
kubelet for a Python client. No lab cluster is needed; Go is, and a missing Go or a failed build fails
the test with the reason (never a skip).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from catamaran.vk.kubelet.spdy import SpdyError, SpdySession, SpdyStream
from catamaran.vk.kubelet.spdy.frames import CANCEL

GOMOD = Path(__file__).resolve().parents[2] / "lab" / "gomod"
PROBE_PACKAGE = "./internal/spdyprobe"
BIG = 16 * 1024 * 1024  # as in the probe
CONCURRENT = 50
PROBE_TIMEOUT = 120


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.fail("the SPDY interop test needs Go (lab/gomod's toolchain) on PATH, and there is none", pytrace=False)
    binary = tmp_path_factory.mktemp("spdyprobe") / "spdyprobe"
    # -mod=readonly: the probe builds from lab/gomod's go.mod and go.sum as they are, or not at all.
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
    built = subprocess.run(
        [go, "build", "-o", str(binary), PROBE_PACKAGE], cwd=GOMOD, env=env, capture_output=True, text=True, timeout=600
    )
    if built.returncode != 0:
        pytest.fail(f"building {PROBE_PACKAGE} in {GOMOD} failed:\n{built.stderr}", pytrace=False)
    return binary


def pattern(size: int) -> bytes:
    cycle = bytes(range(251))
    return (cycle * (size // len(cycle) + 1))[:size]


async def read_all(stream: SpdyStream) -> bytes:
    chunks = []
    while chunk := await stream.read():
        chunks.append(chunk)
    return b"".join(chunks)


async def finish(probe_process: asyncio.subprocess.Process) -> str:
    """The probe's output once it exited 0; a failed test with its reasons otherwise."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            stdout, stderr = await probe_process.communicate()
    except TimeoutError:
        probe_process.kill()
        stdout, stderr = await probe_process.communicate()
        pytest.fail(
            f"the probe did not finish within {PROBE_TIMEOUT}s:\n{stdout.decode()}\n{stderr.decode()}", pytrace=False
        )
    if probe_process.returncode != 0:
        pytest.fail(f"the probe failed (exit {probe_process.returncode}):\n{stderr.decode()}", pytrace=False)
    return stdout.decode()


class PythonServer:
    """What the probe's client mode expects from a kubelet-side session, and what it saw."""

    def __init__(self):
        self.sessions: list[SpdySession] = []
        self.session_runs: list[asyncio.Task] = []
        self.handlers: list[asyncio.Task] = []
        self.seen_headers: list[dict[str, str]] = []
        self.client_reset_status: int | None = None
        self.upload_chunks = 0

    async def connected(self, reader, writer) -> None:
        session = SpdySession(reader, writer, server=True)
        self.sessions.append(session)
        self.session_runs.append(asyncio.create_task(session.run()))
        while (stream := await session.accept()) is not None:
            self.handlers.append(asyncio.create_task(self.serve(session, stream)))

    async def serve(self, session: SpdySession, stream: SpdyStream) -> None:
        self.seen_headers.append(stream.headers)
        scenario = stream.headers.get("scenario")
        if scenario == "headers":
            expected = {"scenario": "headers", "streamtype": "error", "port": "8080", "requestid": "1"}
            await stream.write(b"ok" if stream.headers == expected else repr(stream.headers).encode())
        elif scenario == "echo":
            while chunk := await stream.read():
                await stream.write(chunk)
        elif scenario == "sink":
            size, digest = 0, hashlib.sha256()
            while chunk := await stream.read():
                size += len(chunk)
                digest.update(chunk)
                self.upload_chunks += 1
            await stream.write(f"{size} {digest.hexdigest()}".encode())
        elif scenario == "source":
            await stream.write(pattern(int(stream.headers["size"])))
        elif scenario == "reset-me":
            stream.reset()
            return
        elif scenario == "client-resets":
            await read_all(stream)
            self.client_reset_status = stream.reset_status
            return
        elif scenario == "server-pings":
            async with asyncio.timeout(10):
                await session.ping()
            await stream.write(b"ok")
        await stream.close()


def test_kube_apiserver_side_client_against_python_server(probe):
    async def scenario():
        python = PythonServer()
        listener = await asyncio.start_server(python.connected, "127.0.0.1", 0)
        host, port = listener.sockets[0].getsockname()[:2]
        async with listener:
            process = await asyncio.create_subprocess_exec(
                str(probe), "client", f"{host}:{port}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            assert (await finish(process)).strip() == "OK"
            async with asyncio.timeout(10):
                await asyncio.gather(*python.session_runs)  # the probe's GOAWAY ended both sessions
            await asyncio.gather(*python.handlers)
        main, pings = python.sessions
        assert main.error is None
        assert pings.error is None
        assert python.client_reset_status == CANCEL
        assert python.upload_chunks >= BIG // (64 * 1024)  # its 1 MiB frames came in bounded pieces
        assert {"port": "8080", "requestid": "1", "streamtype": "error", "scenario": "headers"} in python.seen_headers
        # spdystream sent no WINDOW_UPDATE and no SETTINGS: our writes never waited on a window.
        assert not main.peer_flow_control

    asyncio.run(scenario())


def test_python_client_against_kubelet_side_server(probe):
    async def scenario():
        process = await asyncio.create_subprocess_exec(
            str(probe), "server", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        async with asyncio.timeout(30):
            first_line = (await process.stdout.readline()).decode()
        if not first_line.startswith("LISTENING "):
            process.kill()
            _, stderr = await process.communicate()
            pytest.fail(f"the probe did not start listening: {first_line!r}\n{stderr.decode()}", pytrace=False)
        host, port = first_line.split()[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        client = SpdySession(reader, writer, server=False)
        running = asyncio.create_task(client.run())

        stream = await client.open_stream({"scenario": "headers", "streamType": "data", "port": "80"})
        await stream.close()
        assert await read_all(stream) == b"data 80"

        stream = await client.open_stream({"scenario": "echo"})
        upload = pattern(BIG)

        async def send_then_close():
            await stream.write(upload)
            await stream.close()

        _, echoed = await asyncio.gather(send_then_close(), read_all(stream))  # io.Copy echoes as it reads
        assert hashlib.sha256(echoed).digest() == hashlib.sha256(upload).digest()

        stream = await client.open_stream({"scenario": "sink"})
        await stream.write(upload)
        await stream.close()
        assert (await read_all(stream)).decode() == f"{BIG} {hashlib.sha256(upload).hexdigest()}"

        stream = await client.open_stream({"scenario": "source", "size": str(BIG)}, fin=True)
        assert await read_all(stream) == pattern(BIG)

        async def echo_once(number: int) -> None:
            stream = await client.open_stream({"scenario": "echo"})
            message = bytes([number]) * (64 * 1024 + number)
            await stream.write(message)
            await stream.close()
            assert await read_all(stream) == message

        await asyncio.gather(*(echo_once(number) for number in range(CONCURRENT)))

        stream = await client.open_stream({"scenario": "reset-me"})
        assert await read_all(stream) == b""
        assert stream.reset_status == CANCEL
        with pytest.raises(SpdyError, match="reset"):
            await stream.write(b"too late")

        async with asyncio.timeout(10):
            assert await client.ping() >= 0
        assert not client.peer_flow_control

        await client.close()
        await running
        assert client.error is None
        assert (await finish(process)).strip() == "OK"  # it saw the connection close, and no failure

    asyncio.run(scenario())
