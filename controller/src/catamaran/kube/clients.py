"""Build lightkube AsyncClients from kubeconfig files, kubeconfig Secrets or the pod's service account."""

from __future__ import annotations

import os

import httpx2
import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ConfigError


class CredentialError(Exception):
    """A kubeconfig or credential that cannot be used; the message names what is wrong."""


def kubeconfig_from_file(path: str | None, context: str | None = None) -> KubeConfig:
    try:
        if path:
            config = KubeConfig.from_file(path)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            return KubeConfig.from_service_account()
        else:
            config = KubeConfig.from_env()
        if context and context not in config.contexts:
            raise CredentialError(f"kubeconfig {path or '$KUBECONFIG'} has no context {context!r}")
        return config
    except (ConfigError, OSError, yaml.YAMLError) as error:
        raise CredentialError(f"cannot load kubeconfig {path or '$KUBECONFIG'}: {error}") from error


def kubeconfig_from_text(text: str, origin: str) -> KubeConfig:
    """A kubeconfig held in a Secret; `origin` names the Secret in error messages, never its content."""
    try:
        data = yaml.safe_load(text)
        if not isinstance(data, dict) or not data.get("clusters"):
            raise CredentialError(f"{origin} does not hold a kubeconfig (no clusters)")
        return KubeConfig.from_dict(data)
    except (ConfigError, yaml.YAMLError, KeyError, TypeError) as error:
        raise CredentialError(f"{origin} holds an unusable kubeconfig: {type(error).__name__}") from None


# Every watch holds an HTTP/1.1 connection for its lifetime; a pool smaller than the watch count would
# starve ordinary requests (the health check, status writes) once enough twin namespaces are watched.
# HTTP/2 would share one connection, but httpcore's HTTP/2 stalls every request once three streams stay open.
MAX_CONNECTIONS = 4096


class BearerToken(httpx2.Auth):
    """A bearer token that can be replaced while the clients holding it keep running (a rotated credential)."""

    def __init__(self, token: str):
        self.token = token

    def auth_flow(self, request: httpx2.Request):
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request

    def __repr__(self) -> str:
        return "BearerToken(<hidden>)"


def async_client(config: KubeConfig, context: str | None, field_manager: str, timeout: float = 15) -> AsyncClient:
    """A client for `config`; a static bearer token is installed as a BearerToken (see bearer_token())."""
    single = config.get(context)
    client = AsyncClient(
        config=single,
        field_manager=field_manager,
        timeout=httpx2.Timeout(timeout),
        trust_env=False,
    )
    http = client._client._client  # lightkube's httpx client: auth, TLS and the connection pool live there
    user = single.user
    if user is not None and user.token is not None and user.token_file is None:
        http.auth = BearerToken(user.token)
    # lightkube has no setting for the pool; its httpx transport keeps one.
    pool = http._transport._pool
    pool._max_connections = MAX_CONNECTIONS
    return client


def bearer_token(client: AsyncClient) -> BearerToken | None:
    """The client's replaceable token: setting its `token` switches every later request, streams included."""
    auth = client._client._client.auth
    return auth if isinstance(auth, BearerToken) else None


async def get_raw(client: AsyncClient, path: str, request_timeout: float) -> tuple[int, str]:
    """GET a non-resource path such as /readyz with the client's own credentials and TLS settings."""
    # lightkube has no public call for non-resource paths; its httpx client carries auth and TLS.
    http = client._client._client
    response = await http.get(path, timeout=request_timeout)
    return response.status_code, response.text
