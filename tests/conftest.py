"""Fixtures shared by every test suite."""
