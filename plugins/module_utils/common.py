# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What every catamaran.federation module does the same way: argument specs, connecting, failing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.catamaran.federation.plugins.module_utils import connection
from ansible_collections.catamaran.federation.plugins.module_utils.kube import (
    URLLIB3_IMPORT_ERROR,
    Cluster,
    ClusterError,
    ClusterUnreachable,
)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def connection_spec():
    """The connection options (kubeconfig, context, host, api_key, ...), each unset unless given."""
    return connection.argument_spec()


def connection_options(params, side=None):
    """The options a cluster is reached with: a side's suboptions (peering) over the top-level ones, or the
    module's own parameters; unset ones come from K8S_AUTH_* (connection.resolve)."""
    if side is None:
        return connection.resolve(params)
    return connection.resolve(params.get(side) or {}, defaults=params)


class InvalidInput(Exception):
    """Input that is wrong before any cluster is touched."""


def check_cluster_id(value, what):
    if not value or len(value) > 63 or not DNS1123_LABEL.match(value):
        raise InvalidInput(
            "%s %r is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)" % (what, value)
        )
    return value


class CatamaranModule:
    """AnsibleModule plus a uniform way to connect and to turn errors into fail_json."""

    def __init__(self, argument_spec, **kwargs):
        self.ansible = AnsibleModule(argument_spec=argument_spec, **kwargs)
        for library, error in (("urllib3", URLLIB3_IMPORT_ERROR), ("PyYAML", connection.YAML_IMPORT_ERROR)):
            if error is not None:
                self.ansible.fail_json(msg=missing_required_lib(library), exception=str(error))
        self.params = self.ansible.params
        self.check_mode = self.ansible.check_mode
        # Credentials inside kubeconfig content (top level or a side's suboptions) never reach the output.
        for options in [self.params] + [value for value in self.params.values() if isinstance(value, dict)]:
            self.hide(*connection.secrets_in(options))

    def connect(self, label, options):
        """Reach one cluster with resolved options (connection_options) and prove the credential works."""
        self.hide(*connection.secrets_in(options))
        cluster = Cluster(label, options)
        if not cluster.verifies_tls:
            self.ansible.warn(
                "%s: the API server's certificate is not verified (%s: insecure-skip-tls-verify, or validate_certs "
                "false); anyone on the path to %s can read and change what this module sends"
                % (cluster.label, cluster.source, cluster.server)
            )
        cluster.check()
        return cluster

    def hide(self, *values):
        """Mask values (tokens) in anything this module prints, errors included."""
        for value in values:
            if value:
                self.ansible.no_log_values.add(value)

    def run(self, body):
        """Call body(); ClusterError and InvalidInput become a clean failure."""
        try:
            self.ansible.exit_json(**body())
        except InvalidInput as error:
            self.ansible.fail_json(msg="invalid input: %s" % error)
        except connection.ConnectionProblem as error:
            self.ansible.fail_json(msg=str(error))
        except ClusterUnreachable as error:
            # Playbooks tell a cluster that is down (skip its pairs) from one that refuses (stop). Not `unreachable`:
            # Ansible would take that for the control host's own connection failing.
            self.ansible.fail_json(msg=str(error), cluster_unreachable=True)
        except ClusterError as error:
            self.ansible.fail_json(msg=str(error), status=error.status, reason=error.reason)
        except Exception as error:
            self.ansible.fail_json(msg="unexpected error: %s" % error, exception=traceback.format_exc())


def run_info_module(reports, extra_options=None):
    """The whole of a read-only module: connect, then return each report(cluster, params) under its key."""
    spec = connection_spec()
    spec.update(extra_options or {})
    module = CatamaranModule(spec, supports_check_mode=True)

    def body():
        cluster = module.connect(None, connection_options(module.params))
        return dict([("changed", False)] + [(key, report(cluster, module.params)) for key, report in reports.items()])

    module.run(body)
