"""The query library: one question per `queries/<name>.sql`, run with DuckDB `$name` parameters.

Each file opens with a header that this module parses and the CLI shows:

    -- Largest micro-batch that fits, per model, GPU and parallel layout.
    -- params:  $model    VARCHAR  model key, or NULL for every model
    --          $limit    BIGINT   rows to return (default 20)
    -- returns: one row per (model, gpu, ...): max_micro_batch, device_peak_gib, spare_gib

A parameter is optional when its meaning says "or NULL" (omitted: NULL, which the SQL reads as "any") or
"(default V)" (omitted: V); any other parameter is required. `-- params:  none` declares none. Values are
converted to the declared type (VARCHAR, BIGINT, DOUBLE, BOOLEAN), so `--param n_gpus=8` arrives as 8, and a
`model` or `gpu` value resolves through the catalog's keys and aliases (`h100` -> `h100-sxm-80gb`). A numeric
parameter's meaning may state its range as bounds in parentheses, `(>= 1)`, `(> 0)`, `(<= 100)`, one or more:

    --          $tokens   DOUBLE   tokens to train (>= 1) (default 1e12)

and a parameter named after a numeric CONFIG.md input (`$seq_len`, `$n_gpus`) also takes that input's bounds
(engine/inputs/vocabulary.py). A value outside them is refused in one line before the query runs (never an answer
in negative days).

Conventions the queries share: rows considered are `valid AND fits` unless the question is about failures;
`method` names what is trained (precision, optimizer, framework, then LoRA rank, base quantization and offload
when used) and is part of every grain, so a sweep over training methods never mixes them; axes a query does
not group by take their best value; `spare_gib` is the memory to spare at the peak beyond the headroom kept free (usable - device peak).
"""

import difflib
import math
import re
import threading
from dataclasses import dataclass

import duckdb
import polars as pl

from engine import QUERIES_DIR
from engine.errors import UserError

TYPES = ("VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN")
_PARAM = re.compile(r"^\$(?P<name>[a-z_][a-z0-9_]*)\s+(?P<type>[A-Z]+)\s+(?P<meaning>.+)$")
_DEFAULT = re.compile(r"\(default (?P<value>[^)]+)\)")
_BOUND = re.compile(r"\((?P<op>>=|<=|>|<)\s*(?P<value>[^)\s]+)\s*\)")
BOUND_HOLDS = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b, "<=": lambda v, b: v <= b, "<": lambda v, b: v < b}
_TRUE, _FALSE = {"true", "t", "yes", "1"}, {"false", "f", "no", "0"}


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # one of TYPES
    meaning: str
    optional: bool
    default: object = None  # the value an omitted optional parameter takes (None: NULL)
    bounds: tuple = ()  # (operator, value) pairs from the meaning's `(>= 1)`: the range a value must lie in


@dataclass(frozen=True)
class Query:
    name: str
    purpose: str
    params: tuple[Param, ...]
    returns: str
    sql: str

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


def list_queries() -> list[tuple[str, str]]:
    """(name, purpose) of every query in queries/, sorted by name.

    Examples
    --------
    >>> dict(list_queries())["summary"][:40]
    'How big the sweep is and how much of it '
    """
    return [(q.name, q.purpose) for q in (read_query(name) for name in query_names())]


def query_names() -> list[str]:
    return sorted(p.stem for p in QUERIES_DIR.glob("*.sql") if not p.stem.startswith("_"))  # _*.sql: shared macros


def read_query(name: str) -> Query:
    """The query's SQL text and its parsed header; an unknown name suggests the nearest ones."""
    names = query_names()
    if name not in names:
        raise unknown_query(name, names)
    path = QUERIES_DIR / f"{name}.sql"
    return parse_query(name, path.read_text())


def unknown_query(name: str, names: list[str]) -> UserError:
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(near)}?" if near else f"known queries: {', '.join(names)}"
    return UserError(f"unknown query '{name}'; {hint} (memsim query --list shows them all)")


def header_lines(sql: str) -> list[str]:
    """The leading `--` comment block, without the `--` markers."""
    lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    return lines


def parse_query(name: str, sql: str) -> Query:
    """A Query from a .sql file's text: purpose line, `params:` lines, `returns:` lines."""
    lines = header_lines(sql)
    if not lines or not lines[0] or lines[0].startswith(("params:", "returns:")):
        raise UserError(f"queries/{name}.sql: the first line must be a `-- purpose` comment")
    purpose, section, params, returns = lines[0], None, [], []
    for line in lines[1:]:
        for key in ("params:", "returns:"):
            if line.startswith(key):
                section, line = key, line[len(key):].strip()
        if section == "params:" and line and line != "none":
            params.append(parse_param(name, line))
        elif section == "returns:":
            returns.append(line)
        elif section is None:
            purpose += " " + line
    if section is None or not returns:
        raise UserError(f"queries/{name}.sql: the header needs `-- params:` and `-- returns:` lines")
    return Query(name, purpose, tuple(params), " ".join(returns), sql)


def parse_param(name: str, line: str) -> Param:
    match = _PARAM.match(line)
    if not match or match["type"] not in TYPES:
        raise UserError(f"queries/{name}.sql: bad params line {line!r}; write `$name TYPE meaning`, TYPE one of {', '.join(TYPES)}")
    meaning = match["meaning"].strip()
    param = Param(match["name"], match["type"], meaning, "or NULL" in meaning)
    stated = tuple((b["op"], convert(param, b["value"], name)) for b in _BOUND.finditer(meaning))
    if stated and param.type not in ("BIGINT", "DOUBLE"):
        raise UserError(f"queries/{name}.sql: ${param.name} is {param.type}; only BIGINT and DOUBLE take a range")
    param = Param(param.name, param.type, meaning, param.optional, None, stated + input_bounds(param))
    default = _DEFAULT.search(meaning)
    if default:
        value = convert(param, default["value"], name)
        check_range(param, value, default["value"], name)
        return Param(param.name, param.type, meaning, True, value, param.bounds)
    return param


def input_bounds(param: Param) -> tuple:
    """The bounds of the numeric CONFIG.md input a parameter is named after (none for other names)."""
    from engine.inputs.vocabulary import INPUT_FIELDS

    field = next((f for f in INPUT_FIELDS if f.name == param.name), None)
    if field is None or param.type not in ("BIGINT", "DOUBLE"):
        return ()
    return tuple((op, bound) for op, bound in ((">=", field.low), ("<=", field.high)) if bound is not None)


def check_range(param: Param, value, given, query: str) -> None:
    """A value inside every bound the parameter's meaning states; one line saying which it breaks otherwise."""
    for op, bound in param.bounds:
        if value is not None and not BOUND_HOLDS[op](value, bound):
            shown = f"{bound:,}" if isinstance(bound, int) else f"{bound:g}"
            raise UserError(f"query {query}: ${param.name} must be {op} {shown}, got {given} (${param.name}: {param.meaning})")


def convert(param: Param, value, query: str):
    """A value (often CLI text) as the parameter's declared type; `model` and `gpu` resolve via the catalog."""
    if value is None:
        return None
    try:
        if param.type == "BIGINT":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            number = int(value.replace("_", "")) if isinstance(value, str) else int(value)
            if not -(2**63) <= number < 2**63:  # DuckDB's BIGINT
                raise ValueError
            return number
        if param.type == "DOUBLE":
            if isinstance(value, bool) or not math.isfinite(float(value)):  # nan tokens train in nan days
                raise ValueError
            return float(value)
        if param.type == "BOOLEAN":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text not in _TRUE | _FALSE:
                raise ValueError
            return text in _TRUE
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"query {query}: ${param.name} takes a {param.type}, got {value!r} (${param.name}: {param.meaning})") from None
    return catalog_key(param.name, str(value))


def catalog_key(name: str, value: str) -> str:
    from engine.catalogs import catalog

    if name == "model":
        return catalog.resolve_model(value)["model"]
    if name == "gpu":
        return catalog.resolve_gpu(value)["gpu"]
    return value


def bind(query: Query, params: dict) -> dict:
    """Every declared parameter with a typed value: given, defaulted or NULL; unknown or missing ones refused."""
    accepted = ", ".join(f"${p.name} {p.type}" for p in query.params) or "none"
    unknown = [k for k in params if query.param(k) is None]
    if unknown:
        raise UserError(f"query {query.name} has no parameter ${unknown[0]} (accepted: {accepted})")
    values = {}
    for p in query.params:
        if p.name in params and params[p.name] is not None:
            values[p.name] = convert(p, params[p.name], query.name)
            check_range(p, values[p.name], params[p.name], query.name)
        elif p.optional:
            values[p.name] = p.default
        else:
            raise UserError(f"query {query.name} needs ${p.name} ({p.meaning}): pass --param {p.name}=VALUE (accepted: {accepted})")
    return values


def first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN"}  # what a read-only connection runs: reading statements only


def is_read_only(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the connection was locked down (engine.dataset.views.lock_down)."""
    return con.execute("SELECT current_setting('enable_external_access')").fetchall()[0][0] is False


def check_statements(con: duckdb.DuckDBPyConnection, sql: str, what: str) -> None:
    """On a read-only connection, only SELECT (WITH, FROM, DESCRIBE, SUMMARIZE, ...) and EXPLAIN run: no COPY,
    ATTACH, INSTALL, LOAD, SET, PRAGMA, CREATE or any other statement that writes or changes the session."""
    if not is_read_only(con):
        return
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as err:
        raise UserError(f"{what} failed: {first_line(err)}") from None
    for statement in statements:
        kind = statement.type.name
        if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs what it explains: that statement must be a SELECT too
            explained = explained_statement(statement.query)
            kind = "EXPLAIN of a statement that is not a SELECT"
            if explained is not None:
                check_statements(con, explained, what)
                continue
        if kind not in READ_ONLY_STATEMENTS:
            raise UserError(f"{what}: a {kind} statement is not allowed in read-only mode "
                            f"(only {' and '.join(sorted(READ_ONLY_STATEMENTS))} run: no file writes, ATTACH or extensions)")


def explained_statement(sql: str) -> str | None:
    """The statement an EXPLAIN statement wraps (after ANALYZE or an options list), None when none is found."""
    starts = duckdb.tokenize(sql)
    ends = [pos for pos, _ in starts[1:]] + [len(sql)]
    words = [(pos, sql[pos:end].strip().upper()) for (pos, kind), end in zip(starts, ends)
             if kind != duckdb.token_type.comment]  # words[0] is EXPLAIN
    i = 1
    if i < len(words) and words[i][1] in ("ANALYZE", "ANALYSE"):
        i += 1
    elif i < len(words) and words[i][1] == "(":  # EXPLAIN (ANALYZE, FORMAT json) ...
        depth = 0
        while i < len(words):
            depth += {"(": 1, ")": -1}.get(words[i][1], 0)
            i += 1
            if depth == 0:
                break
    return sql[words[i][0]:] if i < len(words) else None


def interruptible(con: duckdb.DuckDBPyConnection, work):
    """Run work() (a DuckDB call) on a worker thread, so that Ctrl-C or SIGTERM reach this thread at once and
    interrupt the query (DuckDB does not return to Python, where signals are handled, until it is done)."""
    done, box = threading.Event(), {}

    def run():
        try:
            box["value"] = work()
        except BaseException as err:  # noqa: BLE001 (handed to the caller's thread, raised there)
            box["error"] = err
        finally:
            done.set()

    threading.Thread(target=run, name="memsim-duckdb", daemon=True).start()
    try:
        while not done.wait(0.25):
            pass
    except BaseException:  # KeyboardInterrupt (Ctrl-C, or SIGTERM as engine.cli raises it)
        con.interrupt()
        done.wait(10)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_query(con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> pl.DataFrame:
    """Run queries/<name>.sql on a connection from engine.dataset.views.connect, with its parameters checked and typed.

    Examples
    --------
    >>> from engine.dataset.views import connect                      # doctest: +SKIP
    >>> run_query(connect("out/default"), "min_gpus", {"seq_len": 4096})  # doctest: +SKIP
    """
    query = read_query(name)
    values = bind(query, params or {})
    check_statements(con, query.sql, f"query {name}")
    try:
        return interruptible(con, lambda: con.sql(query.sql, params=values or None).pl())
    except duckdb.Error as err:
        raise UserError(f"query {name} failed: {first_line(err)}") from None


def run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> pl.DataFrame:
    """Run the user's own SQL over the views; a statement without rows gives an empty frame."""
    check_statements(con, sql, "SQL")

    def work():
        rel = con.sql(sql)
        return pl.DataFrame() if rel is None else rel.pl()

    try:
        return interruptible(con, work)
    except duckdb.Error as err:
        raise UserError(f"SQL failed: {first_line(err)}") from None
