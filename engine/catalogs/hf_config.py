"""Read a Hugging Face `config.json` as the model fields of engine/config.py (MODEL_FIELDS).

Each supported `model_type` has one small mapper that names the Hugging Face keys it reads, following the
modules that build the model (transformers' modeling_<type>.py). Categorical fields come back as their
CONFIG.md strings ("swiglu", "rmsnorm", "qkv"), as in data/models.toml. Conventions shared with the catalog:
n_kv_heads is always set; head_dim only where it is not hidden_size / num_attention_heads (always for MLA);
pure mixture-of-experts models have d_ff = 0 (no dense FFN layer).
"""

import json
from pathlib import Path

from engine.catalogs.hf_mappers import MAPPERS
from engine.catalogs.hf_reader import ConfigReader
from engine.errors import UserError, read_user_text


def _read_json(path: Path) -> dict:
    text = read_user_text(path, "Hugging Face config")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply to be a config.json") from None
    except ValueError:  # an integer of more digits than Python converts (4,300): no size is that large
        raise UserError(f"{path}: a number too large to be a model size") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(cfg).__name__}")
    return cfg


def model_from_hf_config(path) -> dict:
    """Model fields from a Hugging Face ``config.json``.

    Parameters
    ----------
    path : str or Path
        The ``config.json`` file, or a directory holding one (a downloaded model).

    Returns
    -------
    dict
        MODEL_FIELDS names (categorical ones as CONFIG.md strings), plus ``family`` (the ``model_type``),
        ``arch`` ("decoder") and, for GPT-2, ``dropout``. ``n_params`` is not set: the count follows from the dims.

    Raises
    ------
    UserError
        One line naming the file and the problem: unreadable, invalid JSON, unsupported ``model_type``,
        a missing key, a non-positive size, or an architecture the fields cannot express.

    Examples
    --------
    >>> model_from_hf_config("tests/fixtures/hf_configs/gpt2.json")["d_model"]
    768
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    cfg = _read_json(path)
    model_type = cfg.get("model_type")
    mapper = MAPPERS.get(model_type) if isinstance(model_type, str) else None
    if mapper is None:
        raise UserError(
            f"{path}: unsupported model_type {model_type!r} — supported: {', '.join(sorted(MAPPERS))}"
        )
    try:
        fields = mapper(ConfigReader(cfg, path))
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError) as err:
        raise UserError(f"{path}: a value of the wrong type or range for model_type {model_type!r} "
                        f"({type(err).__name__}: {str(err)[:120]})") from None  # what the typed reader does not check
    return fields | {"family": model_type, "arch": "decoder"}
