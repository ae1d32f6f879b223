# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Install, upgrade and remove CustomResourceDefinitions, waiting until they are Established."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.catamaran.federation.plugins.module_utils.common import InvalidInput
from ansible_collections.catamaran.federation.plugins.module_utils.kube import MANAGED_BY, MANAGED_BY_LABEL

try:
    import yaml
except ImportError:
    yaml = None

CRD_API = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"


def load_definitions(src):
    """Every CRD in a file or in the *.yaml/*.yml files of a directory (sorted, so stable)."""
    if not os.path.exists(src):
        raise InvalidInput("src %s does not exist" % src)
    files = [src]
    if os.path.isdir(src):
        files = sorted(os.path.join(src, f) for f in os.listdir(src) if f.endswith((".yaml", ".yml")))
    definitions = []
    for path in files:
        with open(path) as handle:
            try:
                documents = [d for d in yaml.safe_load_all(handle) if d]
            except yaml.YAMLError as error:
                raise InvalidInput("%s is not valid YAML: %s" % (path, error)) from None
        for document in documents:
            if document.get("kind") != CRD_KIND or document.get("apiVersion") != CRD_API:
                raise InvalidInput("%s holds a %s, not a %s/%s" % (path, document.get("kind"), CRD_API, CRD_KIND))
            definitions.append(document)
    if not definitions:
        raise InvalidInput("no CustomResourceDefinition found in %s" % src)
    return definitions


def serves_field(cluster, crd_name, path):
    """Does `cluster` serve the CRD `crd_name` with the field `path` (a tuple of property names from the top of its
    schema, e.g. ("spec", "networking", "podCIDRs")) in any version? False when the CRD is not there."""
    crd = cluster.get(CRD_API, CRD_KIND, crd_name)
    for version in ((crd or {}).get("spec") or {}).get("versions") or []:
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        for name in path:
            schema = (schema.get("properties") or {}).get(name)
            if schema is None:
                break
        else:
            return True
    return False


def labelled(definition):
    result = dict(definition)
    metadata = dict(result["metadata"])
    metadata["labels"] = dict(metadata.get("labels") or {}, **{MANAGED_BY_LABEL: MANAGED_BY})
    result["metadata"] = metadata
    return result


def established(crd):
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def instances_path(definition):
    spec = definition["spec"]
    version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
    return "/apis/%s/%s/%s" % (spec["group"], version, spec["names"]["plural"])


def converge(module, cluster, changes, definitions, state, wait, wait_timeout, force):
    report = []
    for definition in definitions:
        name = definition["metadata"]["name"]
        if state == "present":
            live = changes.apply(cluster, labelled(definition))
            ready = established(live)
            if wait and not module.check_mode and not ready:
                ready, live = cluster.watch_until(CRD_API, CRD_KIND, name, None, established, wait_timeout)
                if not ready:
                    module.ansible.fail_json(
                        msg="%s: CRD %s is not Established after %ss" % (cluster.label, name, wait_timeout),
                        changed=changes.changed,
                    )
            report.append(dict(name=name, established=bool(ready)))
        else:
            current = cluster.get(CRD_API, CRD_KIND, name)
            if current is not None and not force:
                items = cluster.request("GET", instances_path(current), query={"limit": "5"}).get("items") or []
                if items:
                    names = ", ".join(
                        "%s/%s" % (i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in items
                    )
                    raise InvalidInput(
                        "%s: CRD %s still has objects (%s); remove them first or set force=true to delete them "
                        "with the CRD" % (cluster.label, name, names)
                    )
            existed = changes.delete(cluster, CRD_API, CRD_KIND, name)
            if existed and wait and not module.check_mode:
                gone = cluster.watch_until(CRD_API, CRD_KIND, name, None, lambda obj: obj is None, wait_timeout)[0]
                if not gone:
                    module.ansible.fail_json(
                        msg="%s: CRD %s is still terminating after %ss" % (cluster.label, name, wait_timeout),
                        changed=True,
                    )
            report.append(dict(name=name, established=False))
    return report
