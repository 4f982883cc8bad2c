"""The one exception type for user mistakes: the CLI prints its message on one line and exits 2."""


class UserError(Exception):
    """Bad input from the user (unknown name, impossible layout, malformed file): never a traceback."""


def read_user_text(path, what: str) -> str:
    """The text of a file the user names (a sweep spec, a config.json), or one line saying why it cannot be read."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as err:
        raise UserError(f"cannot read {what} {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not a UTF-8 text file") from None
