# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""How a module reaches a cluster: its options, where each one comes from, and the client's configuration.

As in kubernetes.core: a kubeconfig (a path, or its content as a dict) and a context; or a host with an API key or
a client certificate; a CA and validate_certs. An option not given in the task comes from the module's top-level
defaults (for modules with per-cluster suboptions), then from its K8S_AUTH_* environment variable. With neither a
kubeconfig, a context nor a host and credential, the pod's service account is used when the module runs in a pod,
else the default kubeconfig (KUBECONFIG, else ~/.kube/config).

Pure logic: no AnsibleModule here, so the unit tests reach all of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os

try:
    import yaml
except ImportError:  # reported by the modules through missing_required_lib
    yaml = None

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader
except ImportError:  # reported by the modules through missing_required_lib
    k8s_client = k8s_config = ConfigException = InClusterConfigLoader = None

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
    """A client configuration and what messages and the peering need to know about it."""

    def __init__(self, configuration, context, source):
        self.configuration = configuration
        self.context = context
        self.source = source  # e.g. "kubeconfig /path, context c" (never a secret)
        self.server = configuration.host
        self.verifies_tls = bool(configuration.verify_ssl)
        self.ca_data = None
        if configuration.ssl_ca_cert and os.path.isfile(configuration.ssl_ca_cert):
            with open(configuration.ssl_ca_cert, "rb") as handle:
                self.ca_data = base64.b64encode(handle.read()).decode()


def configure(resolved, environ=None, token_file=SERVICE_ACCOUNT_TOKEN, ca_file=SERVICE_ACCOUNT_CA):
    """The client configuration the resolved options describe (kubernetes.core's order).

    1. host with api_key, or with client_cert and client_key: nothing else is loaded;
    2. else a kubeconfig or a context: that kubeconfig (the default one for a context alone);
    3. else the pod's service account when in a pod; else the default kubeconfig.
    The options given then override what was loaded (host, api_key, certificates, validate_certs); without
    validate_certs, a kubeconfig's insecure-skip-tls-verify is honoured.
    """
    environ = os.environ if environ is None else environ
    configuration = k8s_client.Configuration()
    host = resolved.get("host")
    host = host.rstrip("/") if host else None
    context = None
    if explicit(resolved):
        source = "host %s" % host
    elif resolved.get("kubeconfig") is not None or resolved.get("context"):
        kubeconfig = resolved.get("kubeconfig")
        if kubeconfig is None:
            kubeconfig = default_kubeconfig(environ)
        context, source = load_kubeconfig(configuration, kubeconfig, resolved.get("context"))
    elif in_cluster(environ, token_file):
        try:
            InClusterConfigLoader(token_filename=token_file, cert_filename=ca_file, environ=environ).load_and_set(
                configuration
            )
        except (ConfigException, OSError) as error:
            raise ConnectionProblem("the pod's service account cannot be used: %s" % error) from None
        source = "the pod's service account"
    else:
        kubeconfig = default_kubeconfig(environ)
        if not any(os.path.isfile(path) for path in kubeconfig.split(os.pathsep) if path):
            raise ConnectionProblem(
                "no connection given: set kubeconfig (or K8S_AUTH_KUBECONFIG), or host with api_key or with "
                "client_cert and client_key; the module does not run in a pod with a service account, and the "
                "default kubeconfig %s does not exist" % kubeconfig
            )
        context, source = load_kubeconfig(configuration, kubeconfig, None)
    override(configuration, resolved, host)
    return Endpoint(configuration, context, source)


def override(configuration, resolved, host):
    for name, attribute in (("ca_cert", "ssl_ca_cert"), ("client_cert", "cert_file"), ("client_key", "key_file")):
        path = resolved.get(name)
        if path is None:
            continue
        if not os.path.isfile(path):
            raise ConnectionProblem("%s %s does not exist" % (name, path))
        setattr(configuration, attribute, path)
    if host:
        configuration.host = host
    if resolved.get("api_key"):
        bearer = "Bearer %s" % resolved["api_key"]
        # kubernetes >= 29 reads BearerToken, older clients authorization.
        configuration.api_key = {"BearerToken": bearer, "authorization": bearer}
        configuration.api_key_prefix = {}
        configuration.refresh_api_key_hook = None
    if resolved.get("validate_certs") is not None:
        configuration.verify_ssl = bool(resolved["validate_certs"])


def load_kubeconfig(configuration, kubeconfig, context):
    """Load a kubeconfig (path(s) or content) into configuration; returns (context used, description)."""
    if isinstance(kubeconfig, dict):
        where = "the kubeconfig given as content"
        document = kubeconfig
    else:
        where = "kubeconfig %s" % kubeconfig
        document = read_kubeconfig(kubeconfig)
    contexts = dict(
        (entry.get("name"), entry.get("context") or {}) for entry in document.get("contexts") or [] if entry
    )
    chosen = context or document.get("current-context")
    if not chosen:
        raise ConnectionProblem("%s has no current-context and no context was given" % where)
    if chosen not in contexts:
        raise ConnectionProblem(
            "context %r is not in %s (it has: %s)"
            % (chosen, where, ", ".join(sorted(c for c in contexts if c)) or "none")
        )
    try:
        if isinstance(kubeconfig, dict):
            k8s_config.load_kube_config_from_dict(
                config_dict=kubeconfig, context=chosen, client_configuration=configuration, persist_config=False
            )
        else:
            # Relative paths in the file (certificate-authority, client-certificate, client-key) are resolved
            # against the directory of the file that holds them, as kubectl does.
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=chosen, client_configuration=configuration, persist_config=False
            )
    except (ConfigException, ValueError, TypeError, OSError) as error:
        raise ConnectionProblem("%s, context %s: %s" % (where, chosen, error)) from None
    return chosen, "%s, context %s" % (where, chosen)


def read_kubeconfig(value):
    """The merged contexts and current-context of one kubeconfig path, or several joined as in KUBECONFIG."""
    paths = [path for path in value.split(os.pathsep) if path] if os.pathsep in value else [value]
    merged = {"contexts": [], "current-context": None}
    seen = set()
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
        for entry in document.get("contexts") or []:
            if entry and entry.get("name") not in seen:
                seen.add(entry.get("name"))
                merged["contexts"].append(entry)
        if document.get("current-context"):
            merged["current-context"] = document["current-context"]
    if not seen and merged["current-context"] is None and len(paths) > 1:
        raise ConnectionProblem("none of the kubeconfig files %s exists or holds a context" % value)
    return merged
