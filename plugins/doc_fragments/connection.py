# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # How a module reaches a cluster, as in kubernetes.core (module_utils/connection.py).
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file on the host that runs the module, or the kubeconfig's content as a dict.
      - Relative paths inside a kubeconfig file (C(certificate-authority), C(client-certificate), C(client-key))
        are resolved against the directory of that file, as C(kubectl) does; inside content given as a dict, against
        the module's working directory.
      - The credentials inside content given as a dict (tokens, passwords, client keys) are masked in all output.
      - When not given, the E(K8S_AUTH_KUBECONFIG) environment variable is used. With no kubeconfig, no context and no
        O(host) with a credential, the module uses the pod's service account when it runs in a pod
        (E(KUBERNETES_SERVICE_HOST) set and a service-account token mounted), else the default kubeconfig
        (E(KUBECONFIG), else C(~/.kube/config)).
      - The module fails before changing anything, naming the cluster, when the file is missing, the context is
        unknown, the API server cannot be reached or the credential is refused.
    type: raw
  context:
    description:
      - The kubeconfig context to use. Defaults to the kubeconfig's current context.
      - When not given, the E(K8S_AUTH_CONTEXT) environment variable is used.
    type: str
  host:
    description:
      - URL of the API server. With O(api_key) (or O(client_cert) and O(client_key)) no kubeconfig is read;
        otherwise it overrides the server of the kubeconfig.
      - When not given, the E(K8S_AUTH_HOST) environment variable is used.
    type: str
  api_key:
    description:
      - A bearer token for the API server (for example a service account's token).
      - Never printed. When not given, the E(K8S_AUTH_API_KEY) environment variable is used.
    type: str
  ca_cert:
    description:
      - Path to a CA certificate file to verify the API server's certificate with; overrides the kubeconfig's.
      - When not given, the E(K8S_AUTH_CA_CERT) or E(K8S_AUTH_SSL_CA_CERT) environment variable is used.
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate file to authenticate with (with O(client_key)).
      - When not given, the E(K8S_AUTH_CLIENT_CERT) or E(K8S_AUTH_CERT_FILE) environment variable is used.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the key file of O(client_cert).
      - When not given, the E(K8S_AUTH_CLIENT_KEY) or E(K8S_AUTH_KEY_FILE) environment variable is used.
    type: path
    aliases: [key_file]
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate.
      - When not given, the E(K8S_AUTH_VALIDATE_CERTS) or E(K8S_AUTH_VERIFY_SSL) environment variable is used
        (V(0), V(false) and V(no) turn verification off); else the kubeconfig's C(insecure-skip-tls-verify) decides,
        as with kubernetes.core, and certificates are verified unless it is V(true). The module warns whenever a
        certificate is not verified.
      - A certificate that fails verification stops the module naming the cluster; it is never taken for an
        unreachable cluster.
    type: bool
    aliases: [verify_ssl]
  request_timeout:
    description:
      - Seconds (at least 1) to wait for each API request; V(10) when not given.
    type: int
attributes:
  action_group:
    description: Use C(group/catamaran.federation.all) in C(module_defaults) to set the connection options once.
    support: full
    membership:
      - catamaran.federation.all
requirements:
  - kubernetes >= 24.2.0 (Python library; its urllib3 carries the requests, and the client itself is imported only
    for a kubeconfig user that authenticates through an exec plugin or an auth provider)
  - PyYAML >= 3.11
notes:
  - "Runs on the host the task is delegated to, usually the control node (C(connection: local))."
  - "Each connection option is taken from the task, else from the E(K8S_AUTH_*) environment variable named in its
    description, as in the C(kubernetes.core) collection."
  - "The action group C(catamaran.federation.all) holds every module that talks to a cluster:
    M(catamaran.federation.cluster_info), M(catamaran.federation.crds), M(catamaran.federation.namespace_offloading),
    M(catamaran.federation.namespace_offloading_info), M(catamaran.federation.peering) and
    M(catamaran.federation.peering_info); M(catamaran.federation.controller_process), which runs a local process,
    is not in it."
"""
