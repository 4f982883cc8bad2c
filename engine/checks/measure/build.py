"""Build the Hugging Face model a resolved configuration describes, with no weights materialized.

The dims map onto one of three real architectures (transformers' own modeling code, so the
forward and backward are the ones users train):

    ffn_type  norm_type  linear_bias  ->  class
    gelu      layernorm  all              GPT2LMHeadModel   (GPT2Config, n_inner = d_ff, gelu_new)
    swiglu    rmsnorm    none | all       LlamaForCausalLM  (attention_bias = mlp_bias = (all))
    swiglu    rmsnorm    qkv              Qwen2ForCausalLM  (bias on q, k, v only)

The caller builds under ``FakeTensorMode`` (no memory, no compute); the same code builds real
tensors for the CPU and CUDA checks. LoRA adapters come from peft (``get_peft_model``).
"""

from __future__ import annotations

import torch

from engine.errors import UserError

ATTN_IMPLEMENTATION = {"eager": "eager", "sdpa_math": "sdpa", "flash": "sdpa"}
LORA_TARGETS = {
    "gpt2": {"qv": ["c_attn"], "attn": ["c_attn", "attn.c_proj"], "all_linear": ["c_attn", "c_proj", "c_fc"]},
    "llama": {
        "qv": ["q_proj", "v_proj"],
        "attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "all_linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    },
}
LORA_TARGETS["qwen2"] = LORA_TARGETS["llama"]


def architecture(c: dict) -> str:
    """``'gpt2'``, ``'llama'`` or ``'qwen2'`` for the dims in ``c``, or a UserError naming the mismatch."""
    ffn, norm, bias = c["ffn_type"], c["norm_type"], c["linear_bias"]
    if ffn == "gelu" and norm == "layernorm":
        if bias != "all":
            raise UserError(f"GPT-2 (gelu + layernorm) always has biases: linear_bias must be 'all', not {bias!r}")
        return "gpt2"
    if ffn == "swiglu" and norm == "rmsnorm":
        return "qwen2" if bias == "qkv" else "llama"
    raise UserError(f"no Hugging Face architecture measured for ffn_type={ffn!r} with norm_type={norm!r} "
                    "(accepted: gelu+layernorm -> GPT-2, swiglu+rmsnorm -> Llama/Qwen2)")


def _gpt2_config(c: dict):
    from transformers import GPT2Config

    if c["n_kv_heads"] != c["n_heads"]:
        raise UserError("GPT-2 has no grouped-query attention: n_kv_heads must equal n_heads")
    if c["head_dim"] not in (0, c["d_model"] // c["n_heads"]) or c["d_model"] % c["n_heads"]:
        raise UserError("GPT-2 needs head_dim = d_model / n_heads")
    if c["n_positions"] < c["seq_len"]:
        raise UserError(f"GPT-2 learns n_positions={c['n_positions']} positions: seq_len {c['seq_len']} does not fit")
    p = c["dropout"]
    return GPT2Config(
        n_layer=c["n_layers"], n_embd=c["d_model"], n_head=c["n_heads"], n_inner=c["d_ff"],
        vocab_size=c["vocab"], n_positions=c["n_positions"], resid_pdrop=p, embd_pdrop=p, attn_pdrop=p,
        tie_word_embeddings=c["tied_embeddings"], use_cache=False,
        attn_implementation=ATTN_IMPLEMENTATION[c["attention"]])


def _llama_config(c: dict, arch: str):
    from transformers import LlamaConfig, Qwen2Config

    if c["n_positions"]:
        raise UserError(f"{arch} uses rotary positions: n_positions must be 0, not {c['n_positions']}")
    common = dict(
        vocab_size=c["vocab"], hidden_size=c["d_model"], intermediate_size=c["d_ff"],
        num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"], num_key_value_heads=c["n_kv_heads"],
        max_position_embeddings=max(c["seq_len"], 2048), tie_word_embeddings=c["tied_embeddings"],
        attention_dropout=c["dropout"], use_cache=False, attn_implementation=ATTN_IMPLEMENTATION[c["attention"]])
    if arch == "qwen2":
        cfg = Qwen2Config(**common)
    else:
        bias = c["linear_bias"] == "all"
        cfg = LlamaConfig(**common, attention_bias=bias, mlp_bias=bias)
    cfg.head_dim = c["head_dim"] or c["d_model"] // c["n_heads"]
    return cfg


def build_model(c: dict, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The training-mode model for ``c`` with parameters created in ``dtype``, LoRA applied.

    Parameters are created in ``dtype`` (as ``from_pretrained(dtype=...)`` does, through the default
    dtype), since ``module.to(dtype)`` cannot swap fake parameters. The rotary ``inv_freq`` buffers
    stay fp32 (transformers computes them in float). peft's default ``autocast_adapter_dtype=True``
    keeps LoRA adapters in fp32 over a half-precision base, as users get it.

    Build errors inside transformers or peft (e.g. heads that do not divide d_model) become a
    one-line UserError rather than a traceback.
    """
    from transformers import GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM

    arch = architecture(c)
    try:
        cfg = _gpt2_config(c) if arch == "gpt2" else _llama_config(c, arch)
        cls = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM}[arch]
        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = cls(cfg)
        finally:
            torch.set_default_dtype(old)
        if c["checkpointing"] == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if c["lora_rank"] > 0:
            model = _add_lora(model, c, arch)
    except UserError:
        raise
    except Exception as e:  # transformers/peft reject the dims: report, do not crash
        why = " ".join(str(e).split())[:300]
        raise UserError(f"transformers cannot build {arch} with these dims: {why}") from None
    model.train()
    return model


def _add_lora(model: torch.nn.Module, c: dict, arch: str) -> torch.nn.Module:
    """Wrap ``model`` with peft LoRA adapters of rank ``lora_rank`` on ``lora_targets``; base frozen."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=c["lora_rank"], lora_alpha=2 * c["lora_rank"], lora_dropout=0.0, bias="none",
                     target_modules=LORA_TARGETS[arch][c["lora_targets"]], fan_in_fan_out=arch == "gpt2")
    return get_peft_model(model, cfg)


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated decoder blocks, in order (GPT2Block, LlamaDecoderLayer, Qwen2DecoderLayer)."""
    names = ("GPT2Block", "LlamaDecoderLayer", "Qwen2DecoderLayer")
    return [m for m in model.modules() if type(m).__name__ in names]
