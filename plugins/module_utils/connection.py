# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""How a module reaches a cluster: its options, where each one comes from, and the client's configuration.

As in kubernetes.core: a kubeconfig (a path, or its content as a dict) and a context; or a host with an API key or
a client certificate; a CA and validate_certs. An option not given in the task comes from the module's top-level
defaults (for modules with per-cluster suboptions), then from its K8S_AUTH_* environment variable. With neither a
kubeconfig, a context nor a host and credential, the pod's service account is used when the module runs in a pod,
else the default kubeconfig (KUBECONFIG, else ~/.kube/config).

The kubeconfig is read here, not by the kubernetes client: importing that library costs about 0.3 s of CPU, half of
a module run, on every task. Only a user that authenticates through an exec plugin or an auth provider is loaded by
it (imported then), so those keep the client's own support.

Pure logic: no AnsibleModule here, so the unit tests reach all of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os

try:
    import yaml

    YAML_IMPORT_ERROR = None
except ImportError as import_error:  # reported by the modules through missing_required_lib
    yaml = None
    YAML_IMPORT_ERROR = import_error


OPTIONS = (
    "kubeconfig",
    "context",
    "host",
    "api_key",
    "ca_cert",
    "client_cert",
    "client_key",
    "validate_certs",
    "request_timeout",
)

# kubernetes.core reads K8S_AUTH_<option> then K8S_AUTH_<kubernetes client name> (args_common.AUTH_ARG_MAP).
ENVIRONMENT = {
    "kubeconfig": ("K8S_AUTH_KUBECONFIG",),
    "context": ("K8S_AUTH_CONTEXT",),
    "host": ("K8S_AUTH_HOST",),
    "api_key": ("K8S_AUTH_API_KEY",),
    "ca_cert": ("K8S_AUTH_CA_CERT", "K8S_AUTH_SSL_CA_CERT"),
    "client_cert": ("K8S_AUTH_CLIENT_CERT", "K8S_AUTH_CERT_FILE"),
    "client_key": ("K8S_AUTH_CLIENT_KEY", "K8S_AUTH_KEY_FILE"),
    "validate_certs": ("K8S_AUTH_VALIDATE_CERTS", "K8S_AUTH_VERIFY_SSL"),
}
PATH_OPTIONS = ("ca_cert", "client_cert", "client_key")
DEFAULT_REQUEST_TIMEOUT = 10

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

# Fields of a kubeconfig's users that are secrets (masked in everything a module prints).
SECRET_USER_FIELDS = ("token", "password", "client-key-data", "client-certificate-data")
SECRET_AUTH_PROVIDER_FIELDS = ("access-token", "id-token", "refresh-token", "client-secret")


def argument_spec():
    """The connection options. No defaults here: an unset option falls back to the next source (see resolve)."""
    return dict(
        # A path or the content: not no_log as a whole (that would mask every name in it and the path in errors);
        # the secrets inside are masked one by one (secrets_in).
        kubeconfig=dict(type="raw", no_log=False),
        context=dict(type="str"),
        host=dict(type="str"),
        api_key=dict(type="str", no_log=True),
        ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
        client_cert=dict(type="path", aliases=["cert_file"]),
        client_key=dict(type="path", aliases=["key_file"], no_log=False),
        validate_certs=dict(type="bool", aliases=["verify_ssl"]),
        request_timeout=dict(type="int"),
    )


class ConnectionProblem(Exception):
    """The connection options cannot work; the message says why (the caller names the cluster)."""


def from_environment(name, environ):
    """The K8S_AUTH_* value of one option, None when unset (or empty)."""
    for variable in ENVIRONMENT.get(name, ()):
        value = environ.get(variable)
        if value:
            if name == "validate_certs":
                return value.lower() not in ("0", "false", "no")
            return value
    return None


def resolve(given, defaults=None, environ=None):
    """Every connection option: from the task, else the module-wide defaults, else K8S_AUTH_*, else the default.

    `given` is a task's options (a peering side's suboptions, or a single-cluster module's parameters); `defaults`
    the top-level options of a module with per-cluster suboptions, which `module_defaults` can set once.
    """
    environ = os.environ if environ is None else environ
    resolved = {}
    for name in OPTIONS:
        value = (given or {}).get(name)
        if value is None and defaults:
            value = defaults.get(name)
        if value is None:
            value = from_environment(name, environ)
        resolved[name] = value
    for name in ("kubeconfig", *PATH_OPTIONS):
        if isinstance(resolved[name], str):
            resolved[name] = os.path.expanduser(os.path.expandvars(resolved[name]))
    if resolved["kubeconfig"] is not None and not isinstance(resolved["kubeconfig"], (str, dict)):
        raise ConnectionProblem(
            "kubeconfig must be a path or the kubeconfig's content as a dict, got %s"
            % type(resolved["kubeconfig"]).__name__
        )
    # Unset, the kubeconfig decides (its insecure-skip-tls-verify), as kubernetes.core does; else verified.
    if resolved["request_timeout"] is None:
        resolved["request_timeout"] = DEFAULT_REQUEST_TIMEOUT
    if resolved["request_timeout"] < 1:
        raise ConnectionProblem("request_timeout must be at least 1, got %s" % resolved["request_timeout"])
    return resolved


def secrets_in(resolved):
    """The values to mask: the API key and the credentials inside kubeconfig content."""
    secrets = [resolved.get("api_key")]
    document = resolved.get("kubeconfig")
    if isinstance(document, dict):
        for entry in document.get("users") or []:
            user = (entry or {}).get("user") or {}
            secrets.extend(user.get(field) for field in SECRET_USER_FIELDS)
            provider_config = (user.get("auth-provider") or {}).get("config") or {}
            secrets.extend(provider_config.get(field) for field in SECRET_AUTH_PROVIDER_FIELDS)
    return [value for value in secrets if isinstance(value, str) and value]


def explicit(resolved):
    """A host with a token or a client certificate: enough to connect without any kubeconfig (kubernetes.core)."""
    return bool(
        resolved.get("host")
        and (resolved.get("api_key") or (resolved.get("client_cert") and resolved.get("client_key")))
    )


def label_for(resolved):
    """How messages name a cluster whose id is unknown."""
    if explicit(resolved):
        return resolved["host"]
    if resolved.get("context"):
        return resolved["context"]
    if resolved.get("host"):
        return resolved["host"]
    if isinstance(resolved.get("kubeconfig"), str):
        return resolved["kubeconfig"]
    if resolved.get("kubeconfig") is not None:
        return "the cluster of the kubeconfig given as content"
    return "the cluster"


def in_cluster(environ, token_file=SERVICE_ACCOUNT_TOKEN):
    """Does the pod's environment say the module runs in a pod with a service account?"""
    return bool(environ.get("KUBERNETES_SERVICE_HOST") and environ.get("KUBERNETES_SERVICE_PORT")) and (
        os.path.isfile(token_file)
    )


def default_kubeconfig(environ):
    """KUBECONFIG (one path or several, as kubectl takes them), else ~/.kube/config."""
    return environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


class Endpoint:
    """Where a cluster's API server is and how to prove who we are: all the HTTP client (module_utils.kube) needs.

    The CA and the client certificate are each a file or PEM content (from a kubeconfig's *-data); `authorization`
    is the Authorization header's value ("Bearer ...", or "Basic ..." for a username and password).
    """

    def __init__(self, server, context=None, source=""):
        self.server = server
        self.context = context
        self.source = source  # e.g. "kubeconfig /path, context c" (never a secret)
        self.verifies_tls = True
        self.ca_file = None
        self.ca_pem = None
        self.cert_file = None
        self.cert_pem = None
        self.key_file = None
        self.key_pem = None
        self.authorization = None
        self.tls_server_name = None
        self.proxy = None

    @property
    def ca_data(self):
        """The CA in base64, as a kubeconfig's certificate-authority-data (what the peering hands a consumer)."""
        if self.ca_pem is not None:
            return base64.b64encode(self.ca_pem).decode()
        if self.ca_file and os.path.isfile(self.ca_file):
            with open(self.ca_file, "rb") as handle:
                return base64.b64encode(handle.read()).decode()
        return None


def configure(resolved, environ=None, token_file=SERVICE_ACCOUNT_TOKEN, ca_file=SERVICE_ACCOUNT_CA):
    """The endpoint the resolved options describe (kubernetes.core's order).

    1. host with api_key, or with client_cert and client_key: nothing else is loaded;
    2. else a kubeconfig or a context: that kubeconfig (the default one for a context alone);
    3. else the pod's service account when in a pod; else the default kubeconfig.
    The options given then override what was loaded (host, api_key, certificates, validate_certs); without
    validate_certs, a kubeconfig's insecure-skip-tls-verify is honoured.
    """
    environ = os.environ if environ is None else environ
    host = resolved.get("host")
    host = host.rstrip("/") if host else None
    if explicit(resolved):
        endpoint = Endpoint(host, source="host %s" % host)
    elif resolved.get("kubeconfig") is not None or resolved.get("context"):
        kubeconfig = resolved.get("kubeconfig")
        if kubeconfig is None:
            kubeconfig = default_kubeconfig(environ)
        endpoint = load_kubeconfig(kubeconfig, resolved.get("context"))
    elif in_cluster(environ, token_file):
        endpoint = service_account(environ, token_file, ca_file)
    else:
        kubeconfig = default_kubeconfig(environ)
        if not any(os.path.isfile(path) for path in kubeconfig.split(os.pathsep) if path):
            raise ConnectionProblem(
                "no connection given: set kubeconfig (or K8S_AUTH_KUBECONFIG), or host with api_key or with "
                "client_cert and client_key; the module does not run in a pod with a service account, and the "
                "default kubeconfig %s does not exist" % kubeconfig
            )
        endpoint = load_kubeconfig(kubeconfig, None)
    override(endpoint, resolved, host)
    return endpoint


def override(endpoint, resolved, host):
    for name, attribute in (("ca_cert", "ca"), ("client_cert", "cert"), ("client_key", "key")):
        path = resolved.get(name)
        if path is None:
            continue
        if not os.path.isfile(path):
            raise ConnectionProblem("%s %s does not exist" % (name, path))
        setattr(endpoint, attribute + "_file", path)
        setattr(endpoint, attribute + "_pem", None)
    if host:
        endpoint.server = host
    if resolved.get("api_key"):
        endpoint.authorization = "Bearer %s" % resolved["api_key"]
    if resolved.get("validate_certs") is not None:
        endpoint.verifies_tls = bool(resolved["validate_certs"])


def service_account(environ, token_file, ca_file):
    """The pod's service account, as client-go's in-cluster configuration reads it."""
    host = environ["KUBERNETES_SERVICE_HOST"]
    if ":" in host:  # an IPv6 address
        host = "[%s]" % host
    endpoint = Endpoint(
        "https://%s:%s" % (host, environ["KUBERNETES_SERVICE_PORT"]), source="the pod's service account"
    )
    try:
        with open(token_file) as handle:
            token = handle.read().strip()
    except OSError as error:
        raise ConnectionProblem("the pod's service account cannot be used: %s" % error) from None
    if not token:
        raise ConnectionProblem("the pod's service account cannot be used: its token file %s is empty" % token_file)
    if not os.path.isfile(ca_file):
        raise ConnectionProblem("the pod's service account cannot be used: its CA %s does not exist" % ca_file)
    endpoint.authorization = "Bearer %s" % token
    endpoint.ca_file = ca_file
    return endpoint


def load_kubeconfig(kubeconfig, context):
    """The endpoint of one context of a kubeconfig (path(s) or content), the current one unless named."""
    if isinstance(kubeconfig, dict):
        where = "the kubeconfig given as content"
        document = named_entries(kubeconfig, None)
    else:
        where = "kubeconfig %s" % kubeconfig
        document = read_kubeconfig(kubeconfig)
    contexts = document["contexts"]
    chosen = context or document.get("current-context")
    if not chosen:
        raise ConnectionProblem("%s has no current-context and no context was given" % where)
    if chosen not in contexts:
        raise ConnectionProblem(
            "context %r is not in %s (it has: %s)"
            % (chosen, where, ", ".join(sorted(c for c in contexts if c)) or "none")
        )
    source = "%s, context %s" % (where, chosen)
    try:
        endpoint = endpoint_of(document, contexts[chosen][0], source)
    except ConnectionProblem as problem:
        raise ConnectionProblem("%s: %s" % (source, problem)) from None
    if endpoint is None:  # an exec plugin or an auth provider: the kubernetes client's own loader
        endpoint = load_with_kubernetes_client(kubeconfig, chosen, source)
    endpoint.context = chosen
    return endpoint


def endpoint_of(document, context, source):
    """The endpoint a context names, or None when its user needs the kubernetes client (exec, auth-provider)."""
    cluster, cluster_base = entry(document, "clusters", context.get("cluster"))
    user, user_base = entry(document, "users", context.get("user")) if context.get("user") else ({}, "")
    if "exec" in user or "auth-provider" in user:
        return None
    server = cluster.get("server")
    if not server:
        raise ConnectionProblem("cluster %s has no server" % context.get("cluster"))
    endpoint = Endpoint(str(server).rstrip("/"), source=source)
    endpoint.ca_file, endpoint.ca_pem = file_or_data(cluster, "certificate-authority", cluster_base)
    if "insecure-skip-tls-verify" in cluster:
        endpoint.verifies_tls = not cluster["insecure-skip-tls-verify"]
    endpoint.tls_server_name = cluster.get("tls-server-name")
    endpoint.proxy = cluster.get("proxy-url")
    # kubernetes.core's client: a token (or a token file), else a username and a password; certificates beside.
    token = user.get("token")
    if not token and user.get("tokenFile"):
        path = relative_to(user_base, user["tokenFile"])
        try:
            with open(path) as handle:
                token = handle.read().strip()
        except OSError as error:
            raise ConnectionProblem("tokenFile %s cannot be read: %s" % (path, error.strerror or error)) from None
    if token:
        endpoint.authorization = "Bearer %s" % token
    elif "username" in user and "password" in user:
        pair = "%s:%s" % (user["username"], user["password"])
        endpoint.authorization = "Basic %s" % base64.b64encode(pair.encode()).decode()
    endpoint.cert_file, endpoint.cert_pem = file_or_data(user, "client-certificate", user_base)
    endpoint.key_file, endpoint.key_pem = file_or_data(user, "client-key", user_base)
    return endpoint


def entry(document, kind, name):
    """The named cluster or user of a merged kubeconfig, with the directory its relative paths start from."""
    found = document[kind].get(name)
    if found is None:
        raise ConnectionProblem("no %s named %r in it" % (kind[:-1], name))
    return found


def file_or_data(fields, name, base):
    """(path, None) from `name`, resolved against the kubeconfig's directory; (None, PEM) from `name`-data."""
    data = fields.get(name + "-data")
    if data:
        try:
            return None, base64.b64decode(data, validate=True)
        except (TypeError, ValueError):
            raise ConnectionProblem("%s-data is not base64" % name) from None
    path = fields.get(name)
    if not path:
        return None, None
    path = relative_to(base, path)
    if not os.path.isfile(path):
        raise ConnectionProblem("%s %s does not exist" % (name, path))
    return path, None


def relative_to(base, path):
    path = os.path.expanduser(str(path))
    return path if os.path.isabs(path) or not base else os.path.join(base, path)


def load_with_kubernetes_client(kubeconfig, context, source):
    """A user of an exec plugin or an auth provider, loaded by the kubernetes client as kubernetes.core does."""
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as error:
        raise ConnectionProblem(
            "%s: its user authenticates through an exec plugin or an auth provider, which needs the kubernetes "
            "Python library: %s" % (source, error)
        ) from None
    configuration = k8s_client.Configuration()
    try:
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(
                config_dict=kubeconfig, context=context, client_configuration=configuration, persist_config=False
            )
        else:
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
            )
    except (ConfigException, ValueError, TypeError, OSError) as error:
        raise ConnectionProblem("%s: %s" % (source, error)) from None
    endpoint = Endpoint(configuration.host, source=source)
    endpoint.verifies_tls = bool(configuration.verify_ssl)
    endpoint.ca_file = configuration.ssl_ca_cert
    endpoint.cert_file = configuration.cert_file
    endpoint.key_file = configuration.key_file
    # The exec plugin ran in the load, once: a module's run is shorter than any credential it hands out. The
    # header is the client's BearerToken key (kubernetes >= 29) or its authorization key (older clients).
    api_key = configuration.api_key or {}
    endpoint.authorization = api_key.get("BearerToken") or api_key.get("authorization")
    endpoint.tls_server_name = configuration.tls_server_name
    endpoint.proxy = configuration.proxy
    return endpoint


def named_entries(document, path):
    """A kubeconfig's contexts, clusters and users by name, each with the directory its relative paths start from
    (the file's; for content, none: relative to the working directory, as the kubernetes client reads it)."""
    base = os.path.dirname(os.path.abspath(path)) if path else ""
    merged = {"current-context": document.get("current-context")}
    for kind, field in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
        merged[kind] = {}
        for item in document.get(kind) or []:
            if isinstance(item, dict) and item.get("name") not in merged[kind]:
                merged[kind][item.get("name")] = (item.get(field) or {}, base)
    return merged


def read_kubeconfig(value):
    """One kubeconfig path, or several joined as in KUBECONFIG, merged as the kubernetes client merges them: the
    first file naming a context, cluster or user wins; the last current-context set wins."""
    paths = [path for path in value.split(os.pathsep) if path] if os.pathsep in value else [value]
    merged = {"contexts": {}, "clusters": {}, "users": {}, "current-context": None}
    for path in paths:
        if not os.path.isfile(path):
            if len(paths) > 1:
                continue  # kubectl skips the missing files of a KUBECONFIG list
            raise ConnectionProblem("kubeconfig %s does not exist" % path)
        try:
            with open(path) as handle:
                document = yaml.safe_load(handle) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ConnectionProblem("kubeconfig %s cannot be read: %s" % (path, error)) from None
        if not isinstance(document, dict):
            raise ConnectionProblem("kubeconfig %s is not a kubeconfig (a YAML mapping)" % path)
        entries = named_entries(document, path)
        for kind in ("contexts", "clusters", "users"):
            for name, item in entries[kind].items():
                merged[kind].setdefault(name, item)
        if document.get("current-context"):
            merged["current-context"] = document["current-context"]
    if not merged["contexts"] and merged["current-context"] is None and len(paths) > 1:
        raise ConnectionProblem("none of the kubeconfig files %s exists or holds a context" % value)
    return merged
