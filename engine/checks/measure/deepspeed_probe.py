"""DeepSpeed ZeRO steps traced on the CPU: what DeepSpeed itself allocates beside the model, against memsim.

    pip install 'memsim[deepspeed]'
    python -m engine.checks.measure.deepspeed_probe            # ZeRO-1, -2, -3 and two options, 3 minutes

DeepSpeed 0.19 runs on the CPU (its CPU accelerator) over torch.distributed's fake process group: one rank of a
4-rank data-parallel world whose collectives return at once, so every buffer DeepSpeed makes for them is
allocated as on a GPU rank. A small Llama (transformers' LlamaForCausalLM, real CPU tensors) runs two steps of
`deepspeed.initialize` with `bf16.enabled` and torch's AdamW under `LiveBytes`; the probe reports DeepSpeed's
own buffers of the second step (the flat 16-bit weights, the fp32 master partition and moments, the reduce
bucket: when each is born and dies) and memsim's figures for the same configuration (framework = deepspeed,
precision = amp_bf16, dp 4). Not the activations: memsim's `deepspeed` assumes Megatron-DeepSpeed's fused kernels,
this model is transformers' own. Findings: data/measured/PARALLEL.md, "DeepSpeed's reduce bucket".
"""

from __future__ import annotations

import os
import sys

from engine.checks.measure.probe_cli import print_reports

WORLD = 4
DIMS = {"n_layers": 4, "d_model": 512, "n_heads": 8, "n_kv_heads": 8, "d_ff": 1408, "vocab": 8192,
        "ffn_type": "swiglu", "seq_len": 256, "micro_batch": 2}
BIG = 100 * 2**20  # a buffer of DeepSpeed's own: larger than any tensor of this model
# (ZeRO stage, zero_optimization options, which are also memsim inputs of the same name)
CASES = [(1, {}), (2, {}), (3, {}), (2, {"overlap_comm": True, "reduce_bucket_size": 100_000_000}),
         (3, {"overlap_comm": True, "reduce_bucket_size": 100_000_000})]


def run_zero(stage: int, zero_options: dict):
    """(LiveBytes, parameters) of two ZeRO-`stage` steps on rank 0 of a fake 4-rank world; the log marks each
    step's start (step<n>), its optimizer step (optimizer<n>) and its end (end<n>)."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.checks.measure.tracker import LiveBytes

    for k, v in {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": str(WORLD), "MASTER_ADDR": "localhost",
                 "MASTER_PORT": "29511"}.items():
        os.environ.setdefault(k, v)
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    import deepspeed

    d = DIMS
    cfg = LlamaConfig(hidden_size=d["d_model"], intermediate_size=d["d_ff"], num_hidden_layers=d["n_layers"],
                      num_attention_heads=d["n_heads"], num_key_value_heads=d["n_kv_heads"], vocab_size=d["vocab"])
    ds_config = {"train_micro_batch_size_per_gpu": d["micro_batch"], "gradient_accumulation_steps": 1,
                 "bf16": {"enabled": True}, "zero_optimization": {"stage": stage, **zero_options},
                 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}
    torch.manual_seed(0)
    with LiveBytes() as lb:
        model = LlamaForCausalLM(cfg)
        n_params = sum(p.numel() for p in model.parameters())
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config,
                                               dist_init_required=False)
        ids = torch.randint(0, d["vocab"], (d["micro_batch"], d["seq_len"]))
        for step in range(2):
            lb.step = step
            lb.mark(f"step{step}")
            lb.phase = "forward"
            loss = engine(input_ids=ids, labels=ids).loss
            lb.phase = "backward"
            engine.backward(loss)
            lb.mark(f"optimizer{step}")
            lb.phase = "optimizer"
            engine.step()
            del loss
            lb.mark(f"end{step}")
    return lb, n_params


def memsim_figures(stage: int, inputs: dict) -> dict:
    """memsim's states and reduce bucket for the probed configuration."""
    from engine.ask.evaluate import evaluate_case
    from engine.model.levels import rank_terms

    r = evaluate_case({**DIMS, "framework": "deepspeed", "precision": "amp_bf16",
                       "zero_stage": stage, "n_gpus": WORLD, "optimizer": "adamw", "attention": "flash", **inputs})
    terms = rank_terms(r["record"])
    return {"weight": r["weight_bytes"], "grad": r["grad_bytes"], "optimizer": r["optimizer_bytes"],
            "bucket": terms.bucket_bytes}


def death(lb, r) -> str:
    """When a record died, against the marks of the step it was born in."""
    if r.died is None:
        return "alive to the end"
    when = "before" if r.died < lb.marks.get(f"optimizer{r.step}", -1) else "after"
    return f"freed {when} that step's optimizer step"


def report(stage: int, zero_options: dict) -> list[str]:
    lb, n_params = run_zero(stage, zero_options)
    start, end = lb.marks["step1"], lb.marks["end1"]
    own = [r for r in lb.records if r.nbytes >= BIG]
    lines = [f"ZeRO-{stage} {zero_options or ''}: {n_params:,} parameters, dp {WORLD}"]
    for r in own:
        lines.append(f"  {r.nbytes:>13,} B  {r.dtype:<9} {str(r.shape):<14} born in step {r.step}'s {r.phase}, "
                     f"{death(lb, r)}")
    m = memsim_figures(stage, zero_options)
    for name, tick in (("as step 1 begins", start), ("after it", end)):
        kept = [r for r in lb.records if r.born < tick and (r.died is None or r.died > tick) and r.nbytes < BIG]
        half = sum(r.nbytes for r in kept if r.dtype == "bfloat16")
        fp32 = sum(r.nbytes for r in kept if r.dtype == "float32")
        lines.append(f"  {name}: bf16 {half:,} B, fp32 {fp32:,} B")
    lines.append(f"  memsim: weight_bytes {m['weight']:,}, grad_bytes {m['grad']:,}, optimizer_bytes "
                 f"{m['optimizer']:,} (fp32 master + m + v of the 1/{WORLD} partition), reduce bucket {m['bucket']:,}")
    return lines


def main() -> int:
    try:
        import deepspeed  # noqa: F401
    except ImportError as err:
        print(f"memsim: error: the DeepSpeed probe needs deepspeed: pip install 'memsim[deepspeed]' ({err})",
              file=sys.stderr)
        return 2
    return print_reports(lambda: ("\n".join(report(stage, options)) for stage, options in CASES))


if __name__ == "__main__":
    sys.exit(main())
