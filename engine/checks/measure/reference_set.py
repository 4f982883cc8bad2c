"""The measured reference set: real training steps of real architectures, measured without a GPU.

Example:
    memsim measure --set single -o data/measured/cpu_fake.csv
    memsim measure --set single -o /tmp/llama.csv --only llama-3.2-1b

Each case is measured by ``measure_case(case, device)`` (default ``'fake'``: FakeTensorMode with
CUDA semantics emulated, see ``engine.checks.measure``). The CSV has one row per case: ``case_id``, every
resolved configuration column (CONFIG.md names), the ``measured_*`` columns and the versions.
"""

from __future__ import annotations

# Published dims (Hugging Face config.json of each model; "-like" = same dims, our own name).
MODELS = {
    "gpt2-124m": dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab=50257, ffn_type="gelu",
                      tied_embeddings=True, dropout=0.1),
    "gpt2-355m": dict(n_layers=24, d_model=1024, n_heads=16, d_ff=4096, vocab=50257, ffn_type="gelu",
                      tied_embeddings=True, dropout=0.1),
    "gpt2-774m": dict(n_layers=36, d_model=1280, n_heads=20, d_ff=5120, vocab=50257, ffn_type="gelu",
                      tied_embeddings=True, dropout=0.1),
    "gpt2-1.5b": dict(n_layers=48, d_model=1600, n_heads=25, d_ff=6400, vocab=50257, ffn_type="gelu",
                      tied_embeddings=True, dropout=0.1),
    "llama-400m-like": dict(n_layers=24, d_model=1024, n_heads=16, n_kv_heads=16, d_ff=2816, vocab=32000,
                            ffn_type="swiglu", tied_embeddings=False),
    "tinyllama-1.1b-like": dict(n_layers=22, d_model=2048, n_heads=32, n_kv_heads=4, d_ff=5632, vocab=32000,
                                ffn_type="swiglu", tied_embeddings=False),
    "llama-3.2-1b-like": dict(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, d_ff=8192, vocab=128256,
                              ffn_type="swiglu", tied_embeddings=True, head_dim=64),
    "qwen2.5-0.5b-like": dict(n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, d_ff=4864, vocab=151936,
                              ffn_type="swiglu", tied_embeddings=True, linear_bias="qkv"),
}

# (model, seq_len, micro_batch, precision, optimizer, attention, extra fields)
CASES = [
    ("gpt2-124m", 1024, 4, "fp32", "adamw", "eager", {}),
    ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "eager", {}),
    ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "sdpa_math", {}),
    ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {}),
    ("gpt2-124m", 1024, 4, "bf16", "adamw", "eager", {}),
    ("gpt2-124m", 1024, 4, "amp_fp16", "adamw", "flash", {}),
    ("gpt2-124m", 1024, 8, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("gpt2-124m", 512, 8, "fp32", "sgd", "eager", {}),
    ("gpt2-124m", 512, 8, "fp32", "sgd_momentum", "sdpa_math", {}),
    ("gpt2-124m", 1024, 2, "bf16", "adafactor", "flash", {}),
    ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"dropout": 0.0}),
    ("gpt2-124m", 1024, 4, "amp_bf16", "adamw", "flash", {"grad_accum": 2}),
    ("gpt2-124m", 256, 8, "amp_bf16", "adam", "eager", {}),
    ("gpt2-124m", 2048, 2, "amp_bf16", "adamw", "flash", {"n_positions": 2048}),
    ("gpt2-124m", 1024, 4, "fp32", "adamw", "eager", {"lora_rank": 8, "lora_targets": "qv"}),
    ("gpt2-124m", 1024, 4, "bf16", "adamw", "flash", {"lora_rank": 64, "lora_targets": "all_linear"}),
    ("gpt2-355m", 1024, 4, "amp_bf16", "adamw", "eager", {}),
    ("gpt2-355m", 1024, 4, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("gpt2-355m", 1024, 2, "fp32", "adamw", "sdpa_math", {}),
    ("gpt2-355m", 1024, 4, "bf16", "sgd_momentum", "flash", {}),
    ("gpt2-355m", 1024, 4, "amp_bf16", "adamw", "flash", {"lora_rank": 16, "lora_targets": "qv"}),
    ("gpt2-774m", 1024, 2, "amp_bf16", "adamw", "flash", {}),
    ("gpt2-774m", 1024, 2, "amp_fp16", "adamw", "eager", {"checkpointing": "full"}),
    ("gpt2-774m", 1024, 1, "fp32", "adafactor", "eager", {}),
    ("gpt2-774m", 1024, 4, "bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("gpt2-1.5b", 1024, 1, "amp_bf16", "adamw", "flash", {}),
    ("gpt2-1.5b", 1024, 2, "bf16", "adafactor", "flash", {"checkpointing": "full"}),
    ("gpt2-1.5b", 1024, 1, "fp32", "sgd", "eager", {}),
    ("gpt2-1.5b", 1024, 2, "amp_bf16", "adamw", "flash", {"lora_rank": 32, "lora_targets": "all_linear"}),
    ("gpt2-1.5b", 1024, 1, "amp_bf16", "adamw", "sdpa_math", {"checkpointing": "full"}),
    ("llama-400m-like", 2048, 4, "bf16", "adamw", "flash", {}),
    ("llama-400m-like", 2048, 4, "amp_bf16", "adamw", "flash", {}),
    ("llama-400m-like", 2048, 2, "amp_bf16", "adamw", "eager", {}),
    ("llama-400m-like", 2048, 2, "fp32", "adamw", "sdpa_math", {}),
    ("llama-400m-like", 4096, 2, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("llama-400m-like", 1024, 8, "bf16", "sgd", "flash", {}),
    ("llama-400m-like", 2048, 4, "bf16", "sgd_momentum", "flash", {"grad_accum": 2}),
    ("llama-400m-like", 2048, 4, "bf16", "adafactor", "flash", {}),
    ("llama-400m-like", 2048, 4, "bf16", "adamw", "flash", {"lora_rank": 8, "lora_targets": "qv"}),
    ("llama-400m-like", 2048, 2, "amp_bf16", "adamw", "flash", {"lora_rank": 64, "lora_targets": "all_linear"}),
    ("llama-400m-like", 8192, 1, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("llama-400m-like", 256, 8, "amp_fp16", "adam", "eager", {}),
    ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash", {}),
    ("tinyllama-1.1b-like", 2048, 2, "amp_bf16", "adamw", "flash", {}),
    ("tinyllama-1.1b-like", 2048, 1, "amp_bf16", "adamw", "eager", {}),
    ("tinyllama-1.1b-like", 2048, 1, "amp_bf16", "adamw", "sdpa_math", {}),
    ("tinyllama-1.1b-like", 2048, 4, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("tinyllama-1.1b-like", 4096, 1, "bf16", "adafactor", "flash", {}),
    ("tinyllama-1.1b-like", 2048, 4, "bf16", "adamw", "flash", {"lora_rank": 16, "lora_targets": "qv"}),
    ("tinyllama-1.1b-like", 2048, 2, "bf16", "adamw", "flash",
     {"lora_rank": 32, "lora_targets": "all_linear", "checkpointing": "full"}),
    ("tinyllama-1.1b-like", 2048, 1, "fp32", "sgd_momentum", "flash", {}),
    ("llama-3.2-1b-like", 2048, 1, "bf16", "adamw", "flash", {}),
    ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {}),
    ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "eager", {}),
    ("llama-3.2-1b-like", 4096, 1, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("llama-3.2-1b-like", 8192, 1, "bf16", "adamw", "flash", {"checkpointing": "full"}),
    ("llama-3.2-1b-like", 2048, 2, "bf16", "sgd", "flash", {}),
    ("llama-3.2-1b-like", 2048, 2, "bf16", "adamw", "flash", {"lora_rank": 8, "lora_targets": "qv"}),
    ("llama-3.2-1b-like", 2048, 1, "amp_bf16", "adamw", "flash", {"lora_rank": 64, "lora_targets": "all_linear"}),
    ("llama-3.2-1b-like", 2048, 1, "amp_fp16", "adafactor", "sdpa_math", {}),
    ("llama-3.2-1b-like", 1024, 4, "amp_bf16", "adamw", "flash", {"grad_accum": 2}),
    ("qwen2.5-0.5b-like", 2048, 1, "bf16", "adamw", "flash", {}),
    ("qwen2.5-0.5b-like", 2048, 2, "amp_bf16", "adamw", "flash", {}),
    ("qwen2.5-0.5b-like", 2048, 1, "amp_bf16", "adamw", "eager", {}),
    ("qwen2.5-0.5b-like", 2048, 4, "bf16", "adamw", "flash", {"lora_rank": 16, "lora_targets": "qv"}),
    ("qwen2.5-0.5b-like", 4096, 1, "amp_bf16", "adamw", "flash", {"checkpointing": "full"}),
]

CONFIG_COLUMNS = [
    "model", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab", "ffn_type", "tied_embeddings",
    "head_dim", "norm_type", "linear_bias", "n_positions", "act_fn", "fused_projections", "softmax_fp32",
    "n_experts", "seq_len", "micro_batch", "grad_accum",
    "precision", "optimizer", "framework", "checkpointing", "dropout", "attention", "lora_rank", "lora_targets",
    "base_quant", "offload", "n_gpus", "tp", "pp", "cp", "ep", "dp", "sp", "zero_stage",
]
MEASURED_COLUMNS = [
    "measured_allocated_peak_bytes", "measured_allocated_rounded_bytes", "measured_reserved_peak_bytes",
    "measured_weight_bytes", "measured_grad_bytes", "measured_optimizer_bytes", "measured_activation_bytes",
    "measured_temp_bytes", "measured_weight_cast_bytes", "measured_saved_activation_bytes",
    "measured_peak_phase", "measured_peak_op", "measured_n_params", "measured_trainable_params",
    "measure_device", "torch_version", "transformers_version", "peft_version",
]
COLUMNS = ["case_id", *CONFIG_COLUMNS, *MEASURED_COLUMNS]


def case_id(model: str, seq: int, mb: int, precision: str, optimizer: str, attention: str, extra: dict) -> str:
    """A readable unique id, e.g. ``gpt2-124m_amp_bf16_adamw_flash_s1024_b4_ckpt``."""
    parts = [model, precision, optimizer, attention, f"s{seq}", f"b{mb}"]
    if extra.get("checkpointing") == "full":
        parts.append("ckpt")
    if extra.get("grad_accum", 1) > 1:
        parts.append(f"ga{extra['grad_accum']}")
    if extra.get("lora_rank"):
        parts.append(f"lora{extra['lora_rank']}-{extra['lora_targets']}")
    if "dropout" in extra:
        parts.append(f"p{extra['dropout']}")
    return "_".join(parts)


def reference_cases() -> list[tuple[str, str, dict]]:
    """(case_id, group, case dict) for every reference case; the group is empty (the set has no families)."""
    out = []
    for model, seq, mb, precision, optimizer, attention, extra in CASES:
        case = {"model": model, **MODELS[model], "seq_len": seq, "micro_batch": mb, "precision": precision,
                "optimizer": optimizer, "attention": attention, **extra}
        out.append((case_id(model, seq, mb, precision, optimizer, attention, extra), "", case))
    return out


def columns() -> list[str]:
    """The CSV header of cpu_fake.csv."""
    return COLUMNS


def measure_row(cid: str, group: str, case: dict, device: str = "fake") -> dict:
    """One CSV row: the measured case under its id. ``group`` is unused: this set has no families, and the
    argument is there because every set's measure_row takes (case_id, group, case, device) (reference_sets.py)."""
    from engine.checks.measure.measure import measure_case

    return {"case_id": cid, **measure_case(case, device)}
