"""Errors in what a user gave ascent (a config, a data row, a file or an import path), as
opposed to faults of ascent, a worker or the machine.

A ``UserError``'s message names what is wrong and says what to do, so the command line prints
it alone and exits 2; ``ascent --debug ...`` (or ``ASCENT_DEBUG=1``) shows the traceback too.
Any other exception is a bug or a fault and keeps its traceback.
"""


class UserError(Exception):
    """Something the user gave cannot be used; the message says what and what to do."""


class InputError(UserError, ValueError):
    """A value the user gave (a config key, a data row, an import path) cannot be used."""


class InputNotFound(UserError, FileNotFoundError):
    """A file or directory the user named does not exist."""
