"""The one exception type for user mistakes: the CLI prints its message on one line and exits 2."""


class UserError(Exception):
    """Bad input from the user (unknown name, impossible layout, malformed file): never a traceback."""
