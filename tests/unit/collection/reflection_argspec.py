"""The peering module's own argument spec applied to its reflection option."""

from __future__ import annotations

import sys

from catamaran_lab.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / ".collections"))

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.catamaran.federation.plugins.modules.peering import reflection_options


def module_argspec(reflection):
    """The module's own argument spec applied to O(reflection), as AnsibleModule does before main's body."""
    validator = ArgumentSpecValidator({"reflection": {"type": "dict", "options": reflection_options()}})
    return validator.validate({"reflection": reflection})
