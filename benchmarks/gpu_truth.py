"""Real peaks on a CUDA GPU for the committed single-GPU cases: the one script a session lent a GPU runs.

    python3 benchmarks/gpu_truth.py OUT_DIR                  # on the GPU machine, in the repository's root
    python3 benchmarks/gpu_truth.py OUT_DIR --budget-s 480 --only llama
    python3 benchmarks/gpu_truth.py /tmp/x --device fake --only gpt2-124m_fp32   # the same loop here, no GPU

Each case of `memsim measure --set single` (data/measured/cpu_fake.csv: its 96 cases, GPT-2, Llama-like and
Qwen2-like dims, recipes from fp32 to amp, eager to flash, LoRA, recomputation) runs the two training steps the
committed set traces on fake tensors, for real on cuda:0 (engine/checks/measure/cuda_run.py): the measured step's
`max_memory_allocated()` and `max_memory_reserved()`; and once the case is over (its tensors freed, its cache
emptied) the device's memory in use, `torch.cuda.mem_get_info()`'s total less free, less `memory_reserved()`: what
lives outside PyTorch's allocator, the CUDA context above all. (cuBLAS's workspaces are inside it since PyTorch
1.11, CublasHandlePool.cpp, where memsim's overhead_bytes counts them outside: about 66 MiB that the two columns
place differently.) Beside them, one row per case: the committed trace's allocated peak and its replayed reserved
peak (allocator_replay.py), and memsim's estimate on the catalog GPU `--gpu` (allocated, reserved, memory outside
PyTorch).

On a GPU it first runs what only a GPU runs (`--only like_s` picks them alone): `compile_cases()`, Llama-like
blocks compiled as torchtitan compiles them (without recomputation, under its op policy, under full recomputation;
the loss eager) beside the same steps eager, where memsim's compile terms (compiled.py,
selective_op.compiled_unsaved_bytes_per_token) meet the GPU's allocator; no trace stands beside these (a compiled
step cannot run on fake tensors).

A row is appended to OUT_DIR/gpu_truth.csv as soon as its case is measured, so a run stopped at its limit keeps
what it measured; a case that fails writes its error in the row and the loop goes on. No new case starts once
`--budget-s` seconds have passed. The end prints the medians: GPU against the trace (allocated, reserved) and
against memsim. Needs torch with CUDA, transformers and peft (the device machine's own; `*_version` columns say
which), numba, numpy and pyarrow; not polars, duckdb or altair.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.errors import UserError  # noqa: E402

GIB = 2**30
COLUMNS = ["case_id", "status", "seconds", "gpu_allocated_peak_bytes", "gpu_reserved_peak_bytes",
           "device_used_bytes", "gpu_reserved_now_bytes", "outside_allocator_bytes", "trace_allocated_peak_bytes",
           "trace_reserved_peak_bytes", "memsim_allocated_peak_bytes", "memsim_reserved_peak_bytes",
           "memsim_overhead_bytes", "gpu_name", "torch_version", "transformers_version", "peft_version", "error"]


SUMMARIES = [  # (what, the estimate's column, the truth's column)
    ("trace vs GPU, allocated", "trace_allocated_peak_bytes", "gpu_allocated_peak_bytes"),
    ("trace vs GPU, reserved", "trace_reserved_peak_bytes", "gpu_reserved_peak_bytes"),
    ("memsim vs GPU, allocated", "memsim_allocated_peak_bytes", "gpu_allocated_peak_bytes"),
    ("memsim vs GPU, reserved", "memsim_reserved_peak_bytes", "gpu_reserved_peak_bytes"),
    ("memsim vs GPU, outside", "memsim_overhead_bytes", "outside_allocator_bytes"),
]


def compile_cases() -> list[tuple[str, dict]]:
    """Llama-like dims, amp_bf16 with flash, each recomputation eager and compiled (the blocks; the loss eager)."""
    from engine.checks.measure.reference_set import MODELS

    out = []
    for model, seq, mb in (("llama-400m-like", 2048, 4), ("llama-3.2-1b-like", 4096, 2)):
        for checkpointing in ("none", "selective_op", "full"):
            for compiled in (False, True):
                case = {"model": model, **MODELS[model], "seq_len": seq, "micro_batch": mb, "precision": "amp_bf16",
                        "optimizer": "adamw", "attention": "flash", "checkpointing": checkpointing,
                        "compile": compiled, "compile_loss": False}
                out.append((f"{model}_s{seq}_b{mb}_{checkpointing}{'_compiled' if compiled else ''}", case))
    return out


def committed_rows() -> dict[str, dict]:
    """The committed single-GPU set (data/measured/cpu_fake.csv), by case id, as `memsim validate` reads it."""
    from engine.checks.validate import MEASURED_SETS, measured_rows

    return {row["case_id"]: row for row in measured_rows(sets={"single-gpu": MEASURED_SETS["single-gpu"]})}


def device_in_use(device: str) -> tuple[int, str]:
    """The bytes in use on the current CUDA device (total less free: every process, the CUDA context included) and
    its name; (0, '') without a GPU."""
    if device != "cuda":
        return 0, ""
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free), torch.cuda.get_device_name()


def memsim_estimate(inputs: dict, gpu: str) -> dict:
    """memsim on a case's resolved inputs (the committed row's, or what the harness resolved), as `memsim validate
    --set single` evaluates them, on `gpu`."""
    from engine.ask.evaluate import evaluate_cases
    from engine.checks.validate import config_of

    return evaluate_cases([{**config_of(inputs, by_dims=True), "gpu": gpu}])[0]


def measure(cid: str, case: dict, trace: dict, device: str, gpu: str) -> dict:
    """One row: the case run on `device`, the committed trace's peaks and memsim's estimate beside it."""
    import torch

    from engine.checks.measure.reference_set import measure_row

    row = {"case_id": cid, "trace_allocated_peak_bytes": trace.get("measured_allocated_peak_bytes", ""),
           "trace_reserved_peak_bytes": trace.get("measured_reserved_peak_bytes", "")}
    began, got = time.time(), {}
    try:
        got = measure_row(cid, "", case, device)
        used, name = device_in_use(device)
        reserved_now = torch.cuda.memory_reserved() if device == "cuda" else 0
        row.update(status="ok", gpu_allocated_peak_bytes=got["measured_allocated_peak_bytes"],
                   gpu_reserved_peak_bytes=got["measured_reserved_peak_bytes"], device_used_bytes=used or "",
                   gpu_reserved_now_bytes=reserved_now, outside_allocator_bytes=used - reserved_now if used else "",
                   gpu_name=name, **{k: got.get(k, "") for k in ("torch_version", "transformers_version",
                                                                 "peft_version")})
    except Exception as err:  # noqa: BLE001 (one case's failure is recorded, and the rest still run)
        row.update(status="error", error=" ".join(str(err).split())[:300])
    finally:
        if device == "cuda":
            torch.cuda.empty_cache()
    row["seconds"] = f"{time.time() - began:.1f}"
    inputs = trace or {k: v for k, v in got.items() if not k.startswith("measure") and not k.endswith("_version")}
    if not inputs:  # the case failed before the harness gave its inputs back: resolve them here
        from engine.checks.measure.measure import resolve_for

        try:
            inputs = resolve_for(case, device)
        except UserError:
            return row
    try:
        est = memsim_estimate(inputs, gpu)
        row.update(memsim_allocated_peak_bytes=est["allocated_peak_bytes"],
                   memsim_reserved_peak_bytes=est["reserved_peak_bytes"], memsim_overhead_bytes=est["overhead_bytes"])
    except UserError as err:
        row["error"] = (row.get("error", "") + f" memsim: {err}").strip()
    return row


def median_error(rows: list[dict], estimate: str, truth: str) -> str:
    errors = [100 * (float(r[estimate]) - float(r[truth])) / float(r[truth]) for r in rows
              if r.get("status") == "ok" and r.get(estimate) not in ("", None) and float(r[truth] or 0) > 0]
    if not errors:
        return "none"
    return (f"median |error| {statistics.median(abs(e) for e in errors):.1f}%, signed "
            f"{statistics.median(errors):+.1f}%, {min(errors):+.1f}% .. {max(errors):+.1f}% ({len(errors)} cases)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--only", default="", help="cases whose id contains this text")
    ap.add_argument("--budget-s", type=float, default=480.0, help="start no case after this many seconds")
    ap.add_argument("--device", default="cuda", choices=("cuda", "fake"), help="fake: the loop here, without a GPU")
    ap.add_argument("--gpu", default="h200-sxm-141gb", help="the catalog GPU memsim estimates on")
    args = ap.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu_truth: no CUDA GPU is visible (--device fake runs the loop without one)", file=sys.stderr)
            return 2
    from engine.checks.measure.reference_set import reference_cases

    cases = [(cid, case) for cid, _, case in reference_cases() if args.only in cid]
    if args.device == "cuda":  # torch.compile runs only there; first, as nothing else can measure it
        cases = [(cid, case) for cid, case in compile_cases() if args.only in cid] + cases
    if not cases:
        print(f"gpu_truth: no single-GPU case has {args.only!r} in its id", file=sys.stderr)
        return 2
    committed = committed_rows()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / "gpu_truth.csv"
    started, rows = time.time(), []
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for cid, case in cases:
            if time.time() - started > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s spent: {len(rows)} of {len(cases)} cases measured")
                break
            row = measure(cid, case, committed.get(cid, {}), args.device, args.gpu)
            writer.writerow(row)
            f.flush()
            rows.append(row)
            print(f"{cid:<52} {row['status']:<5} {row['seconds']:>6} s  allocated "
                  f"{float(row.get('gpu_allocated_peak_bytes') or 0) / GIB:7.3f}  reserved "
                  f"{float(row.get('gpu_reserved_peak_bytes') or 0) / GIB:7.3f} GiB {row.get('error', '')[:80]}",
                  flush=True)
    print(f"{sum(r['status'] == 'ok' for r in rows)} of {len(rows)} cases ok -> {out}")
    for title, estimate, truth in SUMMARIES:
        print(f"{title:<26} {median_error(rows, estimate, truth)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
