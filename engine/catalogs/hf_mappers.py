"""One small mapper per supported config.json `model_type`, naming the Hugging Face keys it reads and following
the module that builds the model (transformers' modeling_<type>.py); MAPPERS dispatches on model_type."""





from engine.catalogs.hf_reader import attention_fields, dense_fields, linear_bias_fields, ConfigReader


def _llama(r: ConfigReader) -> dict:
    """Llama: attention_bias on q, k, v, o; mlp_bias on the FFN (modeling_llama.py)."""
    return dense_fields(r, bias=linear_bias_fields(r, reads_mlp_bias=True))


def _gemma(r: ConfigReader, *, norms: int) -> dict:
    """Gemma: head_dim 256 by default, GeGLU (3 matrices), tied; Gemma 2 has 4 RMSNorms per block."""
    return dense_fields(r, tied=True, bias=linear_bias_fields(r), head_dim_default=256) | {"norms_per_layer": norms}


def _gpt2(r: ConfigReader) -> dict:
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


def _mixtral(r: ConfigReader) -> dict:
    """Mixtral: every block is MoE; intermediate_size is one expert's FFN."""
    fields = dense_fields(r)
    return fields | {
        "d_ff": 0,
        "n_experts": r.size("num_local_experts"),
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": fields["d_ff"],
    }


def _sparse_layers(r: ConfigReader, n_layers: int, step: int, dense_layers: list[int] | None) -> dict:
    """moe_layer_step and first_dense_layers for MoE blocks at the layers i not in `dense_layers` with
    (i + 1) % step == 0 (modeling_qwen2_moe.py / modeling_qwen3_moe.py decoder_sparse_step, mlp_only_layers);
    dense_layers must be the leading layers 0..k-1, the only dense set the fields express."""
    dense_layers = sorted(set(dense_layers or []))
    if dense_layers != list(range(len(dense_layers))) or len(dense_layers) > n_layers:
        r.fail(f"mlp_only_layers {dense_layers} cannot be expressed (only the leading layers 0..k-1 can be dense)")
    fields = {"moe_layer_step": step} if step > 1 else {}
    return fields | ({"first_dense_layers": len(dense_layers)} if dense_layers else {})


def _qwen_moe(r: ConfigReader, fields: dict, *, shared: bool) -> dict:
    """The MoE part of Qwen2-MoE / Qwen3-MoE: routed experts of moe_intermediate_size at the layers
    decoder_sparse_step and mlp_only_layers pick, dense FFNs of intermediate_size elsewhere; Qwen2-MoE adds one
    gated shared expert of shared_expert_intermediate_size (a multiple of moe_intermediate_size)."""
    n_experts = r.size("num_experts", r.size("num_local_experts", zero_ok=True), zero_ok=True)
    if n_experts == 0:  # every layer a dense Qwen*MoeMLP(intermediate_size)
        return fields
    layers = _sparse_layers(r, fields["n_layers"], r.size("decoder_sparse_step", 1), r.ints("mlp_only_layers"))
    moe_d_ff = r.size("moe_intermediate_size")
    fields = fields | layers | {
        "d_ff": fields["d_ff"] if layers else 0,  # pure MoE: no dense FFN (catalog convention)
        "n_experts": n_experts,
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": moe_d_ff,
    }
    if not shared:
        return fields
    shared_d_ff = r.size("shared_expert_intermediate_size", zero_ok=True)
    if shared_d_ff % moe_d_ff:
        r.fail(f"shared_expert_intermediate_size {shared_d_ff} is not a multiple of moe_intermediate_size {moe_d_ff}")
    # Qwen2MoeSparseMoeBlock builds shared_expert_gate (h -> 1) even when the shared expert has size 0
    return fields | {"n_shared_experts": shared_d_ff // moe_d_ff, "shared_expert_gate": True}


def _qwen2_moe(r: ConfigReader) -> dict:
    """Qwen1.5/Qwen2 MoE: qkv biases (qkv_bias), routed experts, one gated shared expert."""
    qkv = {"linear_bias": "qkv" if r.flag("qkv_bias", True) else "none"}
    return _qwen_moe(r, dense_fields(r, bias=qkv), shared=True)


def _qwen3(r: ConfigReader, head_dim_default: int = 128) -> dict:
    """Qwen3: Llama with an RMSNorm of head_dim on every q and k head (modeling_qwen3.py), attention_bias on
    q, k, v, o; Qwen3Config's head_dim is 128 when the file has none."""
    return dense_fields(r, bias=linear_bias_fields(r), head_dim_default=head_dim_default) | {"qk_norm": True}


def _qwen3_moe(r: ConfigReader) -> dict:
    """Qwen3-MoE: Qwen3 attention (Qwen3MoeConfig has no head_dim default: h / a), routed experts without a
    shared expert (modeling_qwen3_moe.py)."""
    return _qwen_moe(r, _qwen3(r, head_dim_default=0), shared=False)


def _olmo2(r: ConfigReader) -> dict:
    """OLMo 2: q/k RMSNorms over all heads (a*d and g*d), norms after attention and after the FFN, none
    before (modeling_olmo2.py: post_attention_layernorm, post_feedforward_layernorm)."""
    return dense_fields(r, bias=linear_bias_fields(r)) | {"qk_norm": True, "qk_norm_all_heads": True}


# Gemma3TextConfig's defaults (transformers configuration_gemma3.py): a Gemma 3 multimodal checkpoint's
# text_config lists only what differs from them (tests/test_hf_models.py checks them against the class).
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
    "attention_bias": False,
}


def _gemma3_text(r: ConfigReader) -> dict:
    """Gemma 3 text model: Gemma 2's four norms per block, plus q/k RMSNorms of head_dim (modeling_gemma3.py)."""
    fields = _gemma(ConfigReader(r.cfg, r.path, GEMMA3_TEXT_DEFAULTS, r.where), norms=4)
    return fields | {"qk_norm": True}


def _gemma3(r: ConfigReader) -> dict:
    """Gemma 3 4B-27B (Gemma3ForConditionalGeneration): the text model of text_config; the SigLIP vision tower
    and projector are not counted (give them through n_params)."""
    return _gemma3_text(r.nested("text_config", GEMMA3_TEXT_DEFAULTS))


# Llama4TextConfig's defaults (transformers configuration_llama4.py), for keys a text_config may leave out.
LLAMA4_TEXT_DEFAULTS = {
    "vocab_size": 202_048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
    "tie_word_embeddings": False, "attention_bias": False,
}


def _llama4_text(r: ConfigReader) -> dict:
    """Llama 4 text model (modeling_llama4.py): MoE blocks at moe_layers (every interleave_moe_layer_step-th
    layer) with a router, routed experts of intermediate_size and one shared expert of the same size; dense
    blocks of intermediate_size_mlp between them. The q/k L2 norm (use_qk_norm) has no weights, and no-rope and
    chunked-attention layers change no parameter."""
    r = ConfigReader(r.cfg, r.path, LLAMA4_TEXT_DEFAULTS, r.where)
    fields = dense_fields(r, bias=linear_bias_fields(r), head_dim_default=128)
    n_layers, step = fields["n_layers"], r.size("interleave_moe_layer_step")
    moe_layers = r.ints("moe_layers")
    if moe_layers is not None and moe_layers != list(range(step - 1, n_layers, step)):
        r.fail(f"moe_layers {moe_layers} cannot be expressed (only every interleave_moe_layer_step-th layer)")
    return fields | ({"moe_layer_step": step} if step > 1 else {}) | {
        "d_ff": r.size("intermediate_size_mlp") if step > 1 else 0,
        "n_experts": r.size("num_local_experts"),
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": r.size("intermediate_size"),
        "n_shared_experts": 1,  # Llama4TextMoe.shared_expert: Llama4TextMLP(intermediate_size)
    }


def _llama4(r: ConfigReader) -> dict:
    """Llama 4 Scout / Maverick (Llama4ForConditionalGeneration): the text model of text_config; the vision
    tower and projector are not counted (give them through n_params)."""
    return _llama4_text(r.nested("text_config", LLAMA4_TEXT_DEFAULTS))


def _gpt_oss(r: ConfigReader) -> dict:
    """gpt-oss (modeling_gpt_oss.py): biases on q, k, v, o (attention_bias, true by default), one sink logit per
    head, every block MoE with a biased router and experts whose gate_up and down projections carry biases.
    The alternating sliding-window layers change no parameter."""
    fields = dense_fields(r, bias=linear_bias_fields(r, attention_default=True), head_dim_default=64)
    return fields | {
        "d_ff": 0,
        "n_experts": r.size("num_local_experts"),
        "top_k": r.size("num_experts_per_tok", 4),  # GptOssConfig's default
        "moe_d_ff": fields["d_ff"],
        "attn_sinks": True,
        "router_bias": True,
        "expert_bias": True,
    }


def _deepseek(r: ConfigReader) -> dict:
    """DeepSeek-V2/V3 and Kimi K2: MLA attention (arXiv:2405.04434 sec. 2.1) and DeepSeekMoE after
    first_k_dense_replace dense blocks. V3's multi-token-prediction module (num_nextn_predict_layers) is not
    counted. transformers' modules build every layer from first_k_dense_replace on as MoE (moe_layer_freq is not
    read), so a config with moe_layer_freq > 1 is refused rather than counted two ways."""
    if r.flag("attention_bias", False) or r.flag("mlp_bias", False):
        r.fail("attention_bias / mlp_bias = true cannot be expressed for MLA (biases on q_a, kv_a and o)")
    if r.size("moe_layer_freq", 1) != 1:
        r.fail("moe_layer_freq > 1 (dense layers between MoE layers) cannot be expressed")
    fields = attention_fields(r) | {
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
    dense = r.size("first_k_dense_replace", zero_ok=True)
    if dense > fields["n_layers"]:
        r.fail(f"first_k_dense_replace {dense} exceeds num_hidden_layers {fields['n_layers']}")
    return fields | {
        "n_experts": n_experts,
        "top_k": r.size("num_experts_per_tok"),
        "moe_d_ff": r.size("moe_intermediate_size"),
        "n_shared_experts": r.size("n_shared_experts", zero_ok=True),
        "first_dense_layers": dense,
    }


MAPPERS = {
    "llama": _llama,
    "mistral": dense_fields,  # MistralAttention / MistralMLP build no bias
    "phi3": lambda r: dense_fields(r) | {"fused_projections": True},  # qkv_proj, gate_up_proj: same count
    "qwen2": lambda r: dense_fields(r, bias={"linear_bias": "qkv"}),  # q, k, v biases always
    "gemma": lambda r: _gemma(r, norms=2),
    "gemma2": lambda r: _gemma(r, norms=4),
    "gemma3": _gemma3,
    "gemma3_text": _gemma3_text,
    "gpt2": _gpt2,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "olmo2": _olmo2,
    "llama4": _llama4,
    "llama4_text": _llama4_text,
    "gpt_oss": _gpt_oss,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,  # Kimi K2's config.json: DeepseekV3ForCausalLM with model_type kimi_k2
}
