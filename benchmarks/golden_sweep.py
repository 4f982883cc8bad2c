"""A golden 10^6-row sweep: per-column digests of every output, to prove a refactor changed no number.

    python benchmarks/golden_sweep.py            # compare against benchmarks/golden_sweep.json
    python benchmarks/golden_sweep.py --write    # record the digests (only when outputs change on purpose)

The spec crosses models (dense, MoE, MLA, GPT-2 with dropout), GPUs, layouts, precisions, optimizers,
frameworks, recomputation, attention kernels, LoRA, micro-batches, sequence lengths and
accumulation, layouts that cannot run included. Each column's digest is the sha256 of its values in index
order of the configurations (sorted by every axis, so the order of the axes in the index does not matter),
so a mismatch names the column that moved.
"""

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DIGESTS = Path(__file__).with_suffix(".json")

SPEC = """\
title = "golden sweep"

[axes]
model = ["gpt2", "llama-3.2-1b", "llama-3.1-8b", "mixtral-8x7b", "deepseek-v2-lite", "gemma-2-9b"]
gpu = ["h100-sxm-80gb", "rtx-4090"]
n_gpus = [1, 8, 64]
tp = [1, 8]
pp = [1, 4]
ep = [1, 2]
zero_stage = [0, 1, 3]
precision = ["amp_bf16", "bf16", "fp32"]
optimizer = ["adamw", "adafactor"]
framework = ["pytorch", "deepspeed", "megatron"]
checkpointing = ["none", "selective", "full"]
attention = ["flash", "eager"]
lora_rank = [0, 16]
micro_batch = [1, 4]
seq_len = [1024, 8192]
grad_accum = [1, 8]
"""
AXES = [line.split(" = ")[0] for line in SPEC.split("[axes]")[1].strip().splitlines()]
# Columns that exist in both the old and the new engine, compared value for value.
COLUMNS = [
    "dp", "n_gpus", "weight_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes", "temp_bytes",
    "allocated_peak_bytes", "reserved_peak_bytes", "overhead_bytes", "device_peak_bytes", "peak_phase",
    "capacity_bytes", "fits", "bottleneck", "host_bytes", "valid", "invalid_reason", "peak_grad_bytes",
    "peak_optimizer_bytes",
]


def digests(frame: pl.DataFrame) -> dict[str, str]:
    out = {}
    for name in COLUMNS:
        text = frame.get_column(name).cast(pl.String).fill_null("NULL").str.join("\n").item()
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def run() -> tuple[dict, int, float]:
    from engine.dataset.sweep import run_sweep

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "golden.toml"
        spec.write_text(SPEC)
        t0 = time.perf_counter()
        result = run_sweep(spec, Path(tmp) / "out", progress=False, say=lambda *_: None)
        seconds = time.perf_counter() - t0
        frame = pl.read_parquet(Path(tmp) / "out" / "*.parquet")
        frame = frame.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))
        frame = frame.sort([a for a in AXES])
        return digests(frame), result.total, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record the digests instead of comparing")
    args = ap.parse_args()
    got, total, seconds = run()
    print(f"{total:,} configurations swept in {seconds:.1f} s")
    if args.write:
        DIGESTS.write_text(json.dumps({"configurations": total, "digests": got}, indent=2) + "\n")
        print(f"digests -> {DIGESTS}")
        return 0
    want = json.loads(DIGESTS.read_text())["digests"]
    moved = [name for name in COLUMNS if got[name] != want[name]]
    print("every column unchanged" if not moved else f"changed: {', '.join(moved)}")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
