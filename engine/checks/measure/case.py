"""Resolve a measurement case: CONFIG.md names, defaults for what is left out, one-line errors.

The model dims must be given (``measure_case`` takes a resolved configuration: the catalog lookup
is the CLI's job). Everything else defaults as below; an empty cell or None also means the default.
Options the harness cannot measure on one device raise UserError naming the option.
"""

from __future__ import annotations

from engine.errors import UserError

REQUIRED = ("n_layers", "d_model", "n_heads", "d_ff", "vocab")
DEFAULTS = {
    "model": "custom", "n_kv_heads": 0, "ffn_type": "swiglu", "tied_embeddings": False, "head_dim": 0,
    "norm_type": None, "linear_bias": None, "n_positions": None, "n_experts": 0,
    "seq_len": 1024, "micro_batch": 1, "grad_accum": 1,
    "precision": "amp_bf16", "optimizer": "adamw", "framework": "pytorch", "checkpointing": "none",
    "dropout": 0.0, "attention": "flash", "lora_rank": 0, "lora_targets": "qv", "base_quant": "none",
    "offload": "none", "n_gpus": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 1, "sp": False, "zero_stage": 0,
}
CHOICES = {
    "ffn_type": ("gelu", "swiglu"),
    "norm_type": ("layernorm", "rmsnorm"),
    "linear_bias": ("none", "qkv", "all"),
    "precision": ("fp32", "amp_bf16", "amp_fp16", "bf16", "fp16"),
    "optimizer": ("adamw", "adam", "sgd", "sgd_momentum", "adafactor", "none"),
    "framework": ("pytorch",),
    "checkpointing": ("none", "full"),
    "attention": ("eager", "sdpa_math", "flash"),
    "lora_targets": ("qv", "attn", "all_linear"),
    "base_quant": ("none",),
    "offload": ("none",),
}
SINGLE_DEVICE = ("n_gpus", "tp", "pp", "cp", "ep", "dp")  # must be 1: one device is measured
INTS = (*REQUIRED, "n_kv_heads", "head_dim", "n_positions", "n_experts", "seq_len", "micro_batch",
        "grad_accum", "lora_rank", "zero_stage", *SINGLE_DEVICE)
BOOLS = ("tied_embeddings", "sp")


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
        if c[k] is not None:
            c[k] = _as_int(k, c[k])
    for k in BOOLS:
        c[k] = _as_bool(k, c[k])
    c["dropout"] = float(c["dropout"])
    gelu = c["ffn_type"] == "gelu"
    c["n_kv_heads"] = c["n_kv_heads"] or c["n_heads"]
    c["norm_type"] = c["norm_type"] or ("layernorm" if gelu else "rmsnorm")
    c["linear_bias"] = c["linear_bias"] or ("all" if gelu else "none")
    c["n_positions"] = c["n_positions"] if c["n_positions"] is not None else (max(1024, c["seq_len"]) if gelu else 0)
    _check(c)
    c.update(implementation(c))
    return c


def implementation(c: dict) -> dict:
    """How the Hugging Face class the harness builds is written (engine.inputs.vocabulary's act_fn, fused_projections,
    softmax_fp32): GPT2LMHeadModel for gelu + layernorm, the Llama/Qwen2 classes otherwise."""
    gpt2 = c["ffn_type"] == "gelu"
    return {"act_fn": "gelu_new" if gpt2 else "silu", "fused_projections": gpt2, "softmax_fp32": not gpt2}


def _check(c: dict) -> None:
    """UserError for an unknown value or an option one device cannot measure."""
    for k, allowed in CHOICES.items():
        if c[k] not in allowed:
            why = "cannot be measured here" if k in ("precision", "optimizer", "framework", "checkpointing",
                                                     "base_quant", "offload") else "is unknown"
            raise UserError(f"{k}={c[k]!r} {why}; accepted: {', '.join(allowed)}")
    for k in SINGLE_DEVICE:
        if c[k] != 1:
            raise UserError(f"{k}={c[k]} cannot be measured: the harness runs one device (all parallel degrees 1)")
    if c["zero_stage"] or c["sp"]:
        raise UserError("zero_stage and sp need several devices: measure with zero_stage=0, sp=false")
    if c["n_experts"]:
        raise UserError("mixture-of-experts models are not measured (n_experts must be 0)")
    if not 0.0 <= c["dropout"] < 1.0:
        raise UserError(f"dropout must be in [0, 1), not {c['dropout']}")
    for k in ("n_layers", "d_model", "n_heads", "d_ff", "vocab", "seq_len", "micro_batch", "grad_accum"):
        if c[k] < 1:
            raise UserError(f"{k} must be at least 1, not {c[k]}")
    if c["n_heads"] % c["n_kv_heads"]:
        raise UserError(f"n_kv_heads={c['n_kv_heads']} must divide n_heads={c['n_heads']}")
