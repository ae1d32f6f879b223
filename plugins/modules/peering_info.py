#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: peering_info
short_description: Report a consumer's peerings and their virtual nodes
version_added: 0.1.0
description:
  - Lists the ForeignClusters in C(catamaran-system) with their Ready condition, and each one's virtual node
    with its readiness, capacity and allocatable resources.
  - A peering with node pools (O(catamaran.federation.peering#module:pools)) has one virtual node per pool,
    C(catamaran-<provider_id>.<pool>); each is reported under RV(peerings[].pools) with the same details.
  - Two list calls in all, whatever the number of peerings.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes.info
  - catamaran.federation.connection
"""

EXAMPLES = r"""
- name: Show cluster-1's peerings
  catamaran.federation.peering_info:
    kubeconfig: ~/.kube/cluster-1
  register: info

- name: Every virtual node of a peering without pools is Ready
  ansible.builtin.assert:
    that: info.peerings | rejectattr('pools') | rejectattr('virtual_node.ready') | list | length == 0

- name: Every virtual node of a pool is Ready
  ansible.builtin.assert:
    that: info.peerings | map(attribute='pools') | flatten | rejectattr('virtual_node.ready') | list | length == 0
"""

RETURN = r"""
peerings:
  description: One entry per ForeignCluster, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    provider_id:
      description: The provider's cluster id.
      type: str
      sample: cluster-2
    name:
      description: The ForeignCluster's name.
      type: str
      sample: cluster-2
    sharing_percentage:
      description: Share of the provider's free resources offered.
      type: int
      sample: 50
    node_labels:
      description: Labels suggested for the virtual node.
      type: dict
      sample: {"topology.kubernetes.io/region": "region-b"}
    node_taints:
      description: Taints of the virtual node besides Catamaran's own (C(key), C(value), C(effect)).
      type: list
      elements: dict
      sample: [{"key": "example.com/costly", "value": "true", "effect": "NoSchedule"}]
      version_added: 0.3.0
    ready:
      description: The ForeignCluster's Ready condition is True.
      type: bool
      sample: true
    reason:
      description: Reason of the Ready condition.
      type: str
      sample: ProviderReachable
    message:
      description: Message of the Ready condition.
      type: str
      sample: virtual node catamaran-cluster-2 is serving
    managed_by_ansible:
      description: Created by this collection (only those are pruned by playbooks).
      type: bool
      sample: true
    virtual_node:
      description:
        - The peering's pool-less virtual node, C(catamaran-<provider_id>) (with pools, it exists only until its pods
          are gone).
        - C(exists), C(ready) (its Ready condition is True), C(unschedulable), C(capacity) and C(allocatable).
      type: dict
      sample:
        name: catamaran-cluster-2
        exists: true
        ready: true
        unschedulable: false
        capacity: {"cpu": "12", "memory": "48Gi", "pods": "165"}
        allocatable: {"cpu": "12", "memory": "48Gi", "pods": "165"}
    pools:
      description:
        - The peering's node pools, sorted by name, each with its virtual node; empty without pools.
        - A pool is listed when the ForeignCluster sets it (C(spec.pools)) or when its virtual node exists (the
          provider's ResourceOffer decides which pools are lent, so one the provider no longer lends shows until its
          node is gone, and one it does not lend shows with C(virtual_node.exists) false).
      type: list
      elements: dict
      version_added: 0.3.0
      contains:
        name:
          description: The pool's name.
          type: str
          sample: gpu
        node_labels:
          description: Labels of the pool's virtual node besides the peering's (the ForeignCluster's C(spec.pools)).
          type: dict
          sample: {"example.com/disk": "ssd"}
        node_taints:
          description: Taints of the pool's virtual node besides the peering's (C(key), C(value), C(effect)).
          type: list
          elements: dict
          sample: [{"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"}]
        virtual_node:
          description: The pool's virtual node, with the same details as RV(peerings[].virtual_node).
          type: dict
          sample:
            name: catamaran-cluster-2.gpu
            exists: true
            ready: true
            unschedulable: false
            capacity: {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "pods": "110"}
            allocatable: {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "pods": "110"}
"""

from ansible_collections.catamaran.federation.plugins.module_utils.common import run_info_module
from ansible_collections.catamaran.federation.plugins.module_utils.info import peerings_report


def main():
    run_info_module({"peerings": lambda cluster, params: peerings_report(cluster)})


if __name__ == "__main__":
    main()
