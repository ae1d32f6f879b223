# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # One cluster reached through a kubeconfig file.
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to the kubeconfig file of the cluster, on the host that runs the module.
      - The module fails before changing anything when the file is missing, the context is unknown
        or the API server cannot be reached.
    type: path
    required: true
  context:
    description:
      - The kubeconfig context to use. Defaults to the file's current context.
    type: str
  request_timeout:
    description:
      - Seconds to wait for each API request.
    type: int
    default: 10
requirements:
  - kubernetes >= 24.2.0 (Python library)
  - PyYAML >= 3.11
notes:
  - "Runs on the host the task is delegated to, usually the control node (C(connection: local))."
"""
