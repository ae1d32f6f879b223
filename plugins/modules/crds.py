#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: crds
short_description: Install, upgrade or remove Catamaran's CustomResourceDefinitions
version_added: 0.1.0
description:
  - Applies CustomResourceDefinitions with server-side apply (field manager C(catamaran.federation))
    and waits until each is Established.
  - With O(state=absent) deletes them, refusing while objects of a CRD still exist unless O(force=true).
  - Check mode asks the API server for a dry run, so it reports exactly what would change.
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes
  - catamaran.federation.connection
options:
  src:
    description:
      - A CRD manifest file, or a directory whose C(*.yaml) and C(*.yml) files hold CRDs.
      - The collection ships Catamaran's CRDs in C(controller/crds) at its root; the P(catamaran.federation.crds#role) role
        passes that directory.
      - Mutually exclusive with O(definitions).
    type: path
  definitions:
    description:
      - CRD manifests as data. Mutually exclusive with O(src).
    type: list
    elements: dict
  state:
    description:
      - V(present) installs or upgrades; V(absent) removes.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description:
      - Wait until every CRD is Established (present) or gone (absent).
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for each CRD.
    type: int
    default: 60
  force:
    description:
      - With O(state=absent), delete CRDs even when objects of them exist (they are deleted with the CRD).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Install Catamaran's CRDs (the crds role passes the collection's controller/crds)
  catamaran.federation.crds:
    kubeconfig: ~/.kube/cluster-1
    src: ~/.ansible/collections/ansible_collections/catamaran/federation/controller/crds

- name: Remove them again, only if nothing uses them
  catamaran.federation.crds:
    kubeconfig: ~/.kube/cluster-1
    context: admin@cluster-1
    src: /opt/catamaran/crds
    state: absent
"""

RETURN = r"""
crds:
  description: The CRDs handled, in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The CRD's name.
      type: str
      sample: foreignclusters.core.catamaran.io
    established:
      description: Whether the CRD is Established (always false after removal).
      type: bool
      sample: true
actions:
  description: What was (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: ["create cluster-1: CustomResourceDefinition foreignclusters.core.catamaran.io"]
"""

from ansible_collections.catamaran.federation.plugins.module_utils.changes import ChangeSet
from ansible_collections.catamaran.federation.plugins.module_utils.common import (
    CatamaranModule,
    connection_options,
    connection_spec,
)
from ansible_collections.catamaran.federation.plugins.module_utils.crds import converge, load_definitions


def main():
    spec = connection_spec()
    spec.update(
        src=dict(type="path"),
        definitions=dict(type="list", elements="dict"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=60),
        force=dict(type="bool", default=False),
    )
    module = CatamaranModule(
        spec,
        supports_check_mode=True,
        mutually_exclusive=[("src", "definitions")],
        required_one_of=[("src", "definitions")],
    )
    params = module.params

    def body():
        definitions = params["definitions"] or load_definitions(params["src"])
        cluster = module.connect(None, connection_options(params))
        changes = ChangeSet(module.check_mode)
        report = converge(
            module,
            cluster,
            changes,
            definitions,
            params["state"],
            params["wait"],
            params["wait_timeout"],
            params["force"],
        )
        return changes.result(crds=report)

    module.run(body)


if __name__ == "__main__":
    main()
