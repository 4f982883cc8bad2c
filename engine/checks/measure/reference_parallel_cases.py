"""The cases of the measured multi-GPU and MoE set (reference_parallel.py measures them): the models, by their
published dims, and one entry per (family, model, sequence, micro-batch, precision, layout), with the ranks measured.
"""

from __future__ import annotations

from engine.checks.measure.reference_set import MODELS as SINGLE_GPU_MODELS

# Published dims (Hugging Face config.json); "-like" = the model's dims under our name, "-Nl" = its first N
# layers only (a layer of a large model at its real width; embeddings and head whole).
MODELS = {
    "llama-400m-like": SINGLE_GPU_MODELS["llama-400m-like"],
    "tinyllama-1.1b-like": SINGLE_GPU_MODELS["tinyllama-1.1b-like"],
    "llama-3.2-1b-like": SINGLE_GPU_MODELS["llama-3.2-1b-like"],
    "qwen2.5-0.5b-like": SINGLE_GPU_MODELS["qwen2.5-0.5b-like"],
    "llama-3.1-8b-4l": {"n_layers": 4, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336,
                        "vocab": 128256, "ffn_type": "swiglu", "tied_embeddings": False},
    "llama-3.1-70b-2l": {"n_layers": 2, "d_model": 8192, "n_heads": 64, "n_kv_heads": 8, "d_ff": 28672,
                         "vocab": 128256, "ffn_type": "swiglu", "tied_embeddings": False},
    # Mixtral-8x7B: every block MoE, experts of intermediate_size (d_ff repeats it: no dense layer uses it).
    "mixtral-8x7b-2l": {"n_layers": 2, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "d_ff": 14336,
                        "vocab": 32000, "ffn_type": "swiglu", "tied_embeddings": False, "n_experts": 8, "top_k": 2,
                        "moe_d_ff": 14336},
    # Qwen1.5-MoE-A2.7B: 60 experts of 1408, top-4, one gated shared expert of 5632 = 4 x 1408, q/k/v biases.
    "qwen1.5-moe-a2.7b-4l": {"n_layers": 4, "d_model": 2048, "n_heads": 16, "n_kv_heads": 16, "d_ff": 5632,
                             "vocab": 151936, "ffn_type": "swiglu", "tied_embeddings": False, "linear_bias": "qkv",
                             "n_experts": 60, "top_k": 4, "moe_d_ff": 1408, "n_shared_experts": 4,
                             "shared_expert_gate": True},
    # Qwen3-30B-A3B: 128 experts of 768, top-8, q/k RMSNorm per head, head_dim 128.
    "qwen3-30b-a3b-4l": {"n_layers": 4, "d_model": 2048, "n_heads": 32, "n_kv_heads": 4, "head_dim": 128,
                         "d_ff": 6144, "vocab": 151936, "ffn_type": "swiglu", "tied_embeddings": False,
                         "n_experts": 128, "top_k": 8, "moe_d_ff": 768, "qk_norm": True},
    # DeepSeek-V2-Lite's dims on DeepseekV3ForCausalLM: MLA (kv_lora 512, no q_lora, rope 64, nope 128, v 128),
    # 64 routed experts of 1408 top-6, 2 shared experts, the first layer dense (10944).
    "deepseek-v2-lite-4l": {"n_layers": 4, "d_model": 2048, "n_heads": 16, "n_kv_heads": 16, "head_dim": 128,
                            "d_ff": 10944, "vocab": 102400, "ffn_type": "swiglu", "tied_embeddings": False,
                            "n_experts": 64, "top_k": 6, "moe_d_ff": 1408, "n_shared_experts": 2,
                            "first_dense_layers": 1, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "v_head_dim": 128},
}

MP = {"fsdp_param_dtype": "bfloat16", "fsdp_reduce_dtype": "float32"}  # FSDP2 MixedPrecisionPolicy
FSDP3 = {"framework": "fsdp", "zero_stage": 3}
FSDP2 = {"framework": "fsdp", "zero_stage": 2}
# FSDP2 under torch.autocast without a MixedPrecisionPolicy is framework 'pytorch' (parallel.check; the two rows
# were relabelled so in parallel.csv by 0eb0b73, which left them 'fsdp' here, so the set did not regenerate)
AUTOCAST_FSDP3 = {"framework": "pytorch", "zero_stage": 3}
AUTOCAST_FSDP2 = {"framework": "pytorch", "zero_stage": 2}
OFFLOAD = {"offload": "optimizer_params"}  # FSDP2 CPUOffloadPolicy
SYNC_LAST = {"grad_sync": "last"}  # HF accelerate's no_sync on all but the last micro-batch (parallel_step.py)
SPLIT = {"fsdp_groups": "split"}  # torchtitan's groups since 83e6941: embedding, blocks, [norm, head], root

# (family, model, seq_len, micro_batch, precision, layout and harness fields, ranks measured)
CASES = [
    ("ddp", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4}, (0,)),
    ("ddp", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, "ddp_grad_as_bucket_view": True}, (0,)),
    ("ddp", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 8, "ddp_bucket_cap_mb": 100}, (0,)),
    ("ddp", "tinyllama-1.1b-like", 2048, 1, "amp_bf16", {"dp": 2}, (0,)),
    ("ddp", "tinyllama-1.1b-like", 2048, 2, "bf16", {"dp": 4, "ddp_grad_as_bucket_view": True}, (0,)),
    ("ddp", "qwen2.5-0.5b-like", 2048, 2, "amp_bf16", {"dp": 2}, (0,)),
    ("ddp", "llama-3.2-1b-like", 1024, 4, "amp_bf16", {"dp": 4, "ddp_bucket_cap_mb": 1}, (0,)),
    ("ddp", "llama-400m-like", 1024, 2, "fp32", {"dp": 2, "grad_accum": 2}, (0,)),
    ("fsdp2", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP}, (0,)),
    ("fsdp2", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 8, **FSDP3, **MP}, (0,)),
    ("fsdp2", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **AUTOCAST_FSDP3}, (0,)),
    ("fsdp2", "tinyllama-1.1b-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP}, (0,)),
    ("fsdp2", "tinyllama-1.1b-like", 4096, 1, "amp_bf16", {"dp": 8, **FSDP3, **MP}, (0,)),
    ("fsdp2", "llama-3.2-1b-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP}, (0,)),
    ("fsdp2", "qwen2.5-0.5b-like", 2048, 4, "amp_bf16", {"dp": 2, **FSDP3, **MP}, (0,)),
    ("fsdp2", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"dp": 8, **FSDP3, **MP}, (0,)),
    ("fsdp2", "tinyllama-1.1b-like", 2048, 2, "bf16", {"dp": 4, **FSDP3}, (0,)),
    ("fsdp2", "llama-400m-like", 1024, 2, "fp32", {"dp": 2, **FSDP3, "grad_accum": 2}, (0,)),
    ("fsdp2_sync_last", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, "grad_accum": 2}, (0,)),
    ("fsdp2_sync_last", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, **SYNC_LAST, "grad_accum": 2},
     (0,)),
    ("fsdp2_sync_last", "llama-400m-like", 2048, 1, "amp_bf16", {"dp": 4, **FSDP3, **MP, **SYNC_LAST, "grad_accum": 4},
     (0,)),
    ("fsdp2_sync_last", "tinyllama-1.1b-like", 2048, 1, "amp_bf16",
     {"dp": 8, **FSDP3, **MP, **SYNC_LAST, "grad_accum": 2, "checkpointing": "full"}, (0,)),
    ("fsdp2_sync_last", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP2, **MP, **SYNC_LAST, "grad_accum": 2},
     (0,)),
    ("fsdp2_sync_last", "llama-400m-like", 1024, 2, "fp32", {"dp": 2, **FSDP3, **SYNC_LAST, "grad_accum": 2}, (0,)),
    ("fsdp2_split", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, **SPLIT}, (0,)),
    ("fsdp2_split", "tinyllama-1.1b-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, **SPLIT}, (0,)),
    ("fsdp2_split", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"dp": 8, **FSDP3, **MP, **SPLIT}, (0,)),
    ("fsdp2_noreshard", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP2, **MP}, (0,)),
    ("fsdp2_noreshard", "tinyllama-1.1b-like", 2048, 2, "amp_bf16", {"dp": 8, **FSDP2, **MP}, (0,)),
    ("fsdp2_noreshard", "llama-3.2-1b-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP2, **MP}, (0,)),
    ("fsdp2_noreshard", "qwen2.5-0.5b-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP2, **MP}, (0,)),
    ("fsdp2_noreshard", "llama-3.1-8b-4l", 2048, 1, "amp_bf16", {"dp": 8, **FSDP2, **MP}, (0,)),
    ("fsdp2_noreshard", "tinyllama-1.1b-like", 2048, 2, "amp_bf16", {"dp": 4, **AUTOCAST_FSDP2}, (0,)),
    ("fsdp2_ckpt", "llama-400m-like", 4096, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, "checkpointing": "full"}, (0,)),
    ("fsdp2_ckpt", "tinyllama-1.1b-like", 4096, 2, "amp_bf16", {"dp": 8, **FSDP3, **MP, "checkpointing": "full"}, (0,)),
    ("fsdp2_ckpt", "llama-3.2-1b-like", 8192, 1, "amp_bf16", {"dp": 4, **FSDP3, **MP, "checkpointing": "full"}, (0,)),
    ("fsdp2_ckpt", "qwen2.5-0.5b-like", 4096, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, "checkpointing": "full"}, (0,)),
    ("fsdp2_ckpt", "llama-3.1-8b-4l", 8192, 1, "amp_bf16", {"dp": 8, **FSDP3, **MP, "checkpointing": "full"}, (0,)),
    ("fsdp2_ckpt", "tinyllama-1.1b-like", 4096, 1, "amp_bf16",
     {"dp": 4, **FSDP2, **MP, "checkpointing": "full"}, (0,)),
    ("fsdp2_offload", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP, **OFFLOAD}, (0,)),
    ("fsdp2_offload", "tinyllama-1.1b-like", 2048, 2, "amp_bf16", {"dp": 8, **FSDP3, **MP, **OFFLOAD}, (0,)),
    ("fsdp2_offload", "llama-3.2-1b-like", 2048, 1, "amp_bf16",
     {"dp": 4, **FSDP3, **MP, **OFFLOAD, "checkpointing": "full"}, (0,)),
    ("fsdp2_offload", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"dp": 8, **FSDP3, **MP, **OFFLOAD}, (0,)),
    ("tp", "llama-400m-like", 2048, 2, "amp_bf16", {"tp": 2}, (0,)),
    ("tp", "tinyllama-1.1b-like", 2048, 1, "amp_bf16", {"tp": 4}, (0,)),
    ("tp", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"tp": 8}, (0,)),
    ("tp", "llama-3.1-70b-2l", 2048, 1, "bf16", {"tp": 8}, (0,)),
    ("tp", "tinyllama-1.1b-like", 2048, 2, "bf16", {"tp": 2}, (0,)),
    ("tp_sp", "llama-400m-like", 2048, 2, "amp_bf16", {"tp": 2, "sp": True}, (0,)),
    ("tp_sp", "tinyllama-1.1b-like", 2048, 1, "amp_bf16", {"tp": 4, "sp": True}, (0,)),
    ("tp_sp", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"tp": 8, "sp": True}, (0,)),
    ("tp_sp", "llama-3.1-70b-2l", 2048, 1, "bf16", {"tp": 8, "sp": True}, (0,)),
    ("tp_sp", "tinyllama-1.1b-like", 4096, 2, "amp_bf16", {"tp": 4, "sp": True, "checkpointing": "full"}, (0,)),
    ("tp_loss_parallel", "llama-400m-like", 2048, 2, "amp_bf16", {"tp": 2, "sp": True, "loss_parallel": True}, (0,)),
    ("tp_loss_parallel", "tinyllama-1.1b-like", 2048, 1, "amp_bf16",
     {"tp": 4, "sp": True, "loss_parallel": True}, (0,)),
    ("tp_loss_parallel", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"tp": 8, "sp": True, "loss_parallel": True}, (0,)),
    ("tp_loss_parallel", "llama-3.1-70b-2l", 2048, 1, "bf16", {"tp": 8, "sp": True, "loss_parallel": True}, (0,)),
    ("tp_loss_parallel", "tinyllama-1.1b-like", 2048, 1, "amp_bf16", {"tp": 4, "loss_parallel": True}, (0,)),
    ("tp_hf", "llama-400m-like", 2048, 2, "amp_bf16", {"tp": 2, "tp_plan": "hf"}, (0,)),
    ("tp_hf", "tinyllama-1.1b-like", 2048, 1, "amp_bf16", {"tp": 4, "tp_plan": "hf"}, (0,)),
    ("tp_hf", "llama-3.1-8b-4l", 4096, 1, "amp_bf16", {"tp": 8, "tp_plan": "hf"}, (0,)),
    ("tp_hf", "llama-3.1-70b-2l", 2048, 1, "bf16", {"tp": 8, "tp_plan": "hf"}, (0,)),
    ("tp_hf", "tinyllama-1.1b-like", 4096, 1, "bf16", {"tp": 4, "tp_plan": "hf"}, (0,)),
    ("fsdp2_tp", "tinyllama-1.1b-like", 2048, 2, "amp_bf16", {"dp": 2, "tp": 2, "sp": True, **FSDP3, **MP}, (0,)),
    ("fsdp2_tp", "tinyllama-1.1b-like", 2048, 2, "amp_bf16",
     {"dp": 4, "tp": 2, "sp": True, "loss_parallel": True, **FSDP3, **MP}, (0,)),
    ("fsdp2_tp", "llama-3.1-8b-4l", 4096, 1, "amp_bf16",
     {"dp": 2, "tp": 4, "sp": True, "loss_parallel": True, **FSDP3, **MP}, (0,)),
    ("fsdp2_tp", "llama-3.1-70b-2l", 4096, 1, "amp_bf16",
     {"dp": 2, "tp": 8, "sp": True, "loss_parallel": True, **FSDP3, **MP}, (0,)),
    ("fsdp2_tp", "llama-400m-like", 2048, 2, "amp_bf16", {"dp": 4, "tp": 2, **FSDP3, **MP}, (0,)),
    ("cp", "llama-400m-like", 8192, 1, "amp_bf16", {"cp": 2, **FSDP3, **MP}, (0,)),
    ("cp", "tinyllama-1.1b-like", 8192, 1, "amp_bf16", {"cp": 4, **FSDP3, **MP}, (0,)),
    ("cp", "llama-3.1-8b-4l", 8192, 1, "amp_bf16", {"dp": 2, "cp": 2, **FSDP3, **MP}, (0,)),
    ("cp", "llama-3.2-1b-like", 8192, 1, "amp_bf16", {"cp": 2, **FSDP3, **MP}, (0,)),
    ("cp", "tinyllama-1.1b-like", 4096, 2, "amp_bf16",
     {"dp": 2, "cp": 2, **FSDP3, **MP, "checkpointing": "full"}, (0,)),
    ("pp_1f1b", "llama-400m-like", 2048, 1, "bf16", {"pp": 4, "grad_accum": 8}, (0, 3)),
    ("pp_1f1b", "llama-400m-like", 2048, 2, "amp_bf16", {"pp": 2, "grad_accum": 4}, (0, 1)),
    ("pp_1f1b", "llama-3.1-8b-4l", 4096, 1, "bf16", {"pp": 4, "grad_accum": 4}, (0, 3)),
    ("pp_gpipe", "llama-400m-like", 2048, 1, "bf16", {"pp": 4, "grad_accum": 8, "pp_schedule": "gpipe"}, (0, 3)),
    ("pp_gpipe", "llama-400m-like", 2048, 2, "amp_bf16", {"pp": 2, "grad_accum": 4, "pp_schedule": "gpipe"}, (0,)),
    ("pp_interleaved", "llama-400m-like", 2048, 1, "bf16",
     {"pp": 4, "grad_accum": 8, "pp_schedule": "interleaved", "vpp": 2}, (0, 3)),
    ("pp_interleaved", "llama-400m-like", 2048, 2, "bf16",
     {"pp": 2, "grad_accum": 4, "pp_schedule": "interleaved", "vpp": 3}, (0,)),
    ("pp_uneven", "tinyllama-1.1b-like", 2048, 1, "bf16", {"pp": 4, "grad_accum": 8}, (0, 3)),
    ("pp_uneven", "llama-400m-like", 2048, 1, "bf16",
     {"pp": 4, "grad_accum": 8, "pp_first_layers": 5, "pp_last_layers": 5}, (0, 3)),
    ("pp_uneven", "llama-400m-like", 2048, 1, "bf16", {"pp": 4, "grad_accum": 8, "pp_last_layers": 3}, (3,)),
    ("moe", "mixtral-8x7b-2l", 2048, 1, "amp_bf16", {}, (0,)),
    ("moe", "mixtral-8x7b-2l", 4096, 1, "bf16", {}, (0,)),
    ("moe", "qwen1.5-moe-a2.7b-4l", 2048, 1, "amp_bf16", {}, (0,)),
    ("moe", "qwen3-30b-a3b-4l", 2048, 1, "amp_bf16", {}, (0,)),
    ("moe", "qwen3-30b-a3b-4l", 4096, 2, "amp_bf16", {"checkpointing": "full"}, (0,)),
    ("moe", "deepseek-v2-lite-4l", 2048, 1, "amp_bf16", {}, (0,)),
    ("moe_fsdp", "qwen3-30b-a3b-4l", 2048, 2, "amp_bf16", {"dp": 4, **FSDP3, **MP}, (0,)),
    ("moe_fsdp", "mixtral-8x7b-2l", 2048, 1, "amp_bf16", {"dp": 8, **FSDP3, **MP}, (0,)),
    ("moe_ep", "mixtral-8x7b-2l", 2048, 1, "amp_bf16", {"dp": 8, "ep": 8, **FSDP3, **MP, "fsdp_wrap": "hf"}, (0,)),
    ("moe_ep", "mixtral-8x7b-2l", 2048, 2, "amp_bf16", {"dp": 4, "ep": 4, **FSDP3, **MP, "fsdp_wrap": "hf"}, (0,)),
    ("moe_ep", "qwen1.5-moe-a2.7b-4l", 2048, 2, "amp_bf16", {"dp": 4, "ep": 4, **FSDP3, **MP, "fsdp_wrap": "hf"}, (0,)),
    ("moe_ep", "qwen3-30b-a3b-4l", 2048, 2, "amp_bf16", {"dp": 8, "ep": 8, **FSDP3, **MP, "fsdp_wrap": "hf"}, (0,)),
    ("moe_ep", "qwen3-30b-a3b-4l", 2048, 2, "amp_bf16",
     {"dp": 8, "ep": 8, **FSDP3, **MP, "fsdp_wrap": "hf", "capacity_factor": 1.25}, (0,)),
    ("moe_ep", "qwen3-30b-a3b-4l", 2048, 2, "amp_bf16",
     {"dp": 8, "ep": 8, **FSDP3, **MP, "fsdp_wrap": "hf", "capacity_factor": 2.0}, (0,)),
    ("moe_ep", "qwen3-30b-a3b-4l", 2048, 2, "amp_bf16", {"dp": 4, "ep": 2, **FSDP3, **MP, "fsdp_wrap": "hf"}, (0,)),
    ("moe_ep", "deepseek-v2-lite-4l", 2048, 1, "amp_bf16", {"dp": 8, "ep": 8, **FSDP3, **MP, "fsdp_wrap": "hf"}, (0,)),
]


def case_id(family: str, model: str, seq: int, mb: int, precision: str, extra: dict, rank: int) -> str:
    """A readable unique id, e.g. ``fsdp2_tinyllama-1.1b-like_amp_bf16_s2048_b2_dp4_mp_r0``."""
    parts = [family, model, precision, f"s{seq}", f"b{mb}"]
    for k in ("dp", "tp", "pp", "cp", "ep", "vpp"):
        if extra.get(k, 1) > 1:
            parts.append(f"{k}{extra[k]}")
    flags = {"sp": "sp", "loss_parallel": "lp", "ddp_grad_as_bucket_view": "view"}
    parts += [name for k, name in flags.items() if extra.get(k)]
    if "ddp_bucket_cap_mb" in extra:
        parts.append(f"bucket{extra['ddp_bucket_cap_mb']}")
    if extra.get("fsdp_param_dtype"):
        parts.append("mp")
    if extra.get("zero_stage") == 2:
        parts.append("z2")
    if extra.get("checkpointing") == "full":
        parts.append("ckpt")
    if extra.get("offload", "none") != "none":
        parts.append("offload")
    if extra.get("grad_accum", 1) > 1:
        parts.append(f"ga{extra['grad_accum']}")
    if extra.get("pp_first_layers") or extra.get("pp_last_layers"):
        parts.append(f"split{extra.get('pp_first_layers', 0)}-{extra.get('pp_last_layers', 0)}")
    if extra.get("fsdp_groups") == "split":
        parts.append("split")
    if extra.get("grad_sync") == "last":
        parts.append("synclast")
    if extra.get("tp_plan") == "hf":
        parts.append("hfplan")
    if extra.get("capacity_factor", 1.0) != 1.0:
        parts.append(f"cf{extra['capacity_factor']}")
    return "_".join(parts + [f"r{rank}"])


def reference_cases() -> list[tuple[str, str, dict]]:
    """(case_id, family, case dict) for every (case, rank) of the set."""
    out = []
    for family, model, seq, mb, precision, extra, ranks in CASES:
        for rank in ranks:
            case = {"model": model, **MODELS[model], "seq_len": seq, "micro_batch": mb, "precision": precision,
                    "optimizer": "adamw", "attention": "flash", **extra, "rank": rank}
            out.append((case_id(family, model, seq, mb, precision, extra, rank), family, case))
    return out
