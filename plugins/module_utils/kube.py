# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Connections to clusters and the few REST verbs the modules need.

Paths are built from a fixed table of the kinds Catamaran touches, so no module pays for API
discovery. Every failure becomes a ClusterError whose message names the cluster and the object.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import ssl
import tempfile
import time
from urllib.parse import urlencode

from ansible_collections.catamaran.federation.plugins.module_utils import connection

try:
    import urllib3
    from urllib3.util.ssl_ import create_urllib3_context

    URLLIB3_IMPORT_ERROR = None
except ImportError as import_error:
    urllib3 = None
    URLLIB3_IMPORT_ERROR = import_error

FIELD_MANAGER = "catamaran.federation"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "catamaran.federation"

# (apiVersion, kind) -> (plural, namespaced)
KINDS = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("networking.k8s.io/v1", "ServiceCIDR"): ("servicecidrs", False),
    ("v1", "Pod"): ("pods", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "DaemonSet"): ("daemonsets", True),
    ("v1", "Service"): ("services", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): ("mutatingwebhookconfigurations", False),
    ("apiregistration.k8s.io/v1", "APIService"): ("apiservices", False),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): ("validatingadmissionpolicies", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings",
        False,
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("core.catamaran.io/v1alpha1", "ForeignCluster"): ("foreignclusters", True),
    ("offloading.catamaran.io/v1alpha1", "NamespaceOffloading"): ("namespaceoffloadings", True),
    ("offloading.catamaran.io/v1alpha1", "NamespaceOffloadingPolicy"): ("namespaceoffloadingpolicies", False),
    ("offloading.catamaran.io/v1alpha1", "TwinNamespace"): ("twinnamespaces", True),
    ("offloading.catamaran.io/v1alpha1", "ShadowPod"): ("shadowpods", True),
    ("offloading.catamaran.io/v1alpha1", "ResourceOffer"): ("resourceoffers", True),
}

# Connection errors that mean "the API server cannot be reached", not "it said no".
UNREACHABLE = (urllib3.exceptions.HTTPError, OSError) if urllib3 else (OSError,)


class ClusterError(Exception):
    """A failure talking to one cluster; the message is meant for people."""

    def __init__(self, message, status=None, reason=None):
        super().__init__(message)
        self.status = status
        self.reason = reason


class ClusterUnreachable(ClusterError):
    """The API server could not be reached at all (refused, timed out, no route), as opposed to saying no."""


def _connection_error(label, server, source, error):
    """What a failed connection means: a certificate that is not trusted stops the run (the cluster answered and
    may not be the one meant); anything else is a cluster that cannot be reached."""
    cause = _root_cause_error(error)
    if isinstance(cause, (ssl.SSLError, urllib3.exceptions.SSLError)):
        return ClusterError(
            "%s: the TLS handshake with %s (%s) failed: %s. Trust the server's CA (certificate-authority in the "
            "kubeconfig, or ca_cert), or skip the check knowingly (insecure-skip-tls-verify, validate_certs: false)"
            % (label, server, source, _root_cause(error)),
            reason="TLSError",
        )
    return ClusterUnreachable("%s: cannot reach %s (%s): %s" % (label, server, source, _root_cause(error)))


def describe(api_version, kind, name=None, namespace=None):
    where = "%s/%s" % (namespace, name) if namespace and name else (name or namespace or "")
    return ("%s %s" % (kind, where)).strip()


class Cluster:
    """One cluster, reached as its resolved connection options say (module_utils.connection)."""

    def __init__(self, label, options):
        # Messages name the cluster by its id when known, else by its context, host or kubeconfig.
        self.label = label or connection.label_for(options)
        self.request_timeout = options.get("request_timeout") or connection.DEFAULT_REQUEST_TIMEOUT
        try:
            endpoint = connection.configure(options)
        except connection.ConnectionProblem as error:
            raise ClusterError("%s: %s" % (self.label, error)) from None
        if not label and endpoint.context:
            self.label = endpoint.context
        self.context = endpoint.context
        self.source = endpoint.source
        self.server = endpoint.server
        self.verifies_tls = endpoint.verifies_tls
        self.ca_data = endpoint.ca_data
        self._authorization = endpoint.authorization
        try:
            self._http = http_client(endpoint)
        except connection.ConnectionProblem as error:
            raise ClusterError("%s: %s" % (self.label, error)) from None

    def check(self):
        """GET /api: proves the server is reachable and accepts the credential (/version may be anonymous)."""
        self.request("GET", "/api", what="the API server")

    def version(self):
        return self.request("GET", "/version", what="the API server's version")

    # -- REST -------------------------------------------------------------------------------
    def path(self, api_version, kind, name=None, namespace=None, subresource=None):
        try:
            plural, namespaced = KINDS[(api_version, kind)]
        except KeyError:
            raise ClusterError("%s: unsupported kind %s %s" % (self.label, api_version, kind)) from None
        base = "/api/v1" if api_version == "v1" else "/apis/" + api_version
        if namespaced and namespace:
            base += "/namespaces/" + namespace
        path = base + "/" + plural
        if name:
            path += "/" + name
        if subresource:
            path += "/" + subresource
        return path

    def _send(self, method, path, query, headers, body=None, timeout=None, stream=False):
        """One HTTP request; a connection that fails becomes the ClusterError that says so."""
        url = self.server + path + ("?" + urlencode(query) if query else "")
        if self._authorization:
            headers = dict(headers, Authorization=self._authorization)
        try:
            return self._http.request(
                method,
                url,
                body=None if body is None else json.dumps(body),  # JSON is YAML too (apply-patch+yaml)
                headers=headers,
                timeout=timeout,
                preload_content=not stream,
            )
        except UNREACHABLE as error:
            raise _connection_error(self.label, self.server, self.source, error) from None

    def request(self, method, path, body=None, query=None, content_type="application/json", what=None, timeout=None):
        headers = {"Accept": "application/json", "Content-Type": content_type}
        response = self._send(
            method, path, query, headers, body, urllib3.Timeout(total=timeout or self.request_timeout)
        )
        payload = _json(response.data)
        if 200 <= response.status < 300:
            return payload
        message = payload.get("message") if isinstance(payload, dict) else None
        reason = payload.get("reason") if isinstance(payload, dict) else None
        raise ClusterError(
            "%s: %s %s: %s" % (self.label, method, what or path, message or "HTTP %s" % response.status),
            status=response.status,
            reason=reason,
        )

    def get(self, api_version, kind, name, namespace=None):
        try:
            return self.request(
                "GET", self.path(api_version, kind, name, namespace), what=describe(api_version, kind, name, namespace)
            )
        except ClusterError as error:
            if error.status == 404:
                return None
            raise

    def list(self, api_version, kind, namespace=None, labels=None, fields=None):
        """The objects of a kind; none of a kind the server does not serve (404: its CRD is not installed, as in the
        plan of a new federation), as `get` answers None for a missing object."""
        query = {}
        if labels:
            query["labelSelector"] = labels
        if fields:
            query["fieldSelector"] = fields
        try:
            result = self.request(
                "GET", self.path(api_version, kind, namespace=namespace), query=query, what="list " + kind
            )
        except ClusterError as error:
            if error.status == 404:
                return []
            raise
        return result.get("items") or []

    def apply(self, obj, dry_run=False, force=True):
        """Server-side apply under the collection's field manager."""
        metadata = obj["metadata"]
        query = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request(
            "PATCH",
            self.path(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace")),
            body=obj,
            query=query,
            content_type="application/apply-patch+yaml",
            what="apply " + describe(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace")),
        )

    def merge_patch(self, api_version, kind, name, patch, namespace=None, dry_run=False, subresource=None):
        query = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            query["dryRun"] = "All"
        return self.request(
            "PATCH",
            self.path(api_version, kind, name, namespace, subresource),
            body=patch,
            query=query,
            content_type="application/merge-patch+json",
            what="patch " + describe(api_version, kind, name, namespace),
        )

    def delete(
        self, api_version, kind, name, namespace=None, dry_run=False, grace_period=None, propagation="Background"
    ):
        """Delete (background propagation unless told otherwise); False when it was already gone."""
        query = {"propagationPolicy": propagation}
        if dry_run:
            query["dryRun"] = "All"
        if grace_period is not None:
            query["gracePeriodSeconds"] = str(grace_period)
        try:
            self.request(
                "DELETE",
                self.path(api_version, kind, name, namespace),
                query=query,
                what="delete " + describe(api_version, kind, name, namespace),
            )
        except ClusterError as error:
            if error.status == 404:
                return False
            raise
        return True

    def watch_until(self, api_version, kind, name, namespace, done, timeout):
        """Watch one object until done(obj or None) is true: (True, obj), or (False, last seen) on timeout."""

        def one(items):
            return done(items[0] if items else None)

        finished, items = self.watch_list_until(
            api_version, kind, namespace, one, timeout, fields="metadata.name=" + name
        )
        return finished, (items[0] if items else None)

    def watch_list_until(self, api_version, kind, namespace, done, timeout, labels=None, fields=None):
        """Watch the objects a selector matches until done(items) is true.

        Returns (True, items) when done, (False, items) on timeout. No polling: a list gives the
        current items and a resourceVersion; a watch from there keeps them current (410: list again).
        """
        deadline = time.monotonic() + timeout
        selectors = {}
        if labels:
            selectors["labelSelector"] = labels
        if fields:
            selectors["fieldSelector"] = fields
        path = self.path(api_version, kind, namespace=namespace)
        while True:
            listing = self.request("GET", path, query=selectors, what="list " + kind)
            current = dict((_key(item), item) for item in listing.get("items") or [])
            if done(list(current.values())):
                return True, list(current.values())
            version = (listing.get("metadata") or {}).get("resourceVersion")
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False, list(current.values())
                seconds = int(max(1, min(remaining, 60)))
                outcome = self._watch_once(path, selectors, version, seconds, done, current)
                if outcome is None:  # the watch expired (410): list again
                    break
                finished, version = outcome
                if finished:
                    return True, list(current.values())

    def _watch_once(self, path, selectors, version, seconds, done, current):
        """One watch request; keeps `current` (key -> object) up to date. None means: list again."""
        query = dict(selectors, watch="true", resourceVersion=version, timeoutSeconds=str(seconds))
        query["allowWatchBookmarks"] = "true"
        timeout = urllib3.Timeout(connect=self.request_timeout, read=seconds + 10)
        response = self._send("GET", path, query, {"Accept": "application/json"}, timeout=timeout, stream=True)
        try:
            if response.status == 410:
                return None
            if response.status >= 300:
                raise ClusterError(
                    "%s: watch %s: HTTP %s" % (self.label, path, response.status), status=response.status
                )
            return self._read_watch(response, version, done, current)
        finally:
            # Never back to the pool: a watch left mid-stream would hand its unread events to the next request
            # on that connection, which then waits out its read timeout (10 s each, seen after every CRD).
            response.close()
            response.release_conn()

    @staticmethod
    def _read_watch(stream, version, done, current):
        buffer = b""
        for chunk in stream.stream(4096):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return None
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if event.get("type") == "BOOKMARK":
                    continue
                if event.get("type") == "DELETED":
                    current.pop(_key(obj), None)
                else:
                    current[_key(obj)] = obj
                if done(list(current.values())):
                    return True, version
        return False, version


def http_client(endpoint):
    """A urllib3 pool for the endpoint, with the TLS the kubernetes client would set up; one retry of a connection
    that fails, as the modules had from that client."""
    verify = ssl.CERT_REQUIRED if endpoint.verifies_tls else ssl.CERT_NONE
    context = create_urllib3_context(cert_reqs=verify)
    if endpoint.verifies_tls:
        if endpoint.ca_file or endpoint.ca_pem:
            cadata = endpoint.ca_pem.decode("ascii", "replace") if endpoint.ca_pem else None
            try:
                context.load_verify_locations(cafile=endpoint.ca_file, cadata=cadata)
            except (ssl.SSLError, ValueError) as error:
                raise connection.ConnectionProblem(
                    "the CA (%s) cannot be loaded: %s" % (endpoint.source, error)
                ) from None
        else:
            context.load_default_certs()
    if endpoint.cert_file or endpoint.cert_pem or endpoint.key_file or endpoint.key_pem:
        _load_client_certificate(context, endpoint)
    arguments = dict(ssl_context=context, cert_reqs=verify, retries=1)
    if not endpoint.verifies_tls:
        arguments["assert_hostname"] = False
    if endpoint.tls_server_name:
        arguments["server_hostname"] = endpoint.tls_server_name
    if endpoint.proxy:
        return urllib3.ProxyManager(endpoint.proxy, **arguments)
    return urllib3.PoolManager(**arguments)


def _load_client_certificate(context, endpoint):
    """The client certificate and key into the TLS context; content (a kubeconfig's *-data) passes through files
    only this process can read, removed as soon as they are loaded."""
    directory = None
    try:
        paths = {}
        for name in ("cert", "key"):
            paths[name] = getattr(endpoint, name + "_file")
            pem = getattr(endpoint, name + "_pem")
            if pem is not None:
                directory = directory or tempfile.mkdtemp(prefix="catamaran-tls-")
                paths[name] = os.path.join(directory, name + ".pem")
                with os.fdopen(os.open(paths[name], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
                    handle.write(pem)
        if not paths["cert"] or not paths["key"]:
            raise connection.ConnectionProblem(
                "a client certificate needs both a certificate and a key (%s)" % endpoint.source
            )
        context.load_cert_chain(paths["cert"], paths["key"])
    except (ssl.SSLError, OSError) as error:
        raise connection.ConnectionProblem(
            "the client certificate (%s) cannot be loaded: %s" % (endpoint.source, error)
        ) from None
    finally:
        if directory:
            shutil.rmtree(directory, ignore_errors=True)


def _key(obj):
    metadata = obj.get("metadata") or {}
    return (metadata.get("namespace"), metadata.get("name"))


def _json(data):
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        return {"message": data.decode("utf-8", "replace")[:300]}


def _root_cause_error(error):
    """The innermost error urllib3 wraps (MaxRetryError -> SSLError -> ssl.SSLCertVerificationError)."""
    cause = error
    while True:
        inner = getattr(cause, "reason", None)
        if not isinstance(inner, BaseException):
            inner = cause.args[0] if cause.args and isinstance(cause.args[0], BaseException) else None
        if inner is None or inner is cause:
            return cause
        cause = inner


def _root_cause(error):
    reason = getattr(error, "reason", None)
    while getattr(reason, "reason", None) is not None and reason is not reason.reason:
        reason = reason.reason
    text = str(reason or error)
    # urllib3 wraps the socket error in a long repr; the tail is what people need.
    return text.split(": ", 1)[-1] if "Connection" in text and ": " in text else text
