# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The NamespaceOffloading spec's options, for one namespace or for every namespace a policy selects
    # (module_utils/offloading.py spec_options is their argument spec).
    DOCUMENTATION = r"""
options:
  pod_offloading_strategy:
    description: Where the namespace's pods may run.
    type: str
    choices: [Local, Remote, LocalAndRemote]
    default: LocalAndRemote
  cluster_selector:
    description:
      - A Kubernetes NodeSelector (C(nodeSelectorTerms)) matched against virtual node labels.
      - Omitted, every peered cluster is selected.
    type: dict
  wait_timeout:
    description: Seconds to wait (for C(Ready), or for the removal to finish).
    type: int
    default: 120
"""
