"""Build the Hugging Face model a resolved configuration describes, with no weights materialized.

The dims map onto one of three real architectures (transformers' own modeling code, so the
forward and backward are the ones users train):

    ffn_type  norm_type  linear_bias  ->  class
    gelu      layernorm  all              GPT2LMHeadModel   (GPT2Config, n_inner = d_ff, gelu_new)
    gelu      layernorm  all, no LM head  BertForSequenceClassification (BertConfig, 2 labels: an encoder)
    swiglu    rmsnorm    none | all       LlamaForCausalLM  (attention_bias = mlp_bias = (all))
    swiglu    rmsnorm    qkv              Qwen2ForCausalLM  (bias on q, k, v only)

Mixture of experts (``n_experts`` > 0, swiglu + rmsnorm), by the fields that tell the families apart:

    kv_lora_rank > 0        DeepseekV3ForCausalLM  (MLA; n_shared_experts shared, first_dense_layers dense)
    shared_expert_gate      Qwen2MoeForCausalLM    (one gated shared expert of n_shared_experts * moe_d_ff)
    qk_norm                 Qwen3MoeForCausalLM    (q/k RMSNorm per head, no shared expert)
    otherwise               MixtralForCausalLM     (every block MoE, no shared expert)

transformers runs the experts through ``grouped_mm_experts_forward`` (its default ``experts_implementation``).

The caller builds under ``FakeTensorMode`` (no memory, no compute); the same code builds real
tensors for the CPU and CUDA checks. LoRA adapters come from peft (``get_peft_model``); a quantized base
(``base_quant``) is bitsandbytes' Linear4bit in the decoder blocks (quantized.py).
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
MODEL_CLASS = {"gpt2": "GPT2LMHeadModel", "bert": "BertForSequenceClassification", "llama": "LlamaForCausalLM",
               "qwen2": "Qwen2ForCausalLM",
               "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
               "qwen3_moe": "Qwen3MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}
BLOCKS = ("GPT2Block", "BertLayer", "LlamaDecoderLayer", "Qwen2DecoderLayer", "MixtralDecoderLayer",
          "Qwen2MoeDecoderLayer", "Qwen3MoeDecoderLayer", "DeepseekV3DecoderLayer")


MOE_ARCHITECTURES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3")


def architecture(c: dict) -> str:
    """``'gpt2'``, ``'llama'``, ``'qwen2'`` or an MoE family for the dims in ``c``, or a UserError naming the
    mismatch."""
    ffn, norm, bias = c["ffn_type"], c["norm_type"], c["linear_bias"]
    if c.get("n_experts", 0) > 0:
        return _moe_architecture(c)
    if ffn == "gelu" and norm == "layernorm":
        if bias != "all":
            raise UserError(f"GPT-2 and BERT (gelu + layernorm) always have biases: linear_bias must be 'all', not "
                            f"{bias!r}")
        return "gpt2" if c.get("lm_head", True) else "bert"
    if not c.get("lm_head", True):
        raise UserError("an encoder (lm_head = false) is measured as BERT: ffn_type='gelu' with norm_type='layernorm'")
    if ffn == "swiglu" and norm == "rmsnorm":
        return "qwen2" if bias == "qkv" else "llama"
    raise UserError(f"no Hugging Face architecture measured for ffn_type={ffn!r} with norm_type={norm!r} "
                    "(accepted: gelu+layernorm -> GPT-2, swiglu+rmsnorm -> Llama/Qwen2)")


def _moe_architecture(c: dict) -> str:
    """The MoE family the fields describe (see module docstring)."""
    if c["ffn_type"] != "swiglu" or c["norm_type"] != "rmsnorm":
        raise UserError("mixture-of-experts models are measured with ffn_type='swiglu' and norm_type='rmsnorm'")
    if c.get("top_k", 0) < 1 or c.get("moe_d_ff", 0) < 1:
        raise UserError("a mixture-of-experts model needs top_k >= 1 and moe_d_ff >= 1")
    if c.get("kv_lora_rank", 0) > 0:
        return "deepseek_v3"
    if c.get("shared_expert_gate"):
        return "qwen2_moe"
    if c.get("n_shared_experts", 0):
        raise UserError("shared experts are measured with DeepSeek (kv_lora_rank > 0) or Qwen2-MoE "
                        "(shared_expert_gate=true)")
    if c.get("first_dense_layers", 0) and not c.get("qk_norm"):
        raise UserError("Mixtral has no dense layers: first_dense_layers must be 0")
    return "qwen3_moe" if c.get("qk_norm") else "mixtral"


def _rotary_decoder_fields(c: dict, arch: str, min_positions: int) -> dict:
    """The transformers config fields every rotary decoder family takes alike (Llama, Qwen2 and the MoE families),
    the position table at least ``min_positions`` long; n_positions (GPT-2's learned table) is refused."""
    if c["n_positions"]:
        raise UserError(f"{arch} uses rotary positions: n_positions must be 0, not {c['n_positions']}")
    return {
        "vocab_size": c["vocab"], "hidden_size": c["d_model"], "num_hidden_layers": c["n_layers"],
        "num_attention_heads": c["n_heads"], "num_key_value_heads": c["n_kv_heads"],
        "max_position_embeddings": max(c["seq_len"], min_positions), "tie_word_embeddings": c["tied_embeddings"],
        "attention_dropout": c["dropout"], "use_cache": False,
        "attn_implementation": ATTN_IMPLEMENTATION[c["attention"]]}


def _moe_config(c: dict, arch: str):
    """The transformers config of an MoE family (``_moe_architecture``) for the fields in ``c``."""
    import transformers as tf

    head_dim = c["head_dim"] or c["d_model"] // c["n_heads"]
    dense = list(range(c.get("first_dense_layers", 0)))
    common = {**_rotary_decoder_fields(c, arch, min_positions=4096), "num_experts_per_tok": c["top_k"]}
    if arch == "mixtral":
        cfg = tf.MixtralConfig(**common, intermediate_size=c["moe_d_ff"], num_local_experts=c["n_experts"])
    elif arch == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(**common, intermediate_size=c["d_ff"] or c["moe_d_ff"],
                                moe_intermediate_size=c["moe_d_ff"], num_experts=c["n_experts"],
                                shared_expert_intermediate_size=c.get("n_shared_experts", 0) * c["moe_d_ff"],
                                mlp_only_layers=dense, qkv_bias=c["linear_bias"] == "qkv")
    elif arch == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(**common, intermediate_size=c["d_ff"] or c["moe_d_ff"],
                                moe_intermediate_size=c["moe_d_ff"], num_experts=c["n_experts"],
                                mlp_only_layers=dense, attention_bias=c["linear_bias"] == "all")
    else:  # deepseek_v3: one routing group (n_group = topk_group = 1), as the small DeepSeek-V2-Lite routes
        common["num_key_value_heads"] = c["n_heads"]
        cfg = tf.DeepseekV3Config(**common, intermediate_size=c["d_ff"] or c["moe_d_ff"],
                                  moe_intermediate_size=c["moe_d_ff"], n_routed_experts=c["n_experts"],
                                  n_shared_experts=c.get("n_shared_experts", 0),
                                  first_k_dense_replace=len(dense), q_lora_rank=c.get("q_lora_rank") or None,
                                  kv_lora_rank=c["kv_lora_rank"], qk_rope_head_dim=c["qk_rope_head_dim"],
                                  qk_nope_head_dim=head_dim, v_head_dim=c["v_head_dim"] or head_dim,
                                  n_group=1, topk_group=1)
        return cfg
    cfg.head_dim = head_dim
    return cfg


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


def _bert_config(c: dict):
    """BERT's encoder with a 2-label classification head (the HF docs' BertForSequenceClassification runs)."""
    from transformers import BertConfig

    if c["n_kv_heads"] != c["n_heads"] or c["d_model"] % c["n_heads"]:
        raise UserError("BERT has plain multi-head attention: n_kv_heads = n_heads, head_dim = d_model / n_heads")
    if c["n_positions"] < c["seq_len"]:
        raise UserError(f"BERT learns n_positions={c['n_positions']} positions: seq_len {c['seq_len']} does not fit")
    p = c["dropout"]
    return BertConfig(vocab_size=c["vocab"], hidden_size=c["d_model"], num_hidden_layers=c["n_layers"],
                      num_attention_heads=c["n_heads"], intermediate_size=c["d_ff"], hidden_act="gelu",
                      hidden_dropout_prob=p, attention_probs_dropout_prob=p, max_position_embeddings=c["n_positions"],
                      num_labels=2, attn_implementation=ATTN_IMPLEMENTATION[c["attention"]])


def _llama_config(c: dict, arch: str):
    from transformers import LlamaConfig, Qwen2Config

    common = {**_rotary_decoder_fields(c, arch, min_positions=2048), "intermediate_size": c["d_ff"]}
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
    import transformers as tf

    arch = architecture(c)
    try:
        if arch in MOE_ARCHITECTURES:
            cfg = _moe_config(c, arch)
        else:
            cfg = {"gpt2": _gpt2_config, "bert": _bert_config}.get(arch, lambda c: _llama_config(c, arch))(c)
        cls = getattr(tf, MODEL_CLASS[arch])
        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            model = cls(cfg)
        finally:
            torch.set_default_dtype(old)
        if c["checkpointing"] == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if c.get("base_quant", "none") != "none":
            from engine.checks.measure.quantized import replace_linears

            replace_linears(model, transformer_blocks(model), c, dtype)
        if c["lora_rank"] > 0:
            model = _add_lora(model, c, arch, dtype)
    except UserError:
        raise
    except Exception as e:  # transformers/peft reject the dims: report, do not crash
        why = " ".join(str(e).split())[:300]
        raise UserError(f"transformers cannot build {arch} with these dims: {why}") from None
    model.train()
    return model


def _add_lora(model: torch.nn.Module, c: dict, arch: str, dtype: torch.dtype) -> torch.nn.Module:
    """Wrap ``model`` with peft LoRA adapters of rank ``lora_rank`` on ``lora_targets``; base frozen.

    ``lora_dtype``: fp32 is peft's default (``autocast_adapter_dtype=True`` keeps the adapters in fp32 over a 16-bit
    base); compute passes False and gives the adapters the model's ``dtype``, as peft does by moving them to the base
    layer's dtype (lora/layer.py ``_move_adapter_to_device_of_base_layer``), a move it skips for adapters built on
    the meta device."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    cfg = LoraConfig(r=c["lora_rank"], lora_alpha=2 * c["lora_rank"], lora_dropout=c.get("lora_dropout", 0.0), bias="none",
                     target_modules=LORA_TARGETS[arch][c["lora_targets"]], fan_in_fan_out=arch == "gpt2")
    fp32_adapters = c.get("lora_dtype", "fp32") == "fp32"
    model = get_peft_model(model, cfg, autocast_adapter_dtype=fp32_adapters)
    if not fp32_adapters:
        for layer in (m for m in model.modules() if isinstance(m, LoraLayer)):
            layer.lora_A.to(dtype)
            layer.lora_B.to(dtype)
    return model


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated decoder blocks, in order (``BLOCKS``: GPT2Block, LlamaDecoderLayer, ...), also once FSDP2's
    ``fully_shard`` has renamed their class ``FSDP<name>``."""
    return [m for m in model.modules() if type(m).__name__.removeprefix("FSDP") in BLOCKS]
