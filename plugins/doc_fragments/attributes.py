# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Modules that change clusters: check mode is the API server's dry run.
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Server-side dry run; nothing is persisted and nothing is waited for.
  diff_mode:
    support: full
    description: Shows each object before and after; Secret values appear only as short digests.
"""

    # Read-only modules.
    INFO = r"""
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Read-only.
"""
