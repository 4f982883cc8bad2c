"""CSV cells that a spreadsheet shows as text, never runs as a formula (CSV or formula injection).

Excel, LibreOffice and Google Sheets evaluate a cell that begins with `=`, `+`, `-` or `@` (and some a leading
tab or carriage return) as a formula, so a model path like `=cmd|' /C calc'!A0` in a case list would run when
the output is opened. OWASP's advice, followed here: such a text cell gets a leading single quote, which the
spreadsheet shows as text. Numbers are not text: a numeric column is written as it is (-1 stays -1), and so is a
text cell that is a plain number (`-1`, `+2.5e3`), which a spreadsheet reads as that number, not as a formula.
"""

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

FORMULA_START = r"^[=+\-@\t\r]"
PLAIN_NUMBER = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"


def is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return is_text(kind.value_type)
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def quote_formulas(column: pa.Array) -> pa.Array:
    """A text column with every formula-looking cell prefixed by a single quote."""
    text = pc.cast(column, pa.large_string())
    risky = pc.and_(pc.match_substring_regex(text, FORMULA_START),
                    pc.invert(pc.match_substring_regex(text, PLAIN_NUMBER)))
    quoted = pc.binary_join_element_wise(pa.scalar("'", pa.large_string()), text, pa.scalar("", pa.large_string()))
    return pc.if_else(risky, quoted, text)


def spreadsheet_safe_table(table: pa.Table) -> pa.Table:
    """The table with its text columns made safe to open in a spreadsheet; other columns unchanged."""
    for i, field in enumerate(table.schema):
        if is_text(field.type):
            column = pa.chunked_array([quote_formulas(c) for c in table.column(i).chunks], pa.large_string())
            table = table.set_column(i, field.name, column)
    return table


def spreadsheet_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """spreadsheet_safe_table for a polars frame (categorical columns come back as plain text)."""
    text = [name for name, kind in frame.schema.items() if kind in (pl.String, pl.Categorical) or isinstance(kind, pl.Enum)]
    if not text:
        return frame
    safe = spreadsheet_safe_table(frame.select(pl.col(text).cast(pl.String)).to_arrow())
    return frame.with_columns(pl.from_arrow(safe))
