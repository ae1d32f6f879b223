"""`containerLogs`: the remote container's log, streamed from the provider as it comes."""

from __future__ import annotations

import asyncio
import contextlib

from .channel import ProviderChannel
from .http import Request

# The kubelet's containerLogs query, which is also the provider's pods/log query (PodLogOptions).
LOG_OPTIONS = ("follow", "previous", "timestamps", "sinceSeconds", "sinceTime", "tailLines", "limitBytes", "stream")


def log_params(request: Request, container: str) -> list[tuple[str, str]]:
    params = [("container", container)]
    for name in LOG_OPTIONS:
        value = request.param(name)
        if value is not None and value != "":
            params.append((name, value))
    return params


async def serve_logs(request: Request, channel: ProviderChannel, twin: str, pod: str, container: str) -> None:
    path = f"/api/v1/namespaces/{twin}/pods/{pod}/log"
    async with channel.get_stream(path, log_params(request, container)) as response:
        body = await request.start_stream(200, response.headers.get("content-type", "text/plain"))
        copying = asyncio.ensure_future(_copy(response, body))
        # A followed log may stay quiet for hours: notice the caller leaving without waiting for a line.
        gone = asyncio.ensure_future(request.reader.read(1))
        try:
            await asyncio.wait({copying, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (copying, gone):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if copying.done() and not copying.cancelled() and copying.exception() is None:
            await body.end()
        else:
            request.writer.close()  # the response cannot be finished; the connection goes with it


async def _copy(response, body) -> None:
    async for chunk in response.aiter_raw():
        await body.write(chunk)
