"""How the collection's modules reach a cluster (plugins/module_utils/connection.py): where each connection
option comes from, what is loaded, and the errors that say what is wrong.
"""

from __future__ import annotations

import base64
import sys

import pytest
import yaml

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible_collections.catamaran.federation.plugins.module_utils import connection
from ansible_collections.catamaran.federation.plugins.module_utils.connection import (
    ConnectionProblem,
    configure,
    resolve,
    secrets_in,
)

CA = b"-----BEGIN CERTIFICATE-----\nnot really a CA\n-----END CERTIFICATE-----\n"


def kubeconfig(contexts=("c1",), current="c1", cluster=None, user=None) -> dict:
    cluster = cluster or {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(CA)}
    user = user or {"token": "t0ken-value-1234"}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": "k", "user": "u"}} for name in contexts],
        "current-context": current,
    }


def bearer(endpoint) -> str:
    """The Authorization header the client sends."""
    return endpoint.authorization


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path, document) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return str(path)


# -- where each option comes from ------------------------------------------------------------------


def test_the_task_wins_over_the_top_level_defaults_which_win_over_the_environment():
    environ = {"K8S_AUTH_KUBECONFIG": "/env/kubeconfig", "K8S_AUTH_CONTEXT": "env-ctx", "K8S_AUTH_HOST": "https://e"}
    resolved = resolve(
        {"context": "task-ctx"}, defaults={"kubeconfig": "/top/kubeconfig", "context": "top"}, environ=environ
    )
    assert resolved["context"] == "task-ctx"
    assert resolved["kubeconfig"] == "/top/kubeconfig"
    assert resolved["host"] == "https://e"


def test_unset_options_fall_back_to_the_kubernetes_core_environment_variables():
    environ = {
        "K8S_AUTH_KUBECONFIG": "/env/kubeconfig",
        "K8S_AUTH_CONTEXT": "env-ctx",
        "K8S_AUTH_HOST": "https://env:6443",
        "K8S_AUTH_API_KEY": "env-token",
        "K8S_AUTH_SSL_CA_CERT": "/env/ca.crt",
        "K8S_AUTH_CERT_FILE": "/env/client.crt",
        "K8S_AUTH_KEY_FILE": "/env/client.key",
        "K8S_AUTH_VERIFY_SSL": "no",
    }
    assert resolve({}, environ=environ) == {
        "kubeconfig": "/env/kubeconfig",
        "context": "env-ctx",
        "host": "https://env:6443",
        "api_key": "env-token",
        "ca_cert": "/env/ca.crt",
        "client_cert": "/env/client.crt",
        "client_key": "/env/client.key",
        "validate_certs": False,
        "request_timeout": 10,
    }


def test_the_option_named_variable_comes_before_the_client_named_one_as_in_kubernetes_core():
    environ = {
        "K8S_AUTH_CA_CERT": "/a",
        "K8S_AUTH_SSL_CA_CERT": "/b",
        "K8S_AUTH_VALIDATE_CERTS": "true",
        "K8S_AUTH_VERIFY_SSL": "false",
    }
    resolved = resolve({}, environ=environ)
    assert (resolved["ca_cert"], resolved["validate_certs"]) == ("/a", True)


@pytest.mark.parametrize(
    ("value", "expected"), [("0", False), ("False", False), ("no", False), ("yes", True), ("1", True)]
)
def test_validate_certs_from_the_environment_is_false_only_for_0_false_no(value, expected):
    assert resolve({}, environ={"K8S_AUTH_VERIFY_SSL": value})["validate_certs"] is expected


def test_without_anything_the_kubeconfig_decides_verification_and_requests_wait_10_seconds():
    resolved = resolve({}, environ={})
    assert resolved["validate_certs"] is None
    assert resolved["request_timeout"] == 10
    assert resolve({"validate_certs": False}, environ={"K8S_AUTH_VERIFY_SSL": "yes"})["validate_certs"] is False


def test_paths_expand_the_home_directory(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    resolved = resolve({"kubeconfig": "~/.kube/lab", "ca_cert": "~/ca.crt"}, environ={})
    assert (resolved["kubeconfig"], resolved["ca_cert"]) == ("/home/someone/.kube/lab", "/home/someone/ca.crt")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"kubeconfig": ["a", "b"]}, "kubeconfig must be a path or the kubeconfig's content as a dict, got list"),
        ({"request_timeout": 0}, "request_timeout must be at least 1, got 0"),
    ],
)
def test_wrong_options_are_refused_before_any_cluster_is_touched(given, message):
    with pytest.raises(ConnectionProblem, match=message):
        resolve(given, environ={})


# -- what gets loaded --------------------------------------------------------------------------------


def test_relative_paths_in_a_kubeconfig_are_resolved_against_its_directory(tmp_path, monkeypatch):
    directory = tmp_path / "lab"
    (directory / "pki").mkdir(parents=True)
    (directory / "pki" / "ca.crt").write_bytes(CA)
    (directory / "pki" / "admin.crt").write_text("cert")
    (directory / "pki" / "admin.key").write_text("key")
    path = write(
        directory / "kubeconfig",
        kubeconfig(
            cluster={"server": "https://127.0.0.1:6443", "certificate-authority": "pki/ca.crt"},
            user={"client-certificate": "pki/admin.crt", "client-key": "pki/admin.key"},
        ),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the old code opened certificate-authority relative to the working directory
    endpoint = configure(resolve({"kubeconfig": path}, environ={}), environ={})
    assert endpoint.ca_file == str(directory / "pki" / "ca.crt")
    assert endpoint.cert_file == str(directory / "pki" / "admin.crt")
    assert endpoint.key_file == str(directory / "pki" / "admin.key")
    assert endpoint.ca_data == b64(CA)  # what the peering hands the consumer's virtual kubelet
    assert (endpoint.server, endpoint.context) == ("https://127.0.0.1:6443", "c1")
    assert endpoint.source == f"kubeconfig {path}, context c1"


def test_kubeconfig_content_as_a_dict_is_loaded_and_its_secrets_are_listed_for_masking():
    content = kubeconfig(user={"token": "s3cret-token-value", "client-key-data": b64(b"key")})
    resolved = resolve({"kubeconfig": content}, environ={})
    endpoint = configure(resolved, environ={})
    assert bearer(endpoint) == "Bearer s3cret-token-value"
    assert endpoint.ca_data == b64(CA)
    assert "s3cret-token-value" not in endpoint.source
    assert set(secrets_in(resolved)) == {"s3cret-token-value", b64(b"key")}
    assert connection.label_for(resolved) == "the cluster of the kubeconfig given as content"


def test_the_context_picks_the_cluster_and_a_context_alone_uses_the_default_kubeconfig(tmp_path):
    path = write(tmp_path / "merged", kubeconfig(contexts=("c1", "c2")))
    endpoint = configure(resolve({"context": "c2"}, environ={}), environ={"KUBECONFIG": path})
    assert endpoint.context == "c2"
    assert endpoint.source == f"kubeconfig {path}, context c2"


def test_host_and_api_key_need_no_kubeconfig_and_override_one_given_at_a_lower_level(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_bytes(CA)
    # The top-level kubeconfig does not even exist: with a host and a token, kubernetes.core does not read it.
    resolved = resolve(
        {"host": "https://10.0.0.1:6443/", "api_key": "abc-token-123", "ca_cert": str(ca)},
        defaults={"kubeconfig": str(tmp_path / "missing")},
        environ={},
    )
    endpoint = configure(resolved, environ={})
    assert endpoint.server == "https://10.0.0.1:6443"
    assert bearer(endpoint) == "Bearer abc-token-123"
    assert endpoint.ca_file == str(ca)
    assert endpoint.ca_data == b64(CA)
    assert endpoint.source == "host https://10.0.0.1:6443"
    # Messages name that host, not a context a lower level may have set.
    assert connection.label_for(dict(resolved, context="from-module-defaults")) == "https://10.0.0.1:6443/"
    assert secrets_in(resolved) == ["abc-token-123"]


def test_options_given_override_what_the_kubeconfig_says(tmp_path):
    ca = tmp_path / "other-ca.crt"
    ca.write_bytes(b"other")
    path = write(tmp_path / "kubeconfig", kubeconfig())
    endpoint = configure(
        resolve(
            {"kubeconfig": path, "host": "https://proxy:8443", "ca_cert": str(ca), "validate_certs": False}, environ={}
        ),
        environ={},
    )
    assert endpoint.server == "https://proxy:8443"
    assert endpoint.ca_file == str(ca)
    assert endpoint.verifies_tls is False
    assert bearer(endpoint) == "Bearer t0ken-value-1234"


@pytest.mark.parametrize(
    ("insecure", "validate_certs", "verified"),
    [
        (None, None, True),  # nothing said: verified
        (True, None, False),  # the kubeconfig's insecure-skip-tls-verify is honoured, as by kubectl
        (True, True, True),  # validate_certs given wins over the kubeconfig, as in kubernetes.core
        (False, False, False),
    ],
)
def test_the_kubeconfigs_insecure_skip_tls_verify_holds_unless_validate_certs_is_given(
    tmp_path, insecure, validate_certs, verified
):
    cluster = {"server": "https://127.0.0.1:6443"}
    if insecure is not None:
        cluster["insecure-skip-tls-verify"] = insecure
    path = write(tmp_path / "kubeconfig", kubeconfig(cluster=cluster))
    endpoint = configure(resolve({"kubeconfig": path, "validate_certs": validate_certs}, environ={}), environ={})
    assert endpoint.verifies_tls is verified
    assert endpoint.verifies_tls is verified


def test_in_a_pod_with_nothing_given_the_service_account_is_used(tmp_path):
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("pod-token")
    ca.write_bytes(CA)
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    endpoint = configure(resolve({}, environ=environ), environ=environ, token_file=str(token), ca_file=str(ca))
    assert endpoint.server == "https://10.96.0.1:443"
    assert bearer(endpoint).lower() == "bearer pod-token"  # the in-cluster loader writes "bearer"
    assert endpoint.ca_data == b64(CA)
    assert endpoint.source == "the pod's service account"


def test_outside_a_pod_with_nothing_given_the_default_kubeconfig_is_used(tmp_path):
    path = write(tmp_path / "config", kubeconfig())
    token = tmp_path / "no-token"  # the variables alone do not make a pod
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBECONFIG": path}
    endpoint = configure(resolve({}, environ=environ), environ=environ, token_file=str(token))
    assert endpoint.source == f"kubeconfig {path}, context c1"


# -- errors say what is wrong --------------------------------------------------------------------------


def test_with_nothing_at_all_the_error_says_what_to_give(tmp_path):
    environ = {"KUBECONFIG": str(tmp_path / "none")}
    with pytest.raises(ConnectionProblem, match=r"^no connection given: set kubeconfig \(or K8S_AUTH_KUBECONFIG\)"):
        configure(resolve({}, environ=environ), environ=environ, token_file=str(tmp_path / "no-token"))


@pytest.mark.parametrize(
    ("document", "given", "message"),
    [
        (None, {}, r"^kubeconfig .*/kubeconfig does not exist$"),
        (kubeconfig(), {"context": "c9"}, r"^context 'c9' is not in kubeconfig .*/kubeconfig \(it has: c1\)$"),
        (kubeconfig(current=None), {}, r"has no current-context and no context was given$"),
        ("a: [", {}, r"^kubeconfig .*/kubeconfig cannot be read"),
        (kubeconfig(), {"ca_cert": "/nowhere/ca.crt"}, r"^ca_cert /nowhere/ca.crt does not exist$"),
        (kubeconfig(), {"client_key": "/nowhere/k.key"}, r"^client_key /nowhere/k.key does not exist$"),
    ],
)
def test_a_kubeconfig_that_cannot_work_is_named_with_what_is_wrong(tmp_path, document, given, message):
    path = tmp_path / "kubeconfig"
    if isinstance(document, dict):
        write(path, document)
    elif document is not None:
        path.write_text(document)
    with pytest.raises(ConnectionProblem, match=message):
        configure(resolve(dict(given, kubeconfig=str(path)), environ={}), environ={})


def test_an_unknown_context_in_content_never_prints_the_content():
    content = kubeconfig(user={"token": "never-printed-token"})
    with pytest.raises(ConnectionProblem) as raised:
        configure(resolve({"kubeconfig": content, "context": "nope"}, environ={}), environ={})
    assert str(raised.value) == "context 'nope' is not in the kubeconfig given as content (it has: c1)"


def test_a_token_file_is_read_relative_to_its_kubeconfig_and_data_comes_in_memory(tmp_path):
    (tmp_path / "token").write_text("file-token\n")
    user = {"tokenFile": "token", "client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"KEY")}
    path = write(tmp_path / "kubeconfig", kubeconfig(user=user))
    endpoint = configure(resolve({"kubeconfig": path}, environ={}), environ={})
    assert bearer(endpoint) == "Bearer file-token"
    assert (endpoint.ca_file, endpoint.ca_pem, endpoint.ca_data) == (None, CA, b64(CA))
    assert (endpoint.cert_pem, endpoint.key_pem) == (b"CERT", b"KEY")


def test_several_kubeconfigs_merge_as_the_kubernetes_client_merges_them(tmp_path):
    """The first file naming a cluster, user or context wins; the last current-context set wins."""
    first = kubeconfig(contexts=("c1",), current="c1")
    second = kubeconfig(contexts=("c1", "c2"), current="c2", cluster={"server": "https://second:6443"})
    paths = [write(tmp_path / "first", first), write(tmp_path / "second", second)]
    endpoint = configure(resolve({"kubeconfig": ":".join(paths)}, environ={}), environ={})
    assert (endpoint.context, endpoint.server) == ("c2", "https://127.0.0.1:6443")  # cluster k of the first file


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"server": "https://x"}, {"tokenFile": "missing"}, r"context c1: tokenFile .*/missing cannot be read"),
        ({"server": "https://x", "certificate-authority": "ca.crt"}, None,
         r"context c1: certificate-authority .*/ca.crt does not exist$"),
        ({"server": "https://x"}, {"client-key-data": "not base64!"}, r"context c1: client-key-data is not base64$"),
        ({"certificate-authority-data": b64(CA)}, None, r"context c1: cluster k has no server$"),
    ],
)  # fmt: skip
def test_a_kubeconfigs_cluster_or_user_that_cannot_work_is_named(tmp_path, cluster, user, message):
    path = write(tmp_path / "kubeconfig", kubeconfig(cluster=cluster, user=user))
    with pytest.raises(ConnectionProblem, match=message):
        configure(resolve({"kubeconfig": path}, environ={}), environ={})


def test_a_context_naming_a_cluster_the_kubeconfig_lacks_says_so(tmp_path):
    document = kubeconfig()
    document["contexts"][0]["context"]["cluster"] = "gone"
    path = write(tmp_path / "kubeconfig", document)
    with pytest.raises(ConnectionProblem, match=r"kubeconfig .*, context c1: no cluster named 'gone' in it$"):
        configure(resolve({"kubeconfig": path}, environ={}), environ={})
