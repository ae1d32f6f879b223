#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: controller_process
short_description: Run a Catamaran controller process, supervised, on the host that runs the module
version_added: 0.1.0
description:
  - Starts C(python -m catamaran <command>) under C(python -m catamaran.supervisor), which restarts it after
    a failure (capped backoff) and stops with it when it exits 0 on purpose.
  - Keeps C(<name>.pid), C(<name>.log), C(<name>.status.json) and C(<name>.spec.json) in O(state_dir).
  - Idempotent. A running process with the same command, environment and liveness probe is left alone. A different
    one is restarted.
  - With O(liveness.enabled) (the default) the process serves C(/livez) (its C(--health-url-file), any free port
    unless C(--metrics-port) names one) and the supervisor restarts it after O(liveness.failure_threshold) failed
    probes in a row, as a kubelet's liveness probe would, so a wedged event loop does not go unnoticed.
  - This is the P(catamaran.federation.controller#role) role's C(local) mode, for clusters that cannot run the
    controller image, such as the lab.
author:
  - Catamaran developers (!UNKNOWN)
attributes:
  check_mode:
    support: full
    description: Reports what would be started, restarted or stopped.
  diff_mode:
    support: full
    description: Shows the state and command before and after.
options:
  name:
    description:
      - A name unique in O(state_dir), such as C(manager-cluster-1).
      - 1-100 letters, digits, C(.), C(_) or C(-), starting with a letter or digit (it names files in O(state_dir)).
    type: str
    required: true
  state:
    description:
      - V(started) runs the process (restarting it when its command changed).
      - V(restarted) always restarts it.
      - V(stopped) stops it and keeps its files.
      - V(absent) stops it and removes its pid, spec and status files (the log stays).
    type: str
    choices: [started, stopped, restarted, absent]
    default: started
  command:
    description: Arguments after C(python -m catamaran). Required with V(started) and V(restarted).
    type: list
    elements: str
  env:
    description: Extra environment variables for the process.
    type: dict
    default: {}
  python:
    description: The Python interpreter that has the C(catamaran) controller package installed.
    type: path
    required: true
  state_dir:
    description: Directory for pid, log, spec and status files.
    type: path
    required: true
  network_namespace:
    description:
      - Run the process in this named network namespace (one under C(/run/netns)), through C(nsenter), as a node's
        host network runs the network fabric's gateway. The namespace must exist.
    type: str
  liveness:
    description: The supervisor's liveness probe of C(/livez).
    type: dict
    default: {}
    suboptions:
      enabled:
        description: Probe the process and restart it when it stops answering.
        type: bool
        default: true
      period:
        description: Seconds between probes (positive).
        type: float
        default: 10
      timeout:
        description: Seconds one probe may take (positive).
        type: float
        default: 5
      failure_threshold:
        description: Failed probes in a row that restart the process (positive).
        type: int
        default: 3
"""

EXAMPLES = r"""
- name: Run cluster-1's manager with its pod webhook
  catamaran.federation.controller_process:
    name: manager-cluster-1
    python: /opt/catamaran/venv/bin/python
    state_dir: /var/lib/catamaran
    command:
      - --kubeconfig=/etc/catamaran/cluster-1.kubeconfig
      - --cluster-id=cluster-1
      - manager
      - --webhook-port=26007
      - --webhook-url=https://127.0.0.1:26007/mutate-pods

- name: Run cluster-1's network gateway on its node's network (namespace node-1)
  catamaran.federation.controller_process:
    name: gateway-cluster-1
    python: /opt/catamaran/venv/bin/python
    state_dir: /var/lib/catamaran
    network_namespace: node-1
    command:
      - --kubeconfig=/etc/catamaran/cluster-1.kubeconfig
      - --cluster-id=cluster-1
      - gateway

- name: Stop it
  catamaran.federation.controller_process:
    name: manager-cluster-1
    python: /opt/catamaran/venv/bin/python
    state_dir: /var/lib/catamaran
    state: stopped
"""

RETURN = r"""
process:
  description: The process after the task.
  returned: always
  type: dict
  contains:
    name:
      description: The process name.
      type: str
      sample: manager-cluster-1
    running:
      description: The supervisor is alive.
      type: bool
      sample: true
    supervisor_pid:
      description: The supervisor's pid.
      type: int
      sample: 4242
    child_pid:
      description: The controller process's pid.
      type: int
      sample: 4243
    restarts:
      description: How often the supervisor restarted the process.
      type: int
      sample: 0
    liveness_restarts:
      description: How many of those restarts the liveness probe caused.
      type: int
      sample: 0
    last_restart_reason:
      description: Why the liveness probe last restarted the process, if it did.
      type: str
      sample: "liveness probe failed 3 times in a row: HTTP 503: event loop has not turned for 31s (limit 30s)"
    state:
      description: V(running), V(backoff) (waiting to restart), V(stopped) or V(exited) (ended with status 0).
      type: str
      sample: running
    log:
      description: The log file.
      type: str
      sample: /var/lib/catamaran/manager-cluster-1.log
    command:
      description: The command it runs.
      type: list
      elements: str
      sample: ["--cluster-id=cluster-1", "manager"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.catamaran.federation.plugins.module_utils.processes import (
    ProcessError,
    SupervisedProcess,
    liveness_problem,
    name_problem,
    netns_path,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["started", "stopped", "restarted", "absent"], default="started"),
            command=dict(type="list", elements="str"),
            env=dict(type="dict", default={}),
            python=dict(type="path", required=True),
            state_dir=dict(type="path", required=True),
            network_namespace=dict(type="str"),
            liveness=dict(
                type="dict",
                default={},
                options=dict(
                    enabled=dict(type="bool", default=True),
                    period=dict(type="float", default=10),
                    timeout=dict(type="float", default=5),
                    failure_threshold=dict(type="int", default=3),
                ),
            ),
        ),
        required_if=[("state", "started", ["command"]), ("state", "restarted", ["command"])],
        supports_check_mode=True,
    )
    params = module.params
    liveness = dict(params["liveness"] or {})
    liveness = None if not liveness.pop("enabled", True) else liveness
    problem = name_problem(params["name"]) or liveness_problem(liveness)
    if problem:
        module.fail_json(msg=problem)
    process = SupervisedProcess(params["state_dir"], params["name"], params["python"])
    before = process.describe()
    namespace = params["network_namespace"]
    if namespace and params["state"] in ("started", "restarted") and not os.path.exists(netns_path(namespace)):
        module.fail_json(msg="network_namespace %s: no such namespace (%s)" % (namespace, netns_path(namespace)))
    wanted = dict(command=params["command"], env=params["env"], liveness=liveness)
    if namespace:
        wanted["network_namespace"] = namespace
    state = params["state"]
    if state == "started":
        changed = not before["running"] or process.spec() != wanted
    elif state == "restarted":
        changed = True
    elif state == "stopped":
        changed = before["running"]
    else:
        changed = before["running"] or process.spec() is not None
    try:
        if changed and not module.check_mode:
            process.stop()
            if state in ("started", "restarted"):
                process.start(params["command"], params["env"], liveness, namespace)
            elif state == "absent":
                process.forget()
    except (ProcessError, OSError) as error:
        module.fail_json(msg=str(error), changed=True, process=process.describe())
    after = process.describe()
    if module.check_mode and changed:
        after = dict(before, running=state in ("started", "restarted"), command=params["command"] or before["command"])
    diff = dict(
        before=dict(running=before["running"], command=before["command"]),
        after=dict(running=after["running"], command=after["command"]),
    )
    module.exit_json(changed=changed, process=after, diff=diff)


if __name__ == "__main__":
    main()
