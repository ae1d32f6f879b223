"""The one error type the lab raises for problems a user can fix."""


class LabError(Exception):
    """A lab failure with a message naming what is wrong and how to fix it."""
