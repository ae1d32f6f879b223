"""The aiohttp transport's error mapping: lightkube and the watch loops catch httpx2's exceptions only."""

import aiohttp
import httpx2
import pytest
from aiohttp.client_reqrep import ConnectionKey

from catamaran.kube.transport import _httpx_errors

REQUEST = httpx2.Request("GET", "https://127.0.0.1:6443/api/v1/pods")
KEY = ConnectionKey("127.0.0.1", 6443, True, True, None, None, None)


@pytest.mark.parametrize(
    ("raised", "reading", "expected"),
    [
        (aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")), False, httpx2.ConnectError),
        (aiohttp.ConnectionTimeoutError("connect timed out"), False, httpx2.ConnectTimeout),
        (aiohttp.SocketTimeoutError("read timed out"), True, httpx2.ReadTimeout),
        (TimeoutError(), True, httpx2.ReadTimeout),
        (aiohttp.ServerDisconnectedError(), False, httpx2.RemoteProtocolError),
        (aiohttp.ClientPayloadError("cut short"), True, httpx2.RemoteProtocolError),
        (aiohttp.ClientOSError(104, "reset"), True, httpx2.ReadError),
        (aiohttp.ClientOSError(32, "broken pipe"), False, httpx2.WriteError),
    ],
)
def test_aiohttp_errors_become_the_httpx2_ones(raised, reading, expected):
    with pytest.raises(expected) as caught, _httpx_errors(REQUEST, reading=reading):
        raise raised
    assert type(caught.value) is expected
    assert caught.value.request is REQUEST
    assert caught.value.__cause__ is raised


def test_other_errors_pass_through():
    with pytest.raises(ValueError, match="not a transport error"), _httpx_errors(REQUEST, reading=True):
        raise ValueError("not a transport error")
