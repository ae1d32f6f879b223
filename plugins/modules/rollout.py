#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rollout
short_description: Wait for a Deployment or DaemonSet to roll out, failing at once when its pods cannot pull their image
version_added: 0.3.0
description:
  - Waits until the workload's controller has seen its latest spec and every pod it wants is updated and available
    (for a Deployment, also until no old pod is left).
  - Fails as soon as one of its pods has a container waiting on its image (V(ErrImagePull), V(ImagePullBackOff),
    V(InvalidImageName), V(ErrImageNeverPull)), naming the pod, the container, the image, the reason and the
    kubelet's message, rather than at the end of O(timeout). A wrong image reference or a wrong registry credential
    is then reported within the kubelet's first pull attempt.
  - The P(catamaran.federation.controller#role) role waits for the manager, the virtual kubelets, the gateway and
    the route agents with it in deployment mode.
  - Reads only; checks the workload and its pods every 2 seconds.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.connection
attributes:
  check_mode:
    support: full
    description: Reads the rollout's state once and reports it, without waiting (the objects of a dry run do not run).
  diff_mode:
    support: none
    description: Read-only.
options:
  kind:
    description: The workload's kind.
    type: str
    choices: [Deployment, DaemonSet]
    default: Deployment
  name:
    description: The workload's name.
    type: str
    required: true
  namespace:
    description: The workload's namespace.
    type: str
    required: true
  timeout:
    description: Seconds to wait for the rollout before failing with what is left.
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: Wait for the manager, failing at once on an image its pods cannot pull
  catamaran.federation.rollout:
    kubeconfig: /etc/catamaran/cluster-1.kubeconfig
    kind: Deployment
    name: catamaran-manager
    namespace: catamaran-system
    timeout: 300
"""

RETURN = r"""
rolled_out:
  description: Whether the workload has rolled out (in check mode, whether it had when read).
  returned: always
  type: bool
  sample: true
progress:
  description: What the workload's status says of the rollout.
  returned: always
  type: str
  sample: 2 pod(s) updated and available
image_pull_problems:
  description: On failure, each container waiting on its image, with the pod, image, reason and message.
  returned: failure
  type: list
  elements: str
  sample: ["pod catamaran-manager-5b7d-x2x4 container manager image registry.example/catamaran/controller:0.3.0:
    ErrImagePull: ... 401 Unauthorized"]
"""

from ansible_collections.catamaran.federation.plugins.module_utils.common import (
    CatamaranModule,
    connection_options,
    connection_spec,
)
from ansible_collections.catamaran.federation.plugins.module_utils.rollout import (
    RolloutFailed,
    rollout_progress,
    wait_for_rollout,
)


def main():
    spec = connection_spec()
    spec.update(
        kind=dict(type="str", choices=["Deployment", "DaemonSet"], default="Deployment"),
        name=dict(type="str", required=True),
        namespace=dict(type="str", required=True),
        timeout=dict(type="int", default=300),
    )
    module = CatamaranModule(spec, supports_check_mode=True)
    params = module.params

    def body():
        cluster = module.connect(None, connection_options(params))
        if module.check_mode:
            workload = cluster.get("apps/v1", params["kind"], params["name"], params["namespace"])
            if workload is None:
                return dict(changed=False, rolled_out=False, progress="does not exist")
            done, progress = rollout_progress(workload)
            return dict(changed=False, rolled_out=done, progress=progress)
        try:
            workload = wait_for_rollout(cluster, params["kind"], params["name"], params["namespace"], params["timeout"])
        except RolloutFailed as error:
            module.ansible.fail_json(
                msg=str(error), rolled_out=False, progress=str(error), image_pull_problems=error.problems
            )
        return dict(changed=False, rolled_out=True, progress=rollout_progress(workload)[1])

    module.run(body)


if __name__ == "__main__":
    main()
