"""The measured multi-GPU and MoE set: one rank of real multi-GPU training steps, measured without a GPU.

Example:
    memsim measure --set parallel -o data/measured/parallel.csv
    memsim measure --set parallel -o /tmp/pp.csv --only pp_

Each case is ``measure_case(case, "fake")``: one rank of a world simulated in one process under the fake
process group, with fake tensors and CUDA's dispatch emulated (``parallel_run.py``; data/measured/PARALLEL.md
says how and what differs from a GPU). One row per (case, rank): ``case_id``, ``family``, the rank and the
pipeline stages it holds, every resolved configuration column (CONFIG.md names), the harness parameters
(``parallel.HARNESS``), the ``measured_*`` columns of cpu_fake.csv and the rank's anatomy columns.
The cases are listed in reference_parallel_cases.py.
"""

from __future__ import annotations

from engine.checks.measure.reference_set import CONFIG_COLUMNS, MEASURED_COLUMNS

LAYOUT_COLUMNS = [
    "pp_schedule", "vpp", "pp_first_layers", "pp_last_layers", "loss_parallel", "top_k", "moe_d_ff",
    "n_shared_experts", "shared_expert_gate", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
    "qk_rope_head_dim", "v_head_dim", "qk_norm", "capacity_factor", "fsdp_groups", "grad_sync",
]
HARNESS_COLUMNS = ["tp_plan", "ddp_bucket_cap_mb", "ddp_grad_as_bucket_view", "fsdp_param_dtype",
                   "fsdp_reduce_dtype", "fsdp_wrap", "ep_implementation", "pp_layers"]


def columns() -> list[str]:
    """The CSV header of parallel.csv (the anatomy columns are parallel_summary's, which imports torch)."""
    from engine.checks.measure.parallel_summary import EXTRA_COLUMNS

    return ["case_id", "family", "rank", "pp_stage", *CONFIG_COLUMNS, *LAYOUT_COLUMNS, *HARNESS_COLUMNS,
            *MEASURED_COLUMNS, *EXTRA_COLUMNS]


def harness_fields(c: dict) -> dict:
    """The harness columns of a resolved case: defaults filled, the pipeline split written out."""
    from engine.checks.measure.parallel import with_harness
    from engine.checks.measure.parallel_pipeline import stage_indices, stage_layers

    h = with_harness(c)
    out = {k: h[k] for k in ("tp_plan", "ddp_bucket_cap_mb", "ddp_grad_as_bucket_view", "fsdp_param_dtype",
                             "fsdp_reduce_dtype", "fsdp_wrap")}
    out["ep_implementation"] = "all_to_all" if c["ep"] > 1 else ""
    if c["pp"] > 1:
        layers = stage_layers(c)
        out["pp_layers"] = " ".join(map(str, layers))
        out["pp_stage"] = " ".join(map(str, stage_indices(c, c["rank"])))
        out["pp_first_layers"], out["pp_last_layers"] = layers[0], layers[-1]  # the split made explicit
    else:
        out["pp_layers"], out["pp_stage"] = "", ""
    return out


def measure_row(cid: str, family: str, case: dict, device: str = "fake") -> dict:
    """One CSV row: the measured case with its id, family and harness columns (one rank: device 'fake' only)."""
    from engine.checks.measure.measure import measure_case

    row = measure_case(case, device)
    return {"case_id": cid, "family": family, **row, **harness_fields(row)}
