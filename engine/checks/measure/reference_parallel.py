"""The measured multi-GPU and MoE set: one rank of real multi-GPU training steps, measured without a GPU.

Example:
    python -m engine.checks.measure.reference_parallel -o data/measured/parallel.csv
    python -m engine.checks.measure.reference_parallel -o /tmp/pp.csv --only pp_

Each case is ``measure_case(case, "fake")``: one rank of a world simulated in one process under the fake
process group, with fake tensors and CUDA's dispatch emulated (``parallel_run.py``; data/measured/PARALLEL.md
says how and what differs from a GPU). One row per (case, rank): ``case_id``, ``family``, the rank and the
pipeline stages it holds, every resolved configuration column (CONFIG.md names), the harness parameters
(``parallel.HARNESS``), the ``measured_*`` columns of cpu_fake.csv and the rank's anatomy columns.
The cases are listed in reference_parallel_cases.py.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
import warnings

from engine.checks.measure.reference_parallel_cases import reference_cases
from engine.checks.measure.reference_set import CONFIG_COLUMNS, MEASURED_COLUMNS

LAYOUT_COLUMNS = [
    "pp_schedule", "vpp", "pp_first_layers", "pp_last_layers", "loss_parallel", "top_k", "moe_d_ff",
    "n_shared_experts", "shared_expert_gate", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
    "qk_rope_head_dim", "v_head_dim", "qk_norm", "capacity_factor",
]
HARNESS_COLUMNS = ["tp_plan", "ddp_bucket_cap_mb", "ddp_grad_as_bucket_view", "fsdp_param_dtype",
                   "fsdp_reduce_dtype", "fsdp_wrap", "ep_implementation", "pp_layers"]


def _columns() -> list[str]:
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


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def write_csv(rows: list[dict], path: str) -> None:
    """Write ``rows`` to ``path`` atomically (a temporary file in the same folder, then os.replace)."""
    columns = _columns()
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".csv.tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(columns)
            for r in rows:
                w.writerow([_cell(r.get(k)) for k in columns])
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def measure_row(cid: str, family: str, case: dict) -> dict:
    """One CSV row: the measured case with its id, family and harness columns."""
    from engine.checks.measure.measure import measure_case

    row = measure_case(case, "fake")
    return {"case_id": cid, "family": family, **row, **harness_fields(row)}


def main(argv: list[str] | None = None) -> None:
    """CLI: measure every case (or those whose id contains ``--only``) and write the CSV."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    rows, t0 = [], time.time()
    for cid, family, case in reference_cases():
        if a.only not in cid:
            continue
        t = time.time()
        rows.append(measure_row(cid, family, case))
        print(f"{cid:<90} {rows[-1]['measured_allocated_peak_bytes']:>16,} B  {time.time() - t:5.1f} s",
              file=sys.stderr)
    write_csv(rows, a.output)
    print(f"{len(rows)} rows in {time.time() - t0:.0f} s -> {a.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
