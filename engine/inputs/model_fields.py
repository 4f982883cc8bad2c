"""The model's architecture as CONFIG.md names it: the dims and how the Hugging Face module is written.

A catalog entry (data/models.toml) or a config.json (hf_config.py) fills these; params.py counts from them.
"""

from engine.inputs import codes
from engine.inputs.field import Field

# Documented maxima (beyond any model built): every input fits an int64 with room, and the model's magnitude
# guards (engine/model/validity.py) turn what would not fit in bytes into an invalid row.
MAX_DIM = 2**31
MAX_PARAMS = 2**50

MODEL_FIELDS = [
    Field("n_layers", "int", 0, "transformer layers (per stack for encoder-decoder)", low=0, high=MAX_DIM),
    Field("d_model", "int", 0, "hidden size h", low=0, high=MAX_DIM),
    Field("n_heads", "int", 0, "attention heads a", low=0, high=MAX_DIM),
    Field("n_kv_heads", "int", 0, "key/value heads (< n_heads: GQA/MQA; 0: = n_heads)", low=0, high=MAX_DIM),
    Field("d_ff", "int", 0, "FFN inner size f", low=0, high=MAX_DIM),
    Field("vocab", "int", 0, "vocabulary size V", low=0, high=MAX_DIM),
    Field("ffn_type", codes.FFN, codes.FFN.SWIGLU, "gelu (2 matrices) or swiglu (3)"),
    Field("tied_embeddings", "bool", False, "input embedding shared with the LM head"),
    Field("lm_head", "bool", True, "a vocabulary-sized output head (false: an encoder with a small task head, BERT)"),
    Field("n_experts", "int", 0, "routed experts per MoE layer (0 = dense)", low=0, high=MAX_DIM),
    Field("top_k", "int", 0, "experts each token is routed to", low=0, high=MAX_DIM),
    Field("moe_d_ff", "int", 0, "FFN inner size of one expert", low=0, high=MAX_DIM),
    Field("n_params", "int", 0, "overrides the count from the dims (0 = count from dims)", low=0, high=MAX_PARAMS),
    # Extensions beyond CONFIG.md's first list, needed to count real models exactly.
    Field("head_dim", "int", 0, "per-head size (0 = d_model / n_heads; Gemma uses 256)", low=0, high=MAX_DIM),
    Field("norm_type", codes.Norm, codes.Norm.RMSNORM, "layernorm (weight + bias) or rmsnorm"),
    Field("linear_bias", codes.Bias, codes.Bias.NONE, "none, qkv (Qwen2) or all (GPT-2, BERT)"),
    Field("n_positions", "int", 0, "learned position-embedding rows (0 = rotary)", low=0, high=MAX_DIM),
    Field("norms_per_layer", "int", 2, "norm layers per block (Gemma 2: 4)", low=0, high=MAX_DIM),
    Field("n_shared_experts", "int", 0, "always-active experts of moe_d_ff each (DeepSeek, Qwen MoE)", low=0, high=MAX_DIM),
    Field("shared_expert_gate", "bool", False, "a sigmoid gate h -> 1 on the shared expert (Qwen MoE)"),
    Field("first_dense_layers", "int", 0, "leading layers with a dense FFN of d_ff (DeepSeek)", low=0, high=MAX_DIM),
    Field("q_lora_rank", "int", 0, "MLA query low-rank size (DeepSeek-V2/V3; 0 = full q_proj)", low=0, high=MAX_DIM),
    Field("kv_lora_rank", "int", 0, "MLA key/value low-rank size (0 = standard attention)", low=0, high=MAX_DIM),
    Field("qk_rope_head_dim", "int", 0, "MLA rotary part of each query/key head", low=0, high=MAX_DIM),
    Field("v_head_dim", "int", 0, "MLA value head size", low=0, high=MAX_DIM),
    # Qwen3, Gemma 3, OLMo 2, Llama 4, gpt-oss (transformers' modeling_<type>.py).
    Field("qk_norm", "bool", False, "an RMSNorm on every query and key head, one weight of head_dim each (Qwen3, Gemma 3)"),
    Field("qk_norm_all_heads", "bool", False, "the q/k RMSNorm spans all heads at once: weights a*d and g*d (OLMo 2)"),
    Field("attn_out_bias", "bool", False, "a bias on the attention output projection too (attention_bias = true: gpt-oss)"),
    Field("attn_sinks", "bool", False, "one learned attention-sink logit per head (gpt-oss)"),
    Field("moe_layer_step", "int", 0, "one layer in s is MoE: layers s-1, 2s-1, ... (Llama 4 Maverick: 2; 0 = every layer)", low=0, high=MAX_DIM),
    Field("expert_bias", "bool", False, "biases on every routed expert's projections (gpt-oss)"),
    Field("router_bias", "bool", False, "a bias on the router logits, E per MoE layer (gpt-oss)"),
    # How the Hugging Face module is written (what framework = pytorch | fsdp runs): it decides the saved tensors.
    Field("act_fn", codes.ActFn, codes.ActFn.GELU, "FFN activation as implemented: gelu (one kernel), gelu_new (HF GPT-2's Python tanh), silu"),
    Field("fused_projections", "bool", False, "q/k/v (and gate/up) are one matmul in the HF module (GPT-2 c_attn, Phi-3)"),
    Field("softmax_fp32", "bool", True, "the HF eager attention computes softmax in fp32 (Llama family; not GPT-2, BERT)"),
]
