"""Answer.AI's fsdp_qlora runs traced on the CPU with FSDP1, against the peaks it measured on GPUs and memsim.

    python -m engine.checks.measure.fsdp1_probe                       # the 7B rows, 20-30 min on two cores
    python -m engine.checks.measure.fsdp1_probe aai-3090-llama2-7b-lora-c2048-b6 ...

Each hardware row of data/golden/hardware.csv from Answer.AI (`aai-`) is a configuration of fsdp_qlora's train.py
at 3afe102 with its peak reserved (or allocated) memory on rank 0 of two RTX 3090/4090s. The probe runs it through
`memsim measure`'s simulated world with `fsdp_wrap = fsdp1`: the FSDP1 wrapping train.py does
(parallel_apply.apply_fsdp1), rank 0 bringing its host copy of the model to the GPU as FSDP1 initialises
(fsdp1_init.py), and two training steps of the row's recipe (LoRA or QLoRA, checkpointing, outputs_held,
shifted_logits); the log is replayed through the caching-allocator model from the start of FSDP1's
initialisation, each allocation on the stream FSDP1 made it on (allocator_replay.py). Printed per row: the GPU's
figure, the trace's allocated and reserved peaks, memsim's, and the errors of both against the GPU.
Findings: data/measured/PARALLEL.md, "FSDP1 as fsdp_qlora runs it".

What the harness does not run as train.py did: its checkpointing is transformers' non-reentrant one (train.py
wraps each decoder layer in checkpoint_wrapper with CheckpointImpl.REENTRANT). FSDP1's CPU offload runs with its
host-device copies emulated (fsdp1_init.offloaded_shards).
"""

from __future__ import annotations

import sys

from engine.checks.measure.probe_cli import print_reports
from engine.errors import UserError

GIB = 2**30


def aai_rows(case_ids: list[str] | None = None) -> list[dict]:
    """The Answer.AI hardware rows named, or by default those of the 7B models (Llama 2, Mistral)."""
    from engine.checks.hardware import hardware_rows

    rows = hardware_rows({"answerai"})
    if case_ids:
        known = {r["case_id"]: r for r in rows}
        missing = [c for c in case_ids if c not in known]
        if missing:
            raise UserError(f"no Answer.AI hardware row {', '.join(missing)}; known: {', '.join(known)}")
        return [known[c] for c in case_ids]
    return [r for r in rows if r["model"] in ("llama-2-7b", "mistral-7b-v0.2")]


def inputs_of(row: dict) -> dict:
    """The row's CONFIG.md inputs, as `memsim validate --set hardware` evaluates them."""
    from engine.checks.validate import config_of

    return config_of(row)


def case_of(row: dict) -> dict:
    """The row as a `memsim measure` case: its inputs (the GPU aside), the catalog model's dims, FSDP1 wrapping."""
    from engine.catalogs.catalog import model_fields, resolve_model

    case = {k: v for k, v in inputs_of(row).items() if k != "gpu"}
    return {**model_fields(resolve_model(case["model"])), **case, "fsdp_wrap": "fsdp1"}


def report(row: dict) -> str:
    """One line: the GPU's figure, the trace's and memsim's, and their errors against the GPU's; then what the replay
    holds once FSDP1's initialisation is over (reserved, allocated: the states, and the cache training starts with).
    The trace is replayed on a device of the row's GPU (its capacity less memsim's overhead outside PyTorch): where
    the cache would outgrow it, the allocator frees its cached blocks and retries, as on the GPU."""
    from engine.ask.evaluate import evaluate_cases
    from engine.checks.hardware import compared_bytes
    from engine.checks.measure.allocator_replay import log_events, replay_events, replay_log
    from engine.checks.measure.breakdown import ALLOCATOR_CONFIGS
    from engine.checks.measure.buffer_tags import stream_of
    from engine.checks.measure.case import resolve
    from engine.checks.measure.parallel_run import run_rank
    from engine.checks.measure.parallel_summary import summarize

    measured = float(row["value_gib"]) * GIB
    result = evaluate_cases([inputs_of(row)])[0]
    memsim = compared_bytes(row["metric"], result, measured)
    c = resolve(case_of(row))
    run = run_rank(c)
    allocated = summarize(run, c)["measured_allocated_peak_bytes"]
    device = result["capacity_bytes"] - result["overhead_bytes"]
    config, streams, marks = ALLOCATOR_CONFIGS[c["allocator"]], stream_of(run.lb), run.lb.marks
    reserved = replay_log(run.lb, config, capacity_bytes=device, stream_of=streams).reserved_peak_bytes
    events = log_events(run.lb.records, marks["end1"], marks["init"])
    init_end = max(i for i, e in enumerate(events) if e[0] <= marks["step0"])
    after_init, _ = replay_events(events, config, device, streams, stop_after=init_end)
    trace = allocated if row["metric"] == "peak_allocated" else reserved
    if row["metric"] == "total_per_gpu":  # a reading of the whole GPU: the memory outside PyTorch too (memsim's)
        trace += result["overhead_bytes"]
    err = lambda x: f"{100 * (x - measured) / measured:+6.1f}%"  # noqa: E731
    return (f"{row['case_id']:44s} {row['metric']:14s} GPU {measured / GIB:6.2f}  trace {trace / GIB:6.2f} "
            f"({allocated / GIB:5.2f} allocated) {err(trace)}  memsim {memsim / GIB:6.2f} {err(memsim)}  "
            f"after init {after_init.reserved.current >> 20} MiB reserved, {after_init.allocated.current >> 20} MiB "
            "allocated")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return print_reports(lambda: map(report, aai_rows(argv)))


if __name__ == "__main__":
    sys.exit(main())
