#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: remove_objects
short_description: Remove objects found by name or label selector, in ordered steps, waiting for each step
version_added: 0.3.0
description:
  - Runs O(steps) in order. Each step deletes every live object its O(steps[].objects) match (background propagation),
    then waits until they are gone, and until its O(steps[].await) match nothing either, before the next step starts.
  - A target with a O(steps[].objects[].name) matches that object (also when it carries other labels, unless the target
    gives O(steps[].objects[].label_selectors) of its own); one without matches the objects of the label selector.
    A target that would match every object of a kind is refused before anything is deleted.
  - Objects already being deleted are waited for, not deleted again. A kind the server does not serve matches nothing.
  - The P(catamaran.federation.controller#role) role removes the in-cluster controller with it, found by the label it
    gives everything it makes, in one module run rather than one per kind and namespace.
  - Fails naming what is left when a step's wait times out; the steps before it stay done, later ones are not started.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes
  - catamaran.federation.connection
options:
  steps:
    description: The steps, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      objects:
        description: What the step deletes, in this order.
        type: list
        elements: dict
        default: []
        suboptions: &target
          api_version:
            description: The target's API version, as in C(apiVersion).
            type: str
            required: true
          kind:
            description:
              - The target's kind. The module knows the kinds Catamaran's roles make and Kubernetes' workloads, rights,
                Services, Secrets, NetworkPolicies, webhook registrations and APIServices.
            type: str
            required: true
          namespace:
            description: The namespace of a namespaced kind; must be left out for a cluster-scoped one.
            type: str
          name:
            description: One object's name. Without it, the label selector decides.
            type: str
          label_selectors:
            description: Label selectors (all must match), instead of the module's O(label_selectors).
            type: list
            elements: str
      await:
        description:
          - What the step only waits for, after its deletions, without deleting it (the pods of the workloads it
            deleted, which their controllers remove and which stop as on any SIGTERM).
          - Not awaited in check mode or with O(wait=false).
        type: list
        elements: dict
        default: []
        suboptions: *target
      propagation_policy:
        description:
          - How the step's deletions reach the objects' dependents. With V(Foreground), a workload is gone only once
            its pods are, so the step's wait covers them without O(steps[].await).
        type: str
        choices: [Background, Foreground]
        default: Background
  label_selectors:
    description: The label selectors of every target without a name and without label selectors of its own.
    type: list
    elements: str
    default: []
  wait:
    description: Wait at each step until what it deleted and what it awaits is gone. Never in check mode.
    type: bool
    default: true
  wait_timeout:
    description: Seconds each step may wait.
    type: int
    default: 120
"""

EXAMPLES = r"""
- name: Remove an app's workloads, then, once their pods are gone, the rights they ran with
  catamaran.federation.remove_objects:
    kubeconfig: /etc/catamaran/cluster-1.kubeconfig
    label_selectors: [app.kubernetes.io/managed-by=catamaran.federation]
    steps:
      - objects:
          - {api_version: apps/v1, kind: Deployment, namespace: catamaran-system}
          - {api_version: apps/v1, kind: DaemonSet, namespace: catamaran-system}
        await:
          - {api_version: v1, kind: Pod, namespace: catamaran-system}
      - objects:
          - {api_version: v1, kind: ServiceAccount, namespace: catamaran-system}
          - {api_version: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding}
          - {api_version: rbac.authorization.k8s.io/v1, kind: ClusterRole}
          - api_version: admissionregistration.k8s.io/v1
            kind: MutatingWebhookConfiguration
            name: catamaran-pod-offloading
            label_selectors: []
"""

RETURN = r"""
removed:
  description: What was deleted (in check mode, what would be), as C(Kind namespace/name), in the order deleted.
  returned: always
  type: list
  elements: str
  sample: ["Deployment catamaran-system/catamaran-manager", "ClusterRole catamaran-manager"]
actions:
  description: The deletions, each naming the cluster.
  returned: always
  type: list
  elements: str
  sample: ["delete cluster-1: Deployment catamaran-system/catamaran-manager"]
left:
  description: On a wait's timeout, what is still there.
  returned: failure
  type: list
  elements: str
  sample: ["Pod catamaran-system/catamaran-manager-6d9c-x2x4"]
"""

from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import (
    CatamaranModule,
    connection_options,
    connection_spec,
)
from ansible_collections.catamaran.federation.plugins.module_utils.removal import (
    RemovalTimedOut,
    remove_steps,
    target_spec,
)


def main():
    spec = connection_spec()
    spec.update(
        steps=dict(
            type="list",
            elements="dict",
            required=True,
            options={
                "objects": dict(type="list", elements="dict", default=[], options=target_spec()),
                "await": dict(type="list", elements="dict", default=[], options=target_spec()),
                "propagation_policy": dict(type="str", choices=["Background", "Foreground"], default="Background"),
            },
        ),
        label_selectors=dict(type="list", elements="str", default=[]),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=120),
    )
    module = CatamaranModule(spec, supports_check_mode=True)
    params = module.params

    def body():
        cluster = module.connect(None, connection_options(params))
        changes = ChangeSet(module.check_mode)
        try:
            removed = remove_steps(
                cluster, changes, params["steps"], params["label_selectors"], params["wait"], params["wait_timeout"]
            )
        except RemovalTimedOut as error:
            module.ansible.fail_json(msg=str(error), left=error.left, actions=changes.actions)
        return changes.result(removed=removed)

    module.run(body)


if __name__ == "__main__":
    main()
