"""Catamaran's controller: the continuous half of the federation (Ansible does the one-shot half)."""

__version__ = "0.1.0"
