"""lightkube's requests built without httpx2's URL parser.

lightkube turns each call into a BasicRequest (method, relative path, query parameters, body) and hands it to httpx2's
build_request, which parses the URL three times over (the path, its merge with the server's address, the query),
checking every character and the host's IP address each time: about 150 us of CPU per request, a tenth of the virtual
kubelet's CPU per offloaded pod. The server's address never changes and lightkube's paths are plain, so this builder
parses the address once per client and appends path and query to it. The request then goes through httpx2's send as
before (auth, event hooks, the aiohttp transport, errors), and lightkube decodes the response as before.

httpx2 has no public way to make a URL from parts it already parsed, so `_url` sets the parsed form a URL holds
(`_uri_reference`). tests/unit/kube/test_request_builder.py compares every built request with httpx2's own build, so an
httpx2 release that changes that form fails there.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import httpx2
import msgspec
from lightkube import AsyncClient
from lightkube.core.generic_client import BasicRequest

# What httpx2 leaves unescaped in a path: printable ASCII but space " # < > ? ` { } (the WHATWG path set).
_PATH_SAFE = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>?`{}')
_encode = msgspec.json.encode  # lightkube's own body encoder


def _query_value(value) -> str:
    """A parameter as httpx2 writes it: booleans as JSON spells them."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)


def _url(base: httpx2.URL, path: str, params: dict) -> httpx2.URL:
    reference = base._uri_reference
    query = urlencode([(key, _query_value(value)) for key, value in params.items()]) if params else None
    prefix = reference.path if reference.path.endswith("/") else reference.path + "/"  # "" for a bare host
    url = httpx2.URL.__new__(httpx2.URL)
    url._uri_reference = reference._replace(path=prefix + quote(path.lstrip("/"), safe=_PATH_SAFE), query=query)
    return url


def build(http: httpx2.AsyncClient, request: BasicRequest) -> httpx2.Request:
    """The httpx2 request lightkube's build_adapter_request would make of `request`, with the client's base URL,
    default headers and timeout."""
    headers = httpx2.Headers(http.headers)
    if request.headers:
        headers.update(request.headers)
    content = None
    if request.data is not None:
        content = _encode(request.data)
        if "Content-Type" not in headers:
            headers["Content-Type"] = "application/json"
    timeout = http.timeout if request.timeout is None else httpx2.Timeout(request.timeout)
    return httpx2.Request(
        request.method,
        _url(http.base_url, request.url, request.params),
        headers=headers,
        content=content,
        extensions={"timeout": timeout.as_dict()},
    )


def install(client: AsyncClient, http: httpx2.AsyncClient) -> None:
    """Make `client` build its requests here; `http` is its httpx2 client."""
    generic = client._client
    generic.build_adapter_request = lambda br: build(http, br)  # type: ignore[method-assign]
