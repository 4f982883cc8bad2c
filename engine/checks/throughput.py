"""The time model against published training throughput (data/golden/throughput.csv, its sources in THROUGHPUT.md).

Each row is a real run with its configuration in CONFIG.md names and the figure its source printed. The
comparison is tokens per second per GPU, the definition-free figure: where a source printed only TFLOP/s, they are
turned into tokens/s with the source's own FLOP count (Narayanan et al.'s Eq. 3 for `hardware_eq3`, the PaLM
definition memsim's MFU uses for `model`). What a row leaves unsaid is filled in by `derivations`, and said.

The time model's calibrated constants (engine/model/time.py) are fitted here, on every comparable row
(`fit`), and checked against sources left out of the fit (`leave_one_source_out`):

    python -m engine.checks.throughput            the table and the summary per source
    python -m engine.checks.throughput --fit      the constants a fit finds now, beside those in time.py
    python -m engine.checks.throughput --loso     each source predicted by constants fitted without it
"""

import argparse
import csv
import math
import statistics
from contextlib import contextmanager

from engine import DATA_DIR
from engine.errors import UserError
from engine.inputs.codes import Invalid
from engine.inputs.resolve import resolve_case
from engine.inputs.vocabulary import INPUTS
from engine.model import time as time_model
from engine.model.flops import model_flops_per_token as flops_per_token
from engine.model.levels import evaluate_one, rank_terms, step_terms

THROUGHPUT = DATA_DIR / "golden" / "throughput.csv"
MEDIAN_TOL_PCT, MAX_TOL_PCT = 15.0, 30.0  # issue #16
# The constants of engine/model/time.py that `fit` calibrates, with the range a fit may move them in.
CALIBRATED = {
    "MATMUL_EFFICIENCY": (0.3, 1.0),
    "ATTENTION_EFFICIENCY": (0.05, 1.0),
    "MEMORY_PASSES": (0.5, 20.0),
}
# Rows the model misses by more than MAX_TOL_PCT, and why (THROUGHPUT.md "Calibration"): tests/test_time.py holds
# the set to exactly these, so a new miss, or a miss the model starts to explain, changes this list.
ZERO3_2021 = ("DeepSpeed ZeRO-3 (2021) without model parallelism on 384-2240 A100s: the printed TFLOP/s fall with the "
              "micro-batch as if the weights moved at 16-18 GB/s per GPU, a tenth of what NCCL's rings over a DGX "
              "A100's eight 200 Gb/s NICs carry (memsim's link model); PyTorch FSDP trains GPT-175B at 173-186 "
              "TFLOP/s per A100 with 1-2 samples per GPU (arXiv:2304.11277 sec. 5.4)")
GPT_OSS = ("gpt-oss-120b in Megatron-Bridge 25.11/26.02 on B200/B300: 10% MFU, 2.2x slower per token than the same "
           "recipe on GB200; nothing in the stated layout explains it (recompute, offload and kernels of the recipe "
           "are not stated)")
LLAMA3 = ("Llama 3 405B (arXiv:2407.21783 Table 4) ran a modified interleaved schedule (sec. 3.3.2: virtual stages and "
          "a tunable number of micro-batches, lighter first and last stages) whose micro-batch and virtual stages the "
          "table does not give: with 1F1B over the 32 or 16 one-sequence micro-batches its global batch allows, the "
          "model's bubble is 47-94% of the compute")
KNOWN_MISSES = {
    **{f"megatron-t2-zero3-{i}": ZERO3_2021 for i in range(1, 7)},
    "mbridge-b200-gptoss-120b": GPT_OSS,
    "mbridge-b300-gptoss-120b": GPT_OSS,
    **{f"llama3-405b-{i}": LLAMA3 for i in range(1, 4)},
    "mpt-h100-13b-2048-8g": ("MPT-13B at micro-batch 2 on 8 H100s: 37% slower than the model, which finds its FSDP "
                             "traffic (40% of the step) hidden behind the compute; the 13B run at micro-batch 10 and "
                             "the 7B run at 6 are within 12%"),
}
# Sources, by the case_id prefix THROUGHPUT.md gives each (one paper or repository each).
SOURCES = {
    "megatron-t": "Narayanan et al. 2021",
    "korthikanti": "Korthikanti et al. 2022",
    "llama3": "Llama 3",
    "torchtitan-a100": "torchtitan A100",
    "torchtitan-h100": "torchtitan H100",
    "torchtitan-h200": "torchtitan H200",
    "mpt": "MosaicML llm-foundry",
    "mbridge": "Megatron-Bridge",
}


def source_of(case_id: str) -> str:
    return next(name for prefix, name in SOURCES.items() if case_id.startswith(prefix))


def eq3_flops_per_token(row: dict) -> float:
    """Narayanan et al. 2021 (arXiv:2104.04473) Eq. 3, F = 96·B·s·l·h^2·(1 + s/6h + V/16lh), per token (B·s)."""
    layers, h, s, v = (float(row[k]) for k in ("n_layers", "d_model", "seq_len", "vocab"))
    return 96.0 * layers * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * layers * h))


def published_tokens_per_gpu_s(row: dict, model_flops_per_token: float | None) -> float | None:
    """The row's figure as tokens/s per GPU."""
    if row["tokens_per_gpu_s"]:
        return float(row["tokens_per_gpu_s"])
    if row["tflops_per_gpu"] and row["tflops_kind"] == "hardware_eq3":
        return float(row["tflops_per_gpu"]) * 1e12 / eq3_flops_per_token(row)
    if row["tflops_per_gpu"] and row["tflops_kind"] == "model" and model_flops_per_token:
        return float(row["tflops_per_gpu"]) * 1e12 / model_flops_per_token
    return None


def data_parallel(row: dict) -> int:
    if row["dp"]:
        return int(row["dp"])
    return int(row["n_gpus"]) // (int(row["tp"] or 1) * int(row["pp"] or 1) * int(row["cp"] or 1))


def derivations(row: dict) -> dict[str, tuple[object, str]]:
    """What a row leaves unsaid that its comparison needs, filled in explicitly: column -> (value, why).

    - micro_batch not printed (Narayanan et al. Table 1; Llama 3 Table 4; torchtitan's 405B tables): 1, the
      CONFIG.md default and what Megatron-LM's example scripts for these sizes set (--micro-batch-size 1);
    - grad_accum not printed, or printed but not global_batch / (micro_batch x dp) (one Megatron-Bridge row):
      global_batch / (micro_batch x dp), the definition every one of these sources uses and the batch its
      tokens/s counts (with pp, the micro-batches per pipeline flush);
    - torchtitan's H100 rows ran on H100s 'equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth'
      (their notes quote it): that bandwidth, not the catalog part's 3.35 TB/s;
    - torchtitan's interleaved row does not state its virtual stages: torchtitan's default, two per rank
      (torchtitan/parallelisms/pipeline_llama.py generate_split_points, 2024);
    - Megatron-Bridge's DGX-GB200 is an NVL72 rack, its NVLink domain 72 GPUs (the catalog's gb200 entry says so
      in its link_source but has no field for it: nvlink_domain_gpus).
    """
    out: dict[str, tuple[object, str]] = {}
    micro = int(row["micro_batch"]) if row["micro_batch"] else 1
    if not row["micro_batch"]:
        out["micro_batch"] = (1, "not stated; 1 assumed (CONFIG.md default)")
    if row["global_batch"]:
        accum, rest = divmod(int(row["global_batch"]), micro * data_parallel(row))
        printed = int(row["grad_accum"]) if row["grad_accum"] else None
        if rest == 0 and printed != accum:
            why = f"global_batch {row['global_batch']} / (micro_batch {micro} x dp {data_parallel(row)})"
            out["grad_accum"] = (accum, why if printed is None else f"printed {printed}, but {why}")
    if "2.4 TB/sec peak memory bandwidth" in row["notes"]:
        out["bandwidth_bytes_per_s"] = (2.4e12, "H100 96GB HBM2e at 2.4 TB/s (the source's hardware)")
    if row["pp_schedule"] == "interleaved" and not row["vpp"] and row["case_id"].startswith("torchtitan"):
        out["vpp"] = (2, "torchtitan's generate_split_points: two stages per rank for multi-stage schedules")
    if row["gpu"] == "gb200":
        out["nvlink_domain_gpus"] = (72, "DGX-GB200 is an NVL72 rack: NVLink across its 72 GPUs (gpus.toml "
                                         "link_source; the catalog has no field for it yet)")
    return out


def case_of(row: dict) -> dict:
    """The row's configuration: its CONFIG.md columns that are given (empty: the source does not say), and the
    derivations above."""
    case = {k: v for k, v in row.items() if k in INPUTS and v not in ("", None)}
    case.update({k: v for k, (v, _) in derivations(row).items()})
    return case


def throughput_rows() -> list[dict]:
    with open(THROUGHPUT, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def prepared(rows: list[dict]) -> list[dict]:
    """Each row resolved once: its record, rank and step terms, and the published tokens/s per GPU; `why_not`
    says why a row cannot be compared (else empty)."""
    out = []
    for row in rows:
        item = {"row": row, "source": source_of(row["case_id"]), "why_not": "", "record": None}
        try:
            record, _, _ = resolve_case(case_of(row))
        except UserError as err:
            out.append(item | {"why_not": f"input rejected: {err}", "reference": None})
            continue
        r = rank_terms(record)
        s = step_terms(record, r)
        item |= {"record": record, "rank": r, "step": s,
                 "reference": published_tokens_per_gpu_s(row, float(flops_per_token(record)))}
        if not s.runs:
            reason = Invalid(s.columns.invalid_reason).name.lower().replace("_", " ")
            item["why_not"] = f"not yet comparable: an invalid layout in memsim today ({reason})"
        elif row["confidence"] == "low":
            item["why_not"] = "low confidence: reported only"
        out.append(item)
    return out


def predicted(item: dict) -> float:
    """memsim's tokens/s per GPU for a prepared row, with time.py's constants as they are now."""
    record, r = item["record"], item["rank"]
    times = time_model.device_times(time_model.step_work(record, r), time_model.gpu_rates(record, r))
    return times.tokens_per_gpu_s


def throughput_results() -> list[dict]:
    """One result per row of throughput.csv, in validate's shape (engine/checks/validate.py) plus the source,
    the GPU, the derivations and, for a row not compared, why not. ok: within MAX_TOL_PCT (None: not compared)."""
    out = []
    for item in prepared(throughput_rows()):
        row = item["row"]
        mine = None if item["why_not"] or item["record"] is None else float(evaluate_one(item["record"])[3].times[1])
        theirs = item["reference"]
        compared = mine is not None and not math.isnan(mine) and bool(theirs)
        error = 100.0 * (mine - theirs) / theirs if compared else None
        out.append({"case_id": row["case_id"], "group": f"throughput:{item['source']}", "source": item["source"],
                    "gpu": row["gpu"], "metric": "tokens_per_gpu_s", "reference": theirs,
                    "memsim": mine if compared else None, "error_pct": error,
                    "ok": bool(abs(error) <= MAX_TOL_PCT) if compared else None,
                    "why_not": item["why_not"] or ("" if compared else "no comparable figure"),
                    "derived": "; ".join(f"{k} = {v} ({why})" for k, (v, why) in derivations(row).items())})
    return out


# --- calibration ------------------------------------------------------------------------------------------------


@contextmanager
def constants(values: dict[str, float]):
    """time.py's calibrated constants set to `values` for the plain-Python formulas (the compiled kernels keep
    the values in the file)."""
    saved = {name: getattr(time_model, name) for name in values}
    for name, value in values.items():
        setattr(time_model, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(time_model, name, value)


def log_errors(items: list[dict], values: dict[str, float]) -> list[float]:
    with constants(values):
        return [math.log(predicted(i) / i["reference"]) for i in items]


def fit(items: list[dict]) -> dict[str, float]:
    """The calibrated constants that best match `items` (prepared, comparable rows): least squares on the log of
    memsim's over the published tokens/s with a soft-L1 loss (scipy.optimize.least_squares), so a few rows the
    model cannot explain move the constants little; within CALIBRATED's ranges."""
    from scipy.optimize import least_squares

    names = list(CALIBRATED)
    lower = [CALIBRATED[n][0] for n in names]
    upper = [CALIBRATED[n][1] for n in names]
    start = [min(max(getattr(time_model, n), lo), hi) for n, lo, hi in zip(names, lower, upper)]
    found = least_squares(lambda x: log_errors(items, dict(zip(names, x))), start, bounds=(lower, upper),
                          loss="soft_l1", f_scale=0.1, diff_step=1e-3)
    return {n: float(v) for n, v in zip(names, found.x)}


def comparable(items: list[dict]) -> list[dict]:
    return [i for i in items if not i["why_not"] and i["reference"]]


def leave_one_source_out(items: list[dict] | None = None) -> dict[str, dict]:
    """Each source predicted by constants fitted on the others: source -> the constants and its rows' errors."""
    items = comparable(prepared(throughput_rows())) if items is None else items
    out = {}
    for source in dict.fromkeys(i["source"] for i in items):
        values = fit([i for i in items if i["source"] != source])
        held = [i for i in items if i["source"] == source]
        errors = [100.0 * math.expm1(e) for e in log_errors(held, values)]
        out[source] = {"constants": values, "errors": dict(zip((i["row"]["case_id"] for i in held), errors))}
    return out


# --- report -----------------------------------------------------------------------------------------------------


def summary(results: list[dict]) -> dict:
    """Median and max |error| of tokens/s per GPU per source, over every compared row ('all', with whether it meets
    issue #16's targets) and over all but the KNOWN_MISSES ('all but known misses')."""
    groups: dict[str, list[float]] = {}
    for r in results:
        if r["error_pct"] is not None:
            groups.setdefault(r["source"], []).append(abs(r["error_pct"]))
    compared = [r for r in results if r["error_pct"] is not None]
    groups["all"] = [abs(r["error_pct"]) for r in compared]
    groups["all but known misses"] = [abs(r["error_pct"]) for r in compared if r["case_id"] not in KNOWN_MISSES]
    out = {g: {"n": len(v), "median_abs_pct": statistics.median(v), "max_abs_pct": max(v)} for g, v in groups.items() if v}
    if "all" in out:
        out["all"]["meets_target"] = (out["all"]["median_abs_pct"] <= MEDIAN_TOL_PCT
                                      and out["all"]["max_abs_pct"] <= MAX_TOL_PCT)
    return out


def regressions(results: list[dict]) -> list[str]:
    """What `memsim validate` holds the set to: a compared row outside MAX_TOL_PCT that is not a known miss, or a
    median |error| over MEDIAN_TOL_PCT ('median'). Empty when the model is as good as it was calibrated."""
    out = [r["case_id"] for r in results if r["ok"] is False and r["case_id"] not in KNOWN_MISSES]
    total = summary(results).get("all")
    if total and total["median_abs_pct"] > MEDIAN_TOL_PCT:
        out.append(f"throughput median {total['median_abs_pct']:.1f}%")
    return out


def number(value, digits=0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def render(results: list[dict]) -> str:
    """The comparison as a text table (tokens/s per GPU), the rows not compared and why, the summary."""
    lines = [f"{'case':<40}{'GPU':<16}{'published':>11}{'memsim':>11}{'error':>9}  status"]
    for r in results:
        status = {True: "ok", False: "MISS", None: r["why_not"]}[r["ok"]]
        if r["ok"] is False and r["case_id"] in KNOWN_MISSES:
            status = "MISS (known, see THROUGHPUT.md)"
        error = f"{r['error_pct']:+8.1f}%" if r["error_pct"] is not None else " " * 9
        lines.append(f"{r['case_id']:<40}{r['gpu']:<16}{number(r['reference']):>11}{number(r['memsim']):>11}"
                     f"{error}  {status}")
    lines += ["", "tokens/s per GPU, |memsim - published| / published:"]
    for g, s in summary(results).items():
        lines.append(f"  {g:<26} n={s['n']:<4} median {s['median_abs_pct']:5.1f}%   max {s['max_abs_pct']:6.1f}%")
    missed = {r["case_id"] for r in results if r["ok"] is False}
    for why in dict.fromkeys(KNOWN_MISSES.values()):
        cases = [case for case, reason in KNOWN_MISSES.items() if reason == why and case in missed]
        if cases:
            lines.append(f"  known miss ({', '.join(cases)}): {why}")
    total = summary(results).get("all")
    if total:
        verdict = "meets" if total["meets_target"] else "misses"
        lines.append(f"  target (issue #16): median <= {MEDIAN_TOL_PCT:.0f}%, max <= {MAX_TOL_PCT:.0f}%: {verdict}")
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    """The same as markdown tables: per case, then per source."""
    lines = ["| case | GPU | published tokens/s/GPU | memsim | error | note |", "|---|---|---:|---:|---:|---|"]
    for r in results:
        error = f"{r['error_pct']:+.1f}%" if r["error_pct"] is not None else ""
        lines.append(f"| {r['case_id']} | {r['gpu']} | {number(r['reference'])} | {number(r['memsim'])} | {error} "
                     f"| {r['why_not']} |")
    lines += ["", "| source | cases | median abs error | max abs error |", "|---|---:|---:|---:|"]
    for g, s in summary(results).items():
        lines.append(f"| {g} | {s['n']} | {s['median_abs_pct']:.1f}% | {s['max_abs_pct']:.1f}% |")
    return "\n".join(lines)


def render_loso(loso: dict[str, dict]) -> str:
    lines = [f"{'left out':<26}{'n':>4}{'median':>9}{'max':>9}   constants fitted on the other sources"]
    held = []
    for source, found in loso.items():
        errors = [abs(e) for e in found["errors"].values()]
        held += errors
        values = ", ".join(f"{k.lower()} {v:.3g}" for k, v in found["constants"].items())
        lines.append(f"{source:<26}{len(errors):>4}{statistics.median(errors):>8.1f}%{max(errors):>8.1f}%   {values}")
    lines.append(f"{'every row, held out':<26}{len(held):>4}{statistics.median(held):>8.1f}%{max(held):>8.1f}%")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="memsim's time model against published training throughput")
    parser.add_argument("--fit", action="store_true", help="refit the calibrated constants on every comparable row")
    parser.add_argument("--loso", action="store_true", help="leave-one-source-out: each source held out of the fit")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.fit:
        found = fit(comparable(prepared(throughput_rows())))
        for name, value in found.items():
            print(f"{name:<22} fitted {value:.4f}   time.py {getattr(time_model, name)}")
    elif args.loso:
        print(render_loso(leave_one_source_out()))
    else:
        results = throughput_results()
        print(markdown(results) if args.markdown else render(results))


if __name__ == "__main__":
    main()
