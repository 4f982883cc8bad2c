"""Resolve a measurement case: CONFIG.md names, the vocabulary's defaults, one-line errors.

The model dims must be given (``measure_case`` takes a resolved configuration: the catalog lookup
is the CLI's job). Every other input defaults as engine/inputs/vocabulary.py says, the same defaults
as explain, estimate and sweep; an empty cell or None also means the default. What the harness can
measure is decided where it is implemented: ``parallel.check`` for layouts, ``recipes.check`` for
the training recipe; anything else unsupported raises UserError here, naming the option.
"""

from __future__ import annotations

from engine.errors import UserError
from engine.inputs.codes import IntEnum, name_of, names
from engine.inputs.vocabulary import INPUT_FIELDS

REQUIRED = ("n_layers", "d_model", "n_heads", "d_ff", "vocab")
# Model fields the harness derives from the architecture when left out (see resolve()).
DERIVED = ("n_kv_heads", "norm_type", "linear_bias", "n_positions", "act_fn", "fused_projections", "softmax_fp32")


def _spelled(field) -> object:
    kind = field.kind
    if isinstance(kind, type) and issubclass(kind, IntEnum):
        return name_of(kind(field.default))
    return field.default


DEFAULTS = {f.name: _spelled(f) for f in INPUT_FIELDS if f.name not in ("gpu", *DERIVED)} | {"model": "custom"}
CHOICES = {f.name: tuple(names(f.kind)) for f in INPUT_FIELDS
           if isinstance(f.kind, type) and issubclass(f.kind, IntEnum)}
INTS = tuple(f.name for f in INPUT_FIELDS if f.kind == "int")
BOOLS = tuple(f.name for f in INPUT_FIELDS if f.kind == "bool")
FLOATS = tuple(f.name for f in INPUT_FIELDS if f.kind == "float")
# What no path of the harness measures yet (each needs code that runs it: a library or a kernel).
# precision='fp8' runs torchao's Float8Linear (recipes.check says when it cannot); base_quant nf4 / nf4_nodq runs
# bitsandbytes' Linear4bit (quantized.check).
NOT_MEASURED = {"optimizer": ("adamw_8bit", "lion"), "base_quant": ("int8",),
                "framework": ("deepspeed", "megatron")}


def _empty(v: object) -> bool:
    return v is None or (isinstance(v, str) and v.strip() == "") or v != v  # NaN from a CSV reader


def _as_bool(name: str, v: object) -> bool:
    if isinstance(v, str):
        if v.strip().lower() in ("true", "1", "yes"):
            return True
        if v.strip().lower() in ("false", "0", "no"):
            return False
        raise UserError(f"{name} must be true or false, not {v!r}")
    return bool(v)


def _as_int(name: str, v: object) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be an integer, not {v!r}") from None
    if f != int(f):
        raise UserError(f"{name} must be an integer, not {v!r}")
    return int(f)


def resolve(case: dict) -> dict:
    """``case`` with defaults filled, types coerced and every value checked; a new dict.

    Examples
    --------
    >>> resolve({"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab": 128})["n_kv_heads"]
    4
    """
    c = {k: v for k, v in case.items() if not _empty(v)}
    missing = [k for k in REQUIRED if k not in c]
    if missing:
        raise UserError(f"measuring needs the model dims; missing: {', '.join(missing)}")
    for k, v in DEFAULTS.items():
        c.setdefault(k, v)
    for k in INTS:
        if c.get(k) is not None:
            c[k] = _as_int(k, c[k])
    for k in BOOLS:
        if k in c:
            c[k] = _as_bool(k, c[k])
    for k in FLOATS:
        c[k] = float(c[k])
    gelu = c["ffn_type"] == "gelu"
    c["n_kv_heads"] = _as_int("n_kv_heads", c.get("n_kv_heads") or 0) or c["n_heads"]
    c["norm_type"] = c.get("norm_type") or ("layernorm" if gelu else "rmsnorm")
    c["linear_bias"] = c.get("linear_bias") or ("all" if gelu else "none")
    n_positions = c.get("n_positions")
    c["n_positions"] = _as_int("n_positions", n_positions) if n_positions is not None else (max(1024, c["seq_len"]) if gelu else 0)
    c["n_gpus"] = c["n_gpus"] or (c["dp"] or 1) * c["tp"] * c["pp"] * c["cp"]
    c["dp"] = c["dp"] or max(1, c["n_gpus"] // (c["tp"] * c["pp"] * c["cp"]))
    _check(c)
    c.update(implementation(c))
    return c


def implementation(c: dict) -> dict:
    """How the Hugging Face class the harness builds is written (the vocabulary's act_fn, fused_projections,
    softmax_fp32): GPT2LMHeadModel for gelu + layernorm, the Llama/Qwen2 classes otherwise."""
    gpt2 = c["ffn_type"] == "gelu"
    return {"act_fn": "gelu_new" if gpt2 else "silu", "fused_projections": gpt2, "softmax_fp32": not gpt2}


def _check(c: dict) -> None:
    """UserError for an unknown value or an option no path of the harness measures."""
    from engine.checks.measure import parallel, quantized, recipes

    for k, allowed in CHOICES.items():
        if k in c and c[k] not in allowed:
            raise UserError(f"{k}={c[k]!r} is unknown; accepted: {', '.join(allowed)}")
    for k, refused in NOT_MEASURED.items():
        if c[k] in refused:
            raise UserError(f"{k}={c[k]!r} cannot be measured here (no code path runs it on this machine)")
    if not 0.0 <= c["dropout"] < 1.0:
        raise UserError(f"dropout must be in [0, 1), not {c['dropout']}")
    if not c["lm_head"]:  # an encoder: BertForSequenceClassification, full training of one GPU's plain step
        _check_encoder(c)
    for k in ("n_layers", "d_model", "n_heads", "d_ff", "vocab", "seq_len", "micro_batch", "grad_accum"):
        if c[k] < 1:
            raise UserError(f"{k} must be at least 1, not {c[k]}")
    if c["n_heads"] % c["n_kv_heads"]:
        raise UserError(f"n_kv_heads={c['n_kv_heads']} must divide n_heads={c['n_heads']}")
    parallel.check(c)
    recipes.check(c)
    quantized.check(c)


ENCODER_DEFAULTS = {"n_gpus": 1, "lora_rank": 0, "base_quant": "none", "loss_impl": "standard", "outputs_held": False,
                    "outputs_fp32": False, "shifted_logits": False, "compile": False, "activation_offload": False,
                    "optimizer_in_backward": False}


def _check_encoder(c: dict) -> None:
    """An encoder (lm_head = false) is measured as BERT with a 2-label head on one GPU, fully trained, with the plain
    step: the recipe knobs of the LM head's loss and the other paths build causal LMs."""
    for k, plain in ENCODER_DEFAULTS.items():
        if k in c and c[k] != plain:
            raise UserError(f"an encoder (lm_head = false) is measured with {k} = {plain!r} (its plain one-GPU "
                            f"training step), not {c[k]!r}")
