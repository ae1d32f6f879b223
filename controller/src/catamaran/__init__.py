"""Catamaran's controller: the continuous half of the federation (Ansible does the one-shot half)."""

from importlib import metadata

try:
    # The installed distribution's version, which its build took from the collection's galaxy.yml (controller/setup.py).
    __version__ = metadata.version("catamaran-controller")
except metadata.PackageNotFoundError:  # the sources put on sys.path by hand, never installed
    __version__ = "0+unknown"
