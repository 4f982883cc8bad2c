"""Multi-GPU layouts the harness measures: one rank of a world simulated in one process (``distributed.py``).

``check(c)`` refuses, in one line, what no path runs; what runs for each layout, with the framework's own code,
is in parallel_apply.py.

Harness parameters that are not CONFIG.md inputs travel in the case under the names of ``HARNESS``.
"""

from __future__ import annotations

from engine.errors import UserError

# Harness parameters (columns of data/measured/parallel.csv beside CONFIG.md's) and their defaults.
HARNESS = {
    "rank": 0,  # the global rank measured
    "tp_plan": "dtensor",  # dtensor (torchtitan's parallelize_module plan) | hf (transformers' tp_plan)
    "ddp_bucket_cap_mb": 25,  # DDP's default
    "ddp_grad_as_bucket_view": False,  # DDP's default
    "fsdp_param_dtype": "",  # MixedPrecisionPolicy.param_dtype ("" = the parameters' own dtype)
    "fsdp_reduce_dtype": "",  # MixedPrecisionPolicy.reduce_dtype ("" = param_dtype)
    "fsdp_wrap": "blocks",  # blocks: fully_shard on each decoder block, then the root; hf: transformers' plan;
    # fsdp1: FSDP1 FullyShardedDataParallel from rank 0's host copy (parallel_apply.apply_fsdp1, fsdp1_init.py)
}
FSDP_WRAPS = ("blocks", "hf", "fsdp1")
TP_PLANS = ("dtensor", "hf")
DTYPES = ("", "float32", "bfloat16", "float16")
# Recipe knobs the multi-GPU paths run only at their defaults (the single-GPU harness measures the others).
PLAIN_RECIPE = {"optimizer_impl": "foreach", "loss_impl": "standard", "zero_grad": "none",
                "optimizer_in_backward": False, "activation_offload": False, "checkpoint_every": 1}


def needs_world(c: dict) -> bool:
    """Whether ``c`` runs on the simulated world (any parallel degree, ZeRO/FSDP, or experts)."""
    return (any(c[k] > 1 for k in ("n_gpus", "dp", "tp", "pp", "cp", "ep")) or c["zero_stage"] > 0
            or c["framework"] == "fsdp" or c["n_experts"] > 0)


def with_harness(c: dict) -> dict:
    """``c`` with every harness parameter present (defaults filled, types coerced)."""
    out = {**HARNESS, **{k: v for k, v in c.items() if v not in (None, "") or k not in HARNESS}}
    out["rank"] = int(out["rank"])
    out["ddp_bucket_cap_mb"] = float(out["ddp_bucket_cap_mb"])
    if isinstance(out["ddp_grad_as_bucket_view"], str):
        out["ddp_grad_as_bucket_view"] = out["ddp_grad_as_bucket_view"].strip().lower() == "true"
    return out


def world_size(c: dict) -> int:
    """GPUs in the simulated world: dp * tp * pp * cp (experts are sharded inside dp * tp)."""
    return c["dp"] * c["tp"] * c["pp"] * c["cp"]


def check(c: dict) -> None:
    """UserError (one line) for a layout the harness cannot run."""
    h = with_harness(c)
    t, p, cp, ep, d = c["tp"], c["pp"], c["cp"], c["ep"], c["dp"]
    if min(t, p, cp, ep, d) < 1:
        raise UserError("parallel degrees (tp, pp, cp, ep, dp) must be at least 1")
    if c["n_gpus"] != world_size(c):
        raise UserError(f"n_gpus={c['n_gpus']} must equal dp*tp*pp*cp = {world_size(c)}")
    if not 0 <= h["rank"] < world_size(c):
        raise UserError(f"rank={h['rank']} is outside the world of {world_size(c)} GPUs")
    if h["tp_plan"] not in TP_PLANS:
        raise UserError(f"tp_plan={h['tp_plan']!r} is unknown; accepted: {', '.join(TP_PLANS)}")
    if h["fsdp_wrap"] not in FSDP_WRAPS:
        raise UserError(f"fsdp_wrap={h['fsdp_wrap']!r} is unknown; accepted: {', '.join(FSDP_WRAPS)}")
    for k in ("fsdp_param_dtype", "fsdp_reduce_dtype"):
        if h[k] not in DTYPES:
            raise UserError(f"{k}={h[k]!r} is unknown; accepted: {', '.join(repr(x) for x in DTYPES)}")
    if not needs_world(c):
        if c["sp"] or c["loss_parallel"]:
            raise UserError("sp and loss_parallel need tp > 1")
        if h["fsdp_wrap"] == "fsdp1":
            raise UserError("fsdp_wrap='fsdp1' needs FSDP: framework='fsdp' or a zero_stage")
        return
    if c["ffn_type"] != "swiglu" or c["norm_type"] != "rmsnorm":
        raise UserError(f"{_layout(c)}: multi-GPU layouts and experts are measured on Llama-style models "
                        "(swiglu + rmsnorm: Llama, Qwen2, Mixtral, Qwen-MoE, DeepSeek), whose module names the "
                        "TP and pipeline plans use, not on GPT-2")
    if c["framework"] not in ("pytorch", "fsdp"):
        raise UserError(f"framework={c['framework']!r} cannot be measured on several GPUs; accepted: pytorch, fsdp")
    for k, v in PLAIN_RECIPE.items():
        if c[k] != v:
            raise UserError(f"{k}={c[k]!r} is measured on one GPU only; multi-GPU layouts run {k}={v!r}")
    if c["checkpointing"] not in ("none", "full"):
        raise UserError("multi-GPU layouts are measured with checkpointing 'none' or 'full'")
    if c["lora_rank"] and (c["tp"] > 1 or c["pp"] > 1 or c["cp"] > 1 or c["ep"] > 1 or c["n_experts"]):
        raise UserError("LoRA is measured on one GPU or data parallel (DDP, FSDP2), not with tp, pp, cp or experts")
    if c["precision"] not in ("fp32", "bf16", "amp_bf16"):
        raise UserError(f"precision={c['precision']!r}: multi-GPU layouts are measured in fp32, bf16 or amp_bf16")
    if c.get("fsdp_groups", "root") == "split" and (c["tied_embeddings"] or c["ep"] > 1 or c["pp"] > 1
                                                     or h["fsdp_wrap"] != "blocks"):
        raise UserError("fsdp_groups='split' is measured with untied embeddings under fsdp_wrap 'blocks', "
                        "without pipeline or expert parallelism")
    _check_layout(c, h)


def _layout(c: dict) -> str:
    """The layout's non-default settings, e.g. ``n_gpus=8, dp=8`` (names an error after the case)."""
    parts = [f"{k}={c[k]}" for k in ("n_gpus", "dp", "tp", "pp", "cp", "ep") if c[k] > 1]
    parts += [f"{k}={c[k]}" for k in ("zero_stage", "n_experts") if c[k]]
    parts += [f"framework={c['framework']}"] if c["framework"] != "pytorch" else []
    return ", ".join(parts) or "one GPU"


def _check_layout(c: dict, h: dict) -> None:
    t, p, cp, ep, d, z = c["tp"], c["pp"], c["cp"], c["ep"], c["dp"], c["zero_stage"]
    # FSDP2 is framework 'fsdp' with a MixedPrecisionPolicy under amp (bf16 parameters, as torchtitan runs it),
    # or framework 'pytorch' at zero_stage 2/3: fp32 parameters under torch.autocast, no MixedPrecisionPolicy.
    fsdp = c["framework"] == "fsdp" or z > 0
    if fsdp and z not in (2, 3) and not (z == 0 and h["fsdp_wrap"] == "fsdp1"):
        raise UserError(f"zero_stage={z} has no PyTorch implementation; FSDP2 is zero_stage 3 (FULL_SHARD) or 2 "
                        "(SHARD_GRAD_OP)")
    amp = c["precision"].startswith("amp")
    if c["framework"] == "pytorch" and z and h["fsdp_param_dtype"]:
        raise UserError("framework='pytorch' with zero_stage is FSDP2 under torch.autocast, no MixedPrecisionPolicy: "
                        "fsdp_param_dtype must be empty (framework='fsdp' sets one)")
    if c["framework"] == "fsdp" and amp and not h["fsdp_param_dtype"] and h["fsdp_wrap"] != "fsdp1":
        raise UserError("framework='fsdp' under amp is FSDP2 with a MixedPrecisionPolicy (fsdp_param_dtype); "
                        "FSDP2 under torch.autocast is framework='pytorch' with zero_stage 2 or 3 (FSDP1 runs either: "
                        "fsdp_wrap='fsdp1', as accelerate with mixed_precision 'no' and the Trainer's bf16=True)")
    if c["offload"] == "optimizer":
        raise UserError("offload='optimizer' has no FSDP2 form; FSDP2's CPUOffloadPolicy is offload='optimizer_params'")
    if c["offload"] != "none" and not (fsdp and t == p == cp == ep == 1):
        raise UserError("offload is measured with FSDP2 alone (framework='fsdp', tp=pp=cp=ep=1)")
    if (c["sp"] or c["loss_parallel"]) and t == 1:
        raise UserError("sp and loss_parallel need tp > 1")
    if t > 1 and h["tp_plan"] == "hf" and (c["sp"] or c["loss_parallel"]):
        raise UserError("transformers' tp_plan has no sequence parallelism and gathers the logits: "
                        "sp and loss_parallel need tp_plan='dtensor'")
    if t > 1 and c["tied_embeddings"]:
        raise UserError("tensor parallelism is measured on untied embeddings (a tied weight cannot take both "
                        "the embedding's and the head's sharding)")
    if p > 1:
        from engine.checks.measure.parallel_pipeline import check as check_pipeline

        if t > 1 or cp > 1 or ep > 1 or d > 1:
            raise UserError("pipeline parallelism is measured alone (tp=cp=ep=dp=1)")
        check_pipeline(c)
        return
    if c["pp_schedule"] != "1f1b" or c["vpp"] != 1 or c["pp_first_layers"] or c["pp_last_layers"]:
        raise UserError("pp_schedule, vpp, pp_first_layers and pp_last_layers need pp > 1")
    if ep > 1:
        if not c["n_experts"]:
            raise UserError("ep > 1 needs experts (n_experts > 0)")
        if not fsdp or z != 3 or t > 1 or cp > 1:
            raise UserError("expert parallelism is measured as transformers runs it: framework='fsdp', "
                            "zero_stage=3, tp=cp=1 (DistributedConfig(fsdp_size=dp, ep_size=ep))")
        if d % ep or c["n_experts"] % ep:
            raise UserError(f"ep={ep} must divide dp={d} and n_experts={c['n_experts']}")
        if h["fsdp_wrap"] != "hf" or (h["fsdp_param_dtype"], h["fsdp_reduce_dtype"]) not in (("", ""),
                                                                                             ("bfloat16", "float32")):
            raise UserError("expert parallelism runs transformers' FSDP plan (fsdp_wrap='hf'), whose mixed precision "
                            "is bf16 parameters with fp32 reduction or none")
        return
    if h["fsdp_wrap"] == "hf":
        raise UserError("fsdp_wrap='hf' (transformers' FSDP plan) is measured with expert parallelism only")
    if h["fsdp_wrap"] == "fsdp1" and (not fsdp or t > 1 or p > 1 or cp > 1 or z == 1 or c["fsdp_groups"] != "root"):
        raise UserError("fsdp_wrap='fsdp1' (FSDP1, FullyShardedDataParallel) is measured on data parallelism alone: "
                        "framework='fsdp' (or a zero_stage), tp=pp=cp=1, zero_stage 0 (NO_SHARD), 2 or 3, "
                        "fsdp_groups='root'")
    if cp > 1:
        if not fsdp or t > 1:
            raise UserError("context parallelism is measured with FSDP2 over dp*cp (framework='fsdp', tp=1)")
        if c["attention"] != "flash" or c["precision"] == "fp32":
            raise UserError("context parallelism runs ring attention over the flash kernel: attention='flash' "
                            "and a 16-bit precision")
        if c["seq_len"] % (2 * cp):
            raise UserError(f"seq_len={c['seq_len']} must divide by 2*cp={2 * cp} (load-balanced ring attention)")
        return
    if t > 1:
        if c["n_experts"]:
            raise UserError("experts are measured with expert parallelism (ep), not tp")
        if c["n_heads"] % t or c["n_kv_heads"] % t:
            raise UserError(f"tp={t} must divide n_heads={c['n_heads']} and n_kv_heads={c['n_kv_heads']}")
        if c["sp"] and c["seq_len"] % t:
            raise UserError(f"sp: seq_len={c['seq_len']} must divide by tp={t}")
        if d > 1 and not fsdp:
            raise UserError("tp with dp > 1 is measured as FSDP2 + TP (framework='fsdp')")
        if h["tp_plan"] == "hf" and d > 1:
            raise UserError("tp_plan='hf' is measured with dp=1")
        return
    if d == 1 and not fsdp and not c["n_experts"]:
        raise UserError("a one-GPU layout is measured by the single-GPU harness")
