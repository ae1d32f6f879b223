#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: namespace_offloading
short_description: Extend a namespace to peered clusters, or stop extending it
version_added: 0.1.0
description:
  - Manages the NamespaceOffloading C(offloading) of one namespace on a consumer cluster. Catamaran's manager
    then creates twin namespaces on the peered clusters the selector matches and steers the namespace's pods.
  - The spec is applied as a server-side dry run first, so a rejected change (for example a new mapping strategy,
    which is immutable) fails before anything is created.
  - With O(state=absent), deletes the NamespaceOffloading and waits while the manager removes the twin namespaces.
    The namespace itself is never deleted.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes
  - catamaran.federation.connection
  - catamaran.federation.offloading
options:
  namespace:
    description: The consumer namespace to extend.
    type: str
    required: true
  state:
    description: V(present) extends the namespace; V(absent) stops extending it.
    type: str
    choices: [present, absent]
    default: present
  namespace_mapping_strategy:
    description:
      - How twin namespaces are named. V(DefaultName) is C(<namespace>-<consumer-id>). Immutable once set.
    type: str
    choices: [DefaultName, EnforceSameName, SelectedName]
    default: DefaultName
  remote_namespace_name:
    description: The twin namespaces' name; required with, and only allowed with, O(namespace_mapping_strategy=SelectedName).
    type: str
  create_namespace:
    description: Create the namespace when it does not exist.
    type: bool
    default: true
  wait:
    description: With O(state=present), wait until the offloading phase is C(Ready); fail if it settles otherwise.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Run the shop's pods only on clusters in region-b or region-c, and wait for the twins
  catamaran.federation.namespace_offloading:
    kubeconfig: ~/.kube/cluster-1
    namespace: shop
    pod_offloading_strategy: Remote
    cluster_selector:
      nodeSelectorTerms:
        - matchExpressions:
            - key: topology.kubernetes.io/region
              operator: In
              values: [region-b, region-c]
    wait: true
    wait_timeout: 90

- name: Stop offloading the shop
  catamaran.federation.namespace_offloading:
    kubeconfig: ~/.kube/cluster-1
    namespace: shop
    state: absent
"""

RETURN = r"""
offloading:
  description: The NamespaceOffloading as it stands (after the wait, if any); empty after removal.
  returned: always
  type: dict
  contains:
    namespace:
      description: The local namespace.
      type: str
      sample: shop
    phase:
      description: The aggregated offloading phase.
      type: str
      sample: Ready
    remote_namespace:
      description: The twin namespaces' name.
      type: str
      sample: shop-cluster-1
    clusters:
      description: One entry per selected cluster with its own phase and message.
      type: list
      elements: dict
      sample: [{"cluster_id": "cluster-2", "phase": "Ready", "remote_namespace": "shop-cluster-1"}]
actions:
  description: What was (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: ["create cluster-1: NamespaceOffloading shop/offloading"]
"""

from ansible_collections.catamaran.federation.plugins.module_utils import offloading
from ansible_collections.catamaran.federation.plugins.module_utils.common import CatamaranModule, connection_spec


def main():
    spec = connection_spec()
    spec.update(offloading.spec_options(offloading.MAPPING_STRATEGIES))
    spec.update(
        namespace=dict(type="str", required=True),
        remote_namespace_name=dict(type="str"),
        create_namespace=dict(type="bool", default=True),
    )
    module = CatamaranModule(spec, supports_check_mode=True)
    offloading.run_module(
        module, offloading.validate, offloading.present, offloading.absent, "offloading", offloading.summary
    )


if __name__ == "__main__":
    main()
