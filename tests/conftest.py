"""Fixtures and plugins shared by every test suite: where the time goes (timing.py), and integration tests side by
side on labs of their own (parallel.py)."""

from . import parallel, timing


def pytest_configure(config):
    timing.configure(config)
    parallel.configure(config)


def pytest_unconfigure(config):
    timing.unconfigure(config)
