#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cluster_info
short_description: Check that a cluster is reachable and report what Catamaran has installed there
version_added: 0.1.0
description:
  - Connects to the cluster (kubeconfig and context, a host and token, or the pod's service account), calls the API
    server, and reports its version, Catamaran's CRDs and the peerings, offloaded namespaces and offloading
    policies this collection made there.
  - Fails with a message naming the cluster when the kubeconfig is missing, the context is unknown, the
    server is unreachable or the credential is refused. Playbooks run it on every cluster before changing any.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes.info
  - catamaran.federation.connection
"""

EXAMPLES = r"""
- name: Fail early when a cluster of the inventory cannot be reached
  catamaran.federation.cluster_info:
    kubeconfig: "{{ catamaran_kubeconfig }}"
    context: "{{ catamaran_context | default(omit) }}"
  register: cluster

- name: Reach a cluster with a token and its CA, no kubeconfig
  catamaran.federation.cluster_info:
    host: https://cluster-2.example.com:6443
    api_key: "{{ cluster_2_token }}"
    ca_cert: /etc/catamaran/cluster-2-ca.crt

- name: From a pod (an execution environment in the cluster), with the pod's service account
  catamaran.federation.cluster_info:

- name: Every module of the collection reaches its cluster through the same kubeconfig, set once
  module_defaults:
    group/catamaran.federation.all:
      kubeconfig: /etc/catamaran/federation.kubeconfig
  block:
    - name: Check each cluster of that kubeconfig
      catamaran.federation.cluster_info:
        context: "{{ item }}"
      loop: [cluster-1, cluster-2]
"""

RETURN = r"""
cluster:
  description: What the API server reported.
  returned: success
  type: dict
  contains:
    server:
      description: The API server URL.
      type: str
      sample: https://127.0.0.1:26000
    context:
      description: The kubeconfig context used.
      type: str
      sample: cluster-1
    version:
      description: The API server's version.
      type: str
      sample: v1.36.3
    catamaran_crds:
      description: Names of the installed Catamaran CRDs.
      type: list
      elements: str
      sample: [foreignclusters.core.catamaran.io]
    managed:
      description:
        - What this collection made on the cluster (labelled C(app.kubernetes.io/managed-by=catamaran.federation)),
          which is all a playbook's prune may remove. Empty lists where the CRDs are not installed.
        - C(peerings), the provider ids of its ForeignClusters; C(offloaded_namespaces), the namespaces of its
          NamespaceOffloadings; C(offloading_policies), the names of its NamespaceOffloadingPolicies.
        - A kind the credential may not list is V(null) (the module itself needs only to read the CRDs).
      type: dict
      version_added: 0.3.0
      sample: {"peerings": ["cluster-2"], "offloaded_namespaces": ["demo"], "offloading_policies": []}
"""

from ansible_collections.catamaran.federation.plugins.module_utils.common import run_info_module
from ansible_collections.catamaran.federation.plugins.module_utils.info import cluster_report


def main():
    run_info_module({"cluster": lambda cluster, params: cluster_report(cluster)})


if __name__ == "__main__":
    main()
