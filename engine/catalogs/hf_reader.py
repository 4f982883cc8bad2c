"""Typed access to a parsed config.json, and the fields most model types share (layers, widths, heads, vocabulary,
biases): engine/catalogs/hf_mappers.py builds each model type's fields from these."""


from pathlib import Path

from engine.catalogs.schema import kv_heads_problem
from engine.errors import UserError
from engine.inputs.model_fields import MAX_DIM
from engine.inputs.vocabulary import shown


class ConfigReader:
    """Typed access to one parsed config.json; every failure names the file and the key.

    `defaults` stands in for keys the file leaves out, as the transformers config class fills them (the
    text_config of a multimodal checkpoint writes only what differs from its class); `where` prefixes the key
    in messages ("text_config.").
    """

    def __init__(self, cfg: dict, path: Path, defaults: dict | None = None, where: str = ""):
        self.cfg, self.path, self.where = (defaults or {}) | cfg, path, where

    def fail(self, problem: str):
        raise UserError(f"{self.path}: {problem}")

    def size(self, key: str, default=None, *, zero_ok: bool = False) -> int:
        """A positive integer (or 0 / null where zero_ok); `default` when the key is absent or null."""
        value, name = self.cfg.get(key), self.where + key
        if value is None:
            if default is None and not zero_ok:
                self.fail(f"missing key '{name}'")
            return 0 if default is None else default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"'{name}' must be an integer, got {shown(value)}")
        if value < 0 or (value == 0 and not zero_ok):
            self.fail(f"'{name}' must be positive, got {shown(value)}")
        if value > MAX_DIM:  # the vocabulary's bound on every dim (engine/inputs/model_fields.py)
            self.fail(f"'{name}' must be at most {MAX_DIM:,}, got {shown(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(f"'{self.where}{key}' must be true or false, got {shown(value)}")
        return value

    def ints(self, key: str) -> list[int] | None:
        """A list of integers (layer indices), or None when the key is absent or null."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.fail(f"'{self.where}{key}' must be a list of integers, got {shown(value)}")
        return value

    def nested(self, key: str, defaults: dict) -> "ConfigReader":
        """The reader of a nested config (a multimodal checkpoint's text_config)."""
        sub = self.cfg.get(key)
        if not isinstance(sub, dict):
            self.fail(f"missing or malformed '{self.where}{key}' (expected a JSON object)")
        return ConfigReader(sub, self.path, defaults, f"{self.where}{key}.")


def attention_fields(r: ConfigReader, head_dim_default: int = 0) -> dict:
    """Layers, widths, heads and vocabulary under the names Llama-style configs use.

    head_dim_default: what the config class puts in head_dim when the file has none (Qwen3: 128); 0 = h / a.
    """
    h, a = r.size("hidden_size"), r.size("num_attention_heads")
    fields = {
        "n_layers": r.size("num_hidden_layers"),
        "d_model": h,
        "n_heads": a,
        "n_kv_heads": r.size("num_key_value_heads", a),
        "vocab": r.size("vocab_size"),
    }
    head_dim = r.size("head_dim", head_dim_default or h // a)
    if head_dim != h // a:  # Gemma (256), Qwen3-0.6B (128 with h / a = 64); Llama 3.2 writes h / a explicitly
        fields["head_dim"] = head_dim
    if kv_heads_problem(fields["n_heads"], fields["n_kv_heads"]):
        r.fail(f"num_attention_heads {a} is not a multiple of num_key_value_heads {fields['n_kv_heads']}")
    return fields


def linear_bias_fields(r: ConfigReader, *, attention_default: bool = False, reads_mlp_bias: bool = False) -> dict:
    """The biases the module builds from `attention_bias` (q, k, v and o) and, where it reads it (Llama),
    `mlp_bias` (the FFN). Only for the types whose modules read them: Mistral, Mixtral and Phi-3 build no bias
    whatever the file says, Qwen2 always q, k, v."""
    attn = r.flag("attention_bias", attention_default)
    mlp = reads_mlp_bias and r.flag("mlp_bias", False)
    if mlp and not attn:
        r.fail("mlp_bias = true without attention_bias cannot be expressed (linear_bias is none, qkv or all)")
    if mlp:
        return {"linear_bias": "all"}
    return {"linear_bias": "qkv", "attn_out_bias": True} if attn else {"linear_bias": "none"}


def dense_fields(r: ConfigReader, *, tied: bool = False, bias: dict | None = None, head_dim_default: int = 0) -> dict:
    """A Llama-style decoder: gated FFN (SwiGLU / GeGLU, 3 matrices), RMSNorm, untied head unless `tied`."""
    return attention_fields(r, head_dim_default) | {
        "d_ff": r.size("intermediate_size"),
        "ffn_type": "swiglu",
        "tied_embeddings": r.flag("tie_word_embeddings", tied),
        "norm_type": "rmsnorm",
        **(bias if bias is not None else {"linear_bias": "none"}),
    }
