"""One input of the configuration vocabulary: its CONFIG.md name, kind, default, bounds and help."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    kind: object  # "int" | "bool" | "float" | "str" | an IntEnum class
    default: object
    help: str
    low: float | None = None  # smallest accepted value (numbers)
    high: float | None = None  # largest accepted value (numbers)
