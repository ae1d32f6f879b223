#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: namespace_offloading_info
short_description: Report a consumer's offloaded namespaces and their phases
version_added: 0.1.0
description:
  - Lists NamespaceOffloadings (all namespaces, or one) with the aggregated phase and each selected cluster's
    own phase, remote namespace and message, and the NamespaceOffloadingPolicies that offload namespaces by label.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes.info
  - catamaran.federation.connection
options:
  namespace:
    description: Only this namespace.
    type: str
"""

EXAMPLES = r"""
- name: Which namespaces does cluster-1 offload, and where
  catamaran.federation.namespace_offloading_info:
    kubeconfig: ~/.kube/cluster-1
  register: offloaded
"""

RETURN = r"""
offloadings:
  description: One entry per offloaded namespace, sorted by namespace.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The local namespace.
      type: str
      sample: shop
    phase:
      description: The aggregated phase.
      type: str
      sample: Ready
    current:
      description: The status describes the latest spec (observedGeneration is the generation).
      type: bool
      sample: true
    remote_namespace:
      description: The twin namespaces' name.
      type: str
      sample: shop-cluster-1
    pod_offloading_strategy:
      description: Where pods may run.
      type: str
      sample: Remote
    namespace_mapping_strategy:
      description: How twins are named.
      type: str
      sample: DefaultName
    cluster_selector:
      description: The NodeSelector matched against virtual nodes.
      type: dict
      sample: {}
    clusters:
      description: Per selected cluster, its phase, remote namespace, reason and message.
      type: list
      elements: dict
      sample: [{"cluster_id": "cluster-2", "phase": "Ready", "remote_namespace": "shop-cluster-1"}]
    managed_by_ansible:
      description: Created by this collection (only those are pruned by playbooks).
      type: bool
      sample: true
    terminating:
      description: Being removed.
      type: bool
      sample: false
    policy:
      description: The NamespaceOffloadingPolicy that made it (omitted when the namespace has its own).
      type: str
      sample: team-blue
policies:
  description: One entry per NamespaceOffloadingPolicy, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The policy's name.
      type: str
      sample: team-blue
    namespace_selector:
      description: The label selector matched against namespaces.
      type: dict
      sample: {"matchLabels": {"team": "blue"}}
    pod_offloading_strategy:
      description: Where the selected namespaces' pods may run.
      type: str
      sample: Remote
    namespace_mapping_strategy:
      description: How their twins are named.
      type: str
      sample: DefaultName
    cluster_selector:
      description: The NodeSelector matched against virtual nodes.
      type: dict
      sample: {}
    offloaded_namespaces:
      description: How many namespaces have a NamespaceOffloading made by this policy.
      type: int
      sample: 3
    current:
      description: The status describes the latest spec.
      type: bool
      sample: true
    ready:
      description: The manager applied the policy to every namespace it selects.
      type: bool
      sample: true
    message:
      description: The manager's word on it.
      type: str
      sample: 3 namespace(s) offloaded by this policy
    managed_by_ansible:
      description: Created by this collection (only those are pruned by playbooks).
      type: bool
      sample: true
"""

from ansible_collections.catamaran.federation.plugins.module_utils.common import run_info_module
from ansible_collections.catamaran.federation.plugins.module_utils.info import offloadings_report, policies_report


def main():
    run_info_module(
        {
            "offloadings": lambda cluster, params: offloadings_report(cluster, params["namespace"]),
            "policies": lambda cluster, params: policies_report(cluster),
        },
        dict(namespace=dict(type="str")),
    )


if __name__ == "__main__":
    main()
