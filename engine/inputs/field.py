"""One input of the configuration vocabulary: its CONFIG.md name, kind, default and help."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    kind: object  # "int" | "bool" | "float" | "str" | an IntEnum class
    default: object
    help: str
