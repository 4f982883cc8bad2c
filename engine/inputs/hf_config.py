"""Read a Hugging Face `config.json` as the model fields of engine/config.py (MODEL_FIELDS).

Each supported `model_type` has one small mapper that names the Hugging Face keys it reads, following the
modules that build the model (transformers' modeling_<type>.py). Categorical fields come back as their
CONFIG.md strings ("swiglu", "rmsnorm", "qkv"), as in data/models.toml. Conventions shared with the catalog:
n_kv_heads is always set; head_dim only where it is not hidden_size / num_attention_heads (always for MLA);
pure mixture-of-experts models have d_ff = 0 (no dense FFN layer).
"""

import json
from pathlib import Path

from engine.errors import UserError


class _Reader:
    """Typed access to one parsed config.json; every failure names the file and the key."""

    def __init__(self, cfg: dict, path: Path):
        self.cfg, self.path = cfg, path

    def fail(self, problem: str):
        raise UserError(f"{self.path}: {problem}")

    def size(self, key: str, default=None, *, zero_ok: bool = False) -> int:
        """A positive integer (or 0 / null where zero_ok); `default` when the key is absent or null."""
        value = self.cfg.get(key)
        if value is None:
            if default is None and not zero_ok:
                self.fail(f"missing key '{key}'")
            return 0 if default is None else default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"'{key}' must be an integer, got {value!r}")
        if value < 0 or (value == 0 and not zero_ok):
            self.fail(f"'{key}' must be positive, got {value}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(f"'{key}' must be true or false, got {value!r}")
        return value


def _attention(r: _Reader) -> dict:
    """Layers, widths, heads and vocabulary under the names Llama-style configs use."""
    h, a = r.size("hidden_size"), r.size("num_attention_heads")
    fields = {
        "n_layers": r.size("num_hidden_layers"),
        "d_model": h,
        "n_heads": a,
        "n_kv_heads": r.size("num_key_value_heads", a),
        "vocab": r.size("vocab_size"),
    }
    head_dim = r.size("head_dim", h // a)
    if head_dim != h // a:  # Gemma (256), Llama 3.2 writes head_dim = h / a explicitly
        fields["head_dim"] = head_dim
    if fields["n_heads"] % fields["n_kv_heads"]:
        r.fail(f"num_attention_heads {a} is not a multiple of num_key_value_heads {fields['n_kv_heads']}")
    return fields


def _no_extra_bias(r: _Reader):
    if r.flag("attention_bias", False) or r.flag("mlp_bias", False):
        r.fail("attention_bias / mlp_bias = true cannot be expressed (linear_bias is none, qkv or all)")


def _llama(r: _Reader, *, qkv_bias: bool = False, tied: bool = False) -> dict:
    """Llama, Mistral, Phi-3 (fused qkv and gate_up: same count), Qwen2 (biases on q, k, v)."""
    _no_extra_bias(r)
    return _attention(r) | {
        "d_ff": r.size("intermediate_size"),
        "ffn_type": "swiglu",
        "tied_embeddings": r.flag("tie_word_embeddings", tied),
        "norm_type": "rmsnorm",
        "linear_bias": "qkv" if qkv_bias else "none",
    }


def _gemma(r: _Reader, *, norms: int) -> dict:
    """Gemma: head_dim 256 by default, GeGLU (3 matrices), tied; Gemma 2 has 4 RMSNorms per block."""
    fields = _llama(r, tied=True)
    head_dim = r.size("head_dim", 256)
    if head_dim != fields["d_model"] // fields["n_heads"]:
        fields["head_dim"] = head_dim
    return fields | {"norms_per_layer": norms}


def _gpt2(r: _Reader) -> dict:
    """GPT-2: Conv1D with biases everywhere, LayerNorm, GeLU MLP of n_inner (default 4h), learned positions."""
    h, a = r.size("n_embd"), r.size("n_head")
    return {
        "n_layers": r.size("n_layer"),
        "d_model": h,
        "n_heads": a,
        "n_kv_heads": a,
        "d_ff": r.size("n_inner", 4 * h),
        "vocab": r.size("vocab_size"),
        "ffn_type": "gelu",
        "tied_embeddings": r.flag("tie_word_embeddings", True),
        "norm_type": "layernorm",
        "linear_bias": "all",
        "n_positions": r.size("n_positions"),
        "dropout": float(r.cfg.get("resid_pdrop", 0.1)),
        "act_fn": "gelu_new" if r.cfg.get("activation_function", "gelu_new") == "gelu_new" else "gelu",
        "fused_projections": True,  # c_attn: one Conv1D for q, k, v
        "softmax_fp32": False,  # GPT2Attention's eager softmax runs in the input dtype
    }


def _mixtral(r: _Reader) -> dict:
    """Mixtral: every block is MoE; intermediate_size is one expert's FFN."""
    fields = _llama(r)
    return fields | {
        "d_ff": 0,
        "n_experts": r.size("num_local_experts"),
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": fields["d_ff"],
    }


def _qwen2_moe(r: _Reader) -> dict:
    """Qwen1.5/Qwen2 MoE: qkv biases, routed experts, one gated shared expert of n * moe_intermediate_size."""
    if r.size("decoder_sparse_step", 1) != 1 or r.cfg.get("mlp_only_layers"):
        r.fail("dense layers between MoE layers (decoder_sparse_step / mlp_only_layers) cannot be expressed")
    moe_d_ff = r.size("moe_intermediate_size")
    shared = r.size("shared_expert_intermediate_size", zero_ok=True)
    if shared % moe_d_ff:
        r.fail(f"shared_expert_intermediate_size {shared} is not a multiple of moe_intermediate_size {moe_d_ff}")
    return _llama(r, qkv_bias=True) | {
        "d_ff": 0,
        "n_experts": r.size("num_experts"),
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": moe_d_ff,
        "n_shared_experts": shared // moe_d_ff,
        "shared_expert_gate": shared > 0,
    }


def _deepseek(r: _Reader) -> dict:
    """DeepSeek-V2/V3: MLA attention (arXiv:2405.04434 sec. 2.1) and DeepSeekMoE after first_k_dense_replace
    dense blocks. V3's multi-token-prediction module (num_nextn_predict_layers) is not counted."""
    _no_extra_bias(r)
    if r.size("moe_layer_freq", 1) != 1:
        r.fail("moe_layer_freq > 1 (dense layers between MoE layers) cannot be expressed")
    fields = _attention(r) | {
        "head_dim": r.size("qk_nope_head_dim"),
        "d_ff": r.size("intermediate_size"),
        "ffn_type": "swiglu",
        "tied_embeddings": r.flag("tie_word_embeddings", False),
        "norm_type": "rmsnorm",
        "q_lora_rank": r.size("q_lora_rank", zero_ok=True),  # null: a full q_proj (V2-Lite)
        "kv_lora_rank": r.size("kv_lora_rank"),
        "qk_rope_head_dim": r.size("qk_rope_head_dim"),
        "v_head_dim": r.size("v_head_dim"),
    }
    n_experts = r.size("n_routed_experts", zero_ok=True)
    if n_experts == 0:
        return fields
    return fields | {
        "n_experts": n_experts,
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": r.size("moe_intermediate_size"),
        "n_shared_experts": r.size("n_shared_experts", zero_ok=True),
        "first_dense_layers": r.size("first_k_dense_replace", zero_ok=True),
    }


MAPPERS = {
    "llama": _llama,
    "mistral": _llama,
    "phi3": lambda r: _llama(r) | {"fused_projections": True},  # qkv_proj, gate_up_proj
    "qwen2": lambda r: _llama(r, qkv_bias=True),
    "gemma": lambda r: _gemma(r, norms=2),
    "gemma2": lambda r: _gemma(r, norms=4),
    "gpt2": _gpt2,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: cannot read Hugging Face config ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
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
    mapper = MAPPERS.get(model_type)
    if mapper is None:
        raise UserError(
            f"{path}: unsupported model_type {model_type!r} — supported: {', '.join(sorted(MAPPERS))}"
        )
    return mapper(_Reader(cfg, path)) | {"family": model_type, "arch": "decoder"}
