#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: namespace_offloading_policy
short_description: Offload every namespace whose labels match a selector
version_added: 0.1.0
description:
  - Manages a cluster-scoped NamespaceOffloadingPolicy on a consumer cluster. Catamaran's manager gives every
    namespace the selector matches a NamespaceOffloading C(offloading) with this spec, and removes it (draining the
    namespace's offloaded pods) when the namespace stops matching. Namespaces created later are offloaded too, as
    the pod webhook steers a matching namespace's pods from its first one.
  - A namespace's own NamespaceOffloading (for example one made by M(catamaran.federation.namespace_offloading))
    always wins over a policy. Of several policies matching one namespace, the first by name decides.
  - C(kube-system), C(kube-public), C(kube-node-lease), Catamaran's own namespace and the tenant and twin
    namespaces a cluster holds for its consumers are never offloaded by a policy.
  - The policy is applied as a server-side dry run first (check mode stops there), so an invalid one fails before
    anything is changed.
  - With O(state=absent), deletes the policy and waits while the NamespaceOffloadings it made go (the garbage
    collector deletes them; the manager drains their namespaces and removes the twins). The namespaces stay.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes
  - catamaran.federation.connection
  - catamaran.federation.offloading
options:
  name:
    description: The policy's name (a DNS label).
    type: str
    required: true
  state:
    description: V(present) creates or updates the policy; V(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  namespace_selector:
    description:
      - A Kubernetes label selector (C(matchLabels), C(matchExpressions)) matched against namespace labels.
      - Required with O(state=present); it must not be empty.
    type: dict
  namespace_mapping_strategy:
    description:
      - How twin namespaces are named. V(DefaultName) is C(<namespace>-<consumer-id>). Immutable once set.
      - C(SelectedName) names a single twin, so a policy does not offer it.
    type: str
    choices: [DefaultName, EnforceSameName]
    default: DefaultName
  wait:
    description: With O(state=present), wait until the manager reports the policy C(Ready); fail if it reports why not.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Offload every namespace of team blue to region-b, from its first pod
  catamaran.federation.namespace_offloading_policy:
    kubeconfig: ~/.kube/cluster-1
    name: team-blue
    namespace_selector:
      matchLabels:
        team: blue
    pod_offloading_strategy: Remote
    cluster_selector:
      nodeSelectorTerms:
        - matchExpressions:
            - key: topology.kubernetes.io/region
              operator: In
              values: [region-b]
    wait: true

- name: Stop offloading them (their offloaded pods are drained)
  catamaran.federation.namespace_offloading_policy:
    kubeconfig: ~/.kube/cluster-1
    name: team-blue
    state: absent
"""

RETURN = r"""
policy:
  description: The policy as it stands (after the wait, if any); empty after removal.
  returned: always
  type: dict
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
    offloaded_namespaces:
      description: How many namespaces have a NamespaceOffloading made by this policy.
      type: int
      sample: 3
    ready:
      description: The manager applied the policy to every namespace it selects.
      type: bool
      sample: true
    message:
      description: The manager's word on it (the namespaces it could not offload and why).
      type: str
      sample: 3 namespace(s) offloaded by this policy
actions:
  description: What was (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: ["create cluster-1: NamespaceOffloadingPolicy team-blue"]
"""

from ansible_collections.catamaran.federation.plugins.module_utils import offloading
from ansible_collections.catamaran.federation.plugins.module_utils.common import CatamaranModule, connection_spec


def main():
    spec = connection_spec()
    spec.update(offloading.spec_options(offloading.POLICY_MAPPING_STRATEGIES))
    spec.update(name=dict(type="str", required=True), namespace_selector=dict(type="dict"))
    module = CatamaranModule(spec, supports_check_mode=True, required_if=[("state", "present", ["namespace_selector"])])
    offloading.run_module(
        module,
        offloading.validate_policy,
        offloading.policy_present,
        offloading.policy_absent,
        "policy",
        offloading.policy_summary,
    )


if __name__ == "__main__":
    main()
