"""Errors that map to exit codes: InputError is the user's problem (exit 2), anything else is ours (exit 1)."""


class InputError(Exception):
    """Bad input or usage: reported as one line on stderr, exit code 2."""
