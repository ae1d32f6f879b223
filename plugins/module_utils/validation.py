# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A peering's settings, checked the way the API server and the controller would check them.

Pure: the peering module and the federation_model filter share it, so an inventory and a task are
held to the same rules and both refuse bad settings before any cluster is changed. Every message
names the field.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    MIN_CREDENTIAL_LIFETIME_SECONDS,
    POD_SECURITY_LEVELS,
)

# k8s.io/apimachinery validation: a qualified name is [prefix/]name, the prefix a DNS-1123 subdomain.
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
HEALTH_CHECK_FIELDS = ("period_seconds", "timeout_seconds", "failure_threshold")


class InvalidSetting(ValueError):
    """A setting the API server or the controller would refuse."""


def label_key(key, where):
    """A label key as the API server accepts it: [DNS-1123 subdomain/]name (name at most 63)."""
    if not isinstance(key, str) or not key:
        raise InvalidSetting("%s: label key %r must be a non-empty string" % (where, key))
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        raise InvalidSetting(
            "%s: label key %r: the prefix %r must be a DNS-1123 subdomain (lower case, at most 253)"
            % (where, key, prefix)
        )
    if len(name) > 63 or not QUALIFIED_NAME.match(name):
        raise InvalidSetting(
            "%s: label key %r: the name %r must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit" % (where, key, name)
        )
    return key


def label_value(value, where):
    if not isinstance(value, str):
        raise InvalidSetting("%s: label value must be a string, got %r" % (where, value))
    if value and (len(value) > 63 or not QUALIFIED_NAME.match(value)):
        raise InvalidSetting(
            "%s: label value %r must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit" % (where, value)
        )
    return value


def labels(mapping, where):
    """A mapping of label keys to label values; returns it with every key and value checked."""
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise InvalidSetting("%s must be a mapping of labels, got %r" % (where, mapping))
    for key, value in mapping.items():
        label_key(key, where)
        label_value(value, "%s.%s" % (where, key))
    return mapping


def cidr(value, where):
    """An IP network such as 10.200.0.0/16 (host bits are ignored, as the virtual kubelet does)."""
    try:
        if "/" in str(value):
            return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        pass
    raise InvalidSetting("%s: %r is not a CIDR such as 10.200.0.0/16" % (where, value))


def remap_covers(remap, provider_cidrs, where):
    """The remap range must hold each of the provider's pod ranges: the virtual kubelet maps offsets."""
    target = cidr(remap, where)
    for source in provider_cidrs:
        network = ipaddress.ip_network(source, strict=False)
        if network.version != target.version:
            raise InvalidSetting(
                "%s: %s is IPv%d but the provider's pod range %s is IPv%d"
                % (where, remap, target.version, source, network.version)
            )
        if target.prefixlen > network.prefixlen:
            raise InvalidSetting(
                "%s: %s is smaller than the provider's pod range %s (a prefix of /%d or shorter is needed)"
                % (where, remap, source, network.prefixlen)
            )


def positive(value, where):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidSetting("%s must be a positive integer, got %r" % (where, value))
    return value


def health_check(settings, where):
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise InvalidSetting("%s must be a mapping, got %r" % (where, settings))
    unknown = sorted(str(key) for key in settings if key not in HEALTH_CHECK_FIELDS)
    if unknown:
        raise InvalidSetting(
            "%s: unknown %s (allowed: %s)" % (where, ", ".join(unknown), ", ".join(HEALTH_CHECK_FIELDS))
        )
    for key in HEALTH_CHECK_FIELDS:
        positive(settings.get(key), "%s.%s" % (where, key))
    return settings


def pod_security(level, where):
    if level not in POD_SECURITY_LEVELS:
        raise InvalidSetting("%s must be one of %s, got %r" % (where, ", ".join(POD_SECURITY_LEVELS), level))
    return level


def credential_lifetime(seconds, where):
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < MIN_CREDENTIAL_LIFETIME_SECONDS:
        raise InvalidSetting(
            "%s must be an integer of at least %d seconds (the API server's floor for bound tokens), got %r"
            % (where, MIN_CREDENTIAL_LIFETIME_SECONDS, seconds)
        )
    return seconds
