"""The model and GPU catalogs (data/models.toml, data/gpus.toml): load, check, resolve names.

Each TOML table is one entry, keyed as CONFIG.md says (`llama-3.1-8b`, `h100-sxm-80gb`). Loading checks every
entry against a schema (known fields only, required fields, types, allowed strings) and fails with one line
naming the file, the entry and the field. Names resolve case-insensitively through keys and `aliases`; a model
may also be a path to a Hugging Face config.json (engine.catalogs.hf_config).
"""

import difflib
import functools
import hashlib
import tomllib
from pathlib import Path

import numpy as np

from engine import DATA_DIR
from engine.catalogs.hf_config import model_from_hf_config
from engine.catalogs.hub import model_from_hub_cache
from engine.catalogs.schema import check_gpu, check_model
from engine.errors import UserError
from engine.inputs.model_fields import MODEL_FIELDS
from engine.inputs.vocabulary import empty_records, parse, spell

MODELS_PATH = DATA_DIR / "models.toml"
GPUS_PATH = DATA_DIR / "gpus.toml"


def parse_catalog(path: Path, kind: str) -> dict[str, dict]:
    """Entries of one catalog file, each checked against its schema; names (keys, aliases) must be unique.

    Parameters
    ----------
    path : Path
        A TOML file with one table per entry.
    kind : {"model", "gpu"}
        Which schema the entries follow.

    Returns
    -------
    dict[str, dict]
        Key -> entry as written, in file order.
    """
    check = {"model": check_model, "gpu": check_gpu}[kind]
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: TOML's errors, and integers beyond Python's 4,300 digits
        raise UserError(f"{path}: cannot read catalog: {e}") from None
    owner = {}  # every lowercase name (key or alias) -> its key
    for key, entry in data.items():
        where = f"{Path(path).name} [{key}]"
        if not isinstance(entry, dict):
            raise UserError(f"{where}: expected a table, got {entry!r}")
        if key != key.lower() or " " in key:
            raise UserError(f"{where}: keys are lowercase words joined by '-'")
        check(where, entry)
        for name in [key, *entry.get("aliases", [])]:
            name = name.lower()
            if owner.setdefault(name, key) != key:
                raise UserError(f"{where}: name '{name}' already belongs to [{owner[name]}]")
    return data


@functools.cache
def load_models() -> dict[str, dict]:
    """The model catalog, checked: key -> entry as written in data/models.toml (cached; do not mutate).

    Examples
    --------
    >>> load_models()["llama-2-7b"]["d_ff"]
    11008
    """
    return parse_catalog(MODELS_PATH, "model")


@functools.cache
def load_gpus() -> dict[str, dict]:
    """The GPU catalog, checked: key -> entry as written in data/gpus.toml (cached; do not mutate).

    Examples
    --------
    >>> load_gpus()["h100-sxm-80gb"]["hbm_bytes"]
    85045477376
    """
    return parse_catalog(GPUS_PATH, "gpu")


def catalog_version() -> str:
    """A short content hash of both catalog files (12 hex digits), for the Parquet footer.

    Examples
    --------
    >>> len(catalog_version())
    12
    """
    digest = hashlib.sha256(MODELS_PATH.read_bytes() + b"\0" + GPUS_PATH.read_bytes())
    return digest.hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------- names


def _index(entries: dict) -> dict[str, str]:
    return {n.lower(): key for key, e in entries.items() for n in [key, *e.get("aliases", [])]}


def _nearest(name: str, entries: dict) -> tuple[list[str], bool]:
    """Keys nearest to `name` and whether `name` is ambiguous (a prefix of several keys).

    Keys that start with the name come first, then keys sharing its first word, each by similarity.
    """
    index = _index(entries)
    prefix = [k for k in entries if k.startswith(name)]
    if len(prefix) > 1:
        return prefix, True
    head = name.split("-")[0]
    ratio = {k: 0.0 for k in entries}
    for n, key in index.items():
        ratio[key] = max(ratio[key], difflib.SequenceMatcher(None, name, n).ratio())
    ranked = sorted(entries, key=lambda k: (k not in prefix, k.split("-")[0] != head, -ratio[k]))
    near = [k for k in ranked if k in prefix or k.split("-")[0] == head or ratio[k] >= 0.6]
    return near[:3], False


def _resolve(name: str, entries: dict) -> str | None:
    """The key `name` stands for (case-insensitive key or alias), or None."""
    return _index(entries).get(str(name).strip().lower())


def _unknown(kind: str, name: str, entries: dict) -> UserError:
    if not str(name).strip():
        return UserError(f"empty {kind} name — give a catalog key (e.g. {next(iter(entries))})")
    near, ambiguous = _nearest(str(name).strip().lower(), entries)
    what = "ambiguous" if ambiguous else "unknown"
    hint = f" — did you mean: {', '.join(near)}?" if near else f" — no close match among the {len(entries)} {kind}s"
    return UserError(f"{what} {kind} '{name}'{hint}")


def resolve_model(name: str) -> dict:
    """The model a name stands for: a catalog key, an alias, or a path to a Hugging Face config.json.

    Parameters
    ----------
    name : str
        ``llama-3.1-8b``, ``meta-llama/Llama-3.1-8B`` (an alias), ``path/to/config.json`` or a model directory.
        A Hub id the catalog does not know is read from the local Hugging Face cache when downloaded there.

    Returns
    -------
    dict
        A copy of the entry's fields plus ``model`` (the catalog key, or the path as given).

    Raises
    ------
    UserError
        Unknown or ambiguous name, with the nearest keys; or a bad config.json.

    Examples
    --------
    >>> resolve_model("Llama-2-7B")["model"]
    'llama-2-7b'
    """
    models = load_models()
    key = _resolve(name, models)
    if key is not None:
        return {"model": key} | models[key]
    path = Path(name)
    if path.is_file() or (path.is_dir() and (path / "config.json").is_file()):
        return {"model": str(name), "source": str(path)} | model_from_hf_config(path)
    if (cached := model_from_hub_cache(name)) is not None:  # a Hub id downloaded before (engine.catalogs.hub)
        return {"model": str(name)} | cached
    if path.suffix == ".json":
        raise UserError(f"no such model config file: {name}")
    raise _unknown("model", name, models)


def resolve_gpu(name: str) -> dict:
    """The GPU a name stands for: a catalog key or alias, case-insensitive.

    Parameters
    ----------
    name : str
        ``h100-sxm-80gb``, or an alias such as ``h100`` or ``a100-80gb``.

    Returns
    -------
    dict
        A copy of the entry plus ``gpu`` (the key).

    Raises
    ------
    UserError
        Unknown or ambiguous name, with the nearest keys.

    Examples
    --------
    >>> resolve_gpu("H100")["gpu"]
    'h100-sxm-80gb'
    """
    gpus = load_gpus()
    key = _resolve(name, gpus)
    if key is None:
        raise _unknown("gpu", name, gpus)
    return {"gpu": key} | gpus[key]


# ---------------------------------------------------------------------------------------------------- records


def model_fields(entry: dict) -> dict:
    """Every MODEL_FIELDS value of an entry, defaults filled in (categorical ones as CONFIG.md strings).

    Examples
    --------
    >>> model_fields(load_models()["gpt2"])["norms_per_layer"]
    2
    """
    return {f.name: entry.get(f.name, spell(f.name, f.default)) for f in MODEL_FIELDS}


def model_record(entry: dict) -> np.record:
    """One engine.inputs.vocabulary.RECORD holding the entry's model fields (and dropout); every other input at its default.

    Examples
    --------
    >>> from engine.model.params import param_count
    >>> int(param_count(model_record(load_models()["llama-2-7b"])))
    6738415616
    """
    rec = empty_records(1)[0]
    for name, value in model_fields(entry).items():
        rec[name] = parse(name, value)
    if "dropout" in entry:
        rec["dropout"] = entry["dropout"]
    return rec
