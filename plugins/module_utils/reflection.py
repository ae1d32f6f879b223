# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Resource-reflection settings of a peering: checked, merged and written as ForeignCluster C(spec.reflection).

Pure: the peering module and the federation_model filter share it, so an inventory and a task are
held to the same rules, and both refuse bad settings before any cluster is changed. Options are
snake_case (as every option of the collection); the ForeignCluster spells them camelCase.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# (option, ForeignCluster field, takes a policy), in the CRD's order.
KINDS = (
    ("config_maps", "configMaps", True),
    ("secrets", "secrets", True),
    ("services", "services", True),
    ("endpoint_slices", "endpointSlices", True),
    ("ingresses", "ingresses", True),
    ("service_account_tokens", "serviceAccountTokens", False),
    ("persistent_volume_claims", "persistentVolumeClaims", True),
)
POLICIES = ("DenyList", "AllowList")
MAX_WORKERS = 64
# (option, ForeignCluster field)
KEY_FILTERS = (("filtered_labels", "filteredLabels"), ("filtered_annotations", "filteredAnnotations"))
# (option, ForeignCluster field): the provider's class for reflected objects; unset or empty, its default.
CLASS_NAMES = (("ingress_class_name", "ingressClassName"), ("storage_class_name", "storageClassName"))
OPTIONS = ("kinds", "filtered_labels", "filtered_annotations", "ingress_class_name", "storage_class_name")
KIND_OPTIONS = tuple(kind[0] for kind in KINDS)
TAKES_POLICY = dict((kind[0], kind[2]) for kind in KINDS)
CAMEL_CASE = dict(
    [(kind[1], kind[0]) for kind in KINDS if kind[1] != kind[0]]
    + [(field, option) for option, field in KEY_FILTERS]
    + [(field, option) for option, field in CLASS_NAMES]
)


class InvalidReflection(ValueError):
    """Settings the ForeignCluster would refuse or the controller could not honour."""


def _unknown(keys, allowed, where):
    unknown = sorted(str(key) for key in keys if key not in allowed)
    if not unknown:
        return
    hints = ["%s (write %s)" % (key, CAMEL_CASE[key]) for key in unknown if CAMEL_CASE.get(key) in allowed]
    raise InvalidReflection(
        "%s: unknown %s (allowed: %s)%s"
        % (
            where,
            ", ".join(unknown),
            ", ".join(allowed),
            "; options are snake_case: %s" % ", ".join(hints) if hints else "",
        )
    )


def check_kind(name, settings, where):
    """One entry of C(kinds): a known kind, a known policy, 0-64 workers."""
    if settings is None:
        return
    if not isinstance(settings, dict):
        raise InvalidReflection("%s must be a mapping (policy, workers), got %r" % (where, settings))
    _unknown(settings, ("policy", "workers") if TAKES_POLICY[name] else ("workers",), where)
    policy = settings.get("policy")
    if policy is not None and policy not in POLICIES:
        raise InvalidReflection("%s.policy must be one of %s, got %r" % (where, ", ".join(POLICIES), policy))
    workers = settings.get("workers")
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= MAX_WORKERS:
        raise InvalidReflection("%s.workers must be an integer from 0 to %d, got %r" % (where, MAX_WORKERS, workers))


def check(reflection, where="reflection"):
    """Refuse settings the CRD or the controller would refuse, naming the field; None and {} mean defaults."""
    if reflection is None:
        return
    if not isinstance(reflection, dict):
        raise InvalidReflection("%s must be a mapping, got %r" % (where, reflection))
    _unknown(reflection, OPTIONS, where)
    kinds = reflection.get("kinds")
    if kinds is not None:
        if not isinstance(kinds, dict):
            raise InvalidReflection("%s.kinds must be a mapping of kind to settings, got %r" % (where, kinds))
        _unknown(kinds, KIND_OPTIONS, where + ".kinds")
        for name, settings in kinds.items():
            check_kind(name, settings, "%s.kinds.%s" % (where, name))
    for option in (key_filter[0] for key_filter in KEY_FILTERS):
        keys = reflection.get(option)
        if keys is None:
            continue
        if not isinstance(keys, list):
            raise InvalidReflection("%s.%s must be a list of keys, got %r" % (where, option, keys))
        for index, key in enumerate(keys):
            if not isinstance(key, str) or not key:
                raise InvalidReflection("%s.%s[%d] must be a non-empty string, got %r" % (where, option, index, key))
    for option in (class_name[0] for class_name in CLASS_NAMES):
        class_name = reflection.get(option)
        if class_name is not None and not isinstance(class_name, str):
            raise InvalidReflection("%s.%s must be a string, got %r" % (where, option, class_name))


def _overlay(base, override):
    merged = dict(base or {})
    merged.update((key, value) for key, value in (override or {}).items() if value is not None)
    return merged


def merge(base, override):
    """Checked settings C(base) overridden by C(override) key by key, per kind and per field of a kind.

    An unset (None) key of C(override) keeps C(base)'s; lists of filtered keys replace C(base)'s.
    """
    merged = _overlay(base, override)
    base_kinds = (base or {}).get("kinds") or {}
    override_kinds = (override or {}).get("kinds") or {}
    if base_kinds or override_kinds:
        merged["kinds"] = dict(
            (name, _overlay(base_kinds.get(name), override_kinds.get(name)))
            for name in list(base_kinds) + [n for n in override_kinds if n not in base_kinds]
        )
    return merged


def spec(reflection):
    """The ForeignCluster's C(spec.reflection) for checked settings, or None when every setting is left unset.

    Unset (None) options are left out, so the controller applies its defaults; an empty list of filtered
    keys is kept (it means: filter no key) and an empty ingress or storage class means the provider's default.
    """
    reflection = reflection or {}
    kinds = reflection.get("kinds") or {}
    result = {}
    written_kinds = {}
    for option, field, takes_policy in KINDS:
        settings = kinds.get(option) or {}
        written = dict(
            (key, settings[key])
            for key in (("policy", "workers") if takes_policy else ("workers",))
            if settings.get(key) is not None
        )
        if written:
            written_kinds[field] = written
    if written_kinds:
        result["kinds"] = written_kinds
    for option, field in KEY_FILTERS:
        if reflection.get(option) is not None:
            result[field] = list(reflection[option])
    for option, field in CLASS_NAMES:
        if reflection.get(option):
            result[field] = reflection[option]
    return result or None
