"""`memsim explain`: one configuration as a per-device breakdown a person reads in five seconds,
with what to change to make it fit."""

import json

import numpy as np

from engine.ask.evaluate import evaluate_case, evaluate_cases, python_value  # noqa: F401 (explain's API)
from engine.ask.suggest import combined, framework_line, framework_peaks, suggestions  # noqa: F401 (explain's API)
from engine.ask.temporaries import SOURCES, temporaries_at_peak
from engine.catalogs import catalog
from engine.dataset.columns import output_columns
from engine.inputs.codes import (
    INVALID_REASONS,
    Allocator,
    Ckpt,
    Component,
    Framework,
    Invalid,
    Phase,
    name_of,
)
from engine.inputs.vocabulary import INPUT_FIELDS, INPUTS, RECORD, spell
from engine.model.collectives import nvlink_domain
from engine.model.evaluation import eval_segment_bytes
from engine.model.levels import host_ram_per_gpu, rank_terms, recut_bytes, shape_terms, step_terms
from engine.model.loss import micro_batch_loss_bytes
from engine.model.outputs import OUTPUTS, TIME_COLUMNS
from engine.model.overhead import allocator_slack_bytes
from engine.model.params import param_count
from engine.model.peak import peak_of_ranks
from engine.model.split import trainable_params_per_gpu
from engine.model.streams import side_stream_slack_bytes

GIB = 2**30
COMPONENT_LABELS = {
    Component.WEIGHTS: "weights",
    Component.GRADS: "gradients",
    Component.OPTIMIZER: "optimizer states",
    Component.ACTIVATIONS: "activations",
    Component.TEMP: "temporaries + allocator slack",
    Component.OVERHEAD: "CUDA context, cuBLAS, NCCL",
}


def named_outputs(result: dict) -> dict:
    """Every output column as `memsim estimate` and a sweep's Parquet hold it: categories by name (peak_phase,
    bottleneck, invalid_reason), fits and valid as booleans, NULL as None."""
    arrays = {k: np.array([np.nan if result[k] is None else result[k]], dtype=np.float64 if k in TIME_COLUMNS
                          else np.int64) for k in OUTPUTS}
    return {k: column.to_pylist()[0] for k, column in output_columns(arrays).items()}


def breakdown(result: dict) -> list[tuple[str, int]]:
    """The device peak split into the parts people budget for, as they are live at the peak (they add up)."""
    r = result
    slack = r["reserved_peak_bytes"] - r["allocated_peak_bytes"]
    return [
        ("weights", r["weight_bytes"]),
        ("gradients", r["peak_grad_bytes"]),
        ("optimizer states", r["peak_optimizer_bytes"]),
        ("activations", r["activation_bytes"]),
        ("temporaries", r["temp_bytes"]),
        ("allocator slack", slack),
        ("CUDA context, cuBLAS, NCCL", r["overhead_bytes"]),
    ]


RELEASABLE = "gradients' and optimizer's own segments"  # param_blocks.py: released by the allocator before an OOM
# What the caching allocator reserves beyond the allocated peak, by cause, with where each comes from.
SLACK_SOURCES = {
    "rounding and fragmentation": "1/16 of the bytes that churn in a step (overhead.py allocator_slack_bytes; "
                                  "c10/cuda/CUDACachingAllocator.cpp)",
    "loss-sized block cut up": "one more block of the loss's largest size, whose freed segment smaller blocks "
                               "settle in between micro-steps (overhead.py allocator_slack_bytes, "
                               "loss.loss_block_bytes; the replayed traces, PARALLEL.md)",
    "loss blocks cut again": "the loss's other blocks made again after the first optimizer step's states settled in "
                             "their freed segments (overhead.py loss_recut_bytes; the replayed traces, PARALLEL.md)",
    "recompute's pinned segments": "under full recomputation, the FFN intermediates' segments each layer's kept "
                                     "input settles in, beyond the inputs (stage.py pinned_segment_bytes; the "
                                     "replayed traces, PARALLEL.md)",
    "step's reserve above the load's": "the step's own reserve where it exceeds the load's, the load's peak being "
                                       "the larger allocation: the run's reserve is the larger of the two "
                                       "(levels.step_terms, load.py)",
    "step's reserve above the save's": "the step's own reserve where it exceeds the save's, the save's peak being "
                                       "the larger allocation: the run's reserve is the larger of the two "
                                       "(levels.step_terms, save.py)",
    "training step's cache": "the training step's cached segments, kept while the evaluation's larger loss blocks "
                             "take segments of their own (levels.step_terms, evaluation.eval_segment_bytes; "
                             "RECIPES.md)",
    RELEASABLE: "the gradients and the optimizer step's buffers (under FSDP2 the reduce-scatter inputs) too large "
                "for any block forward and backward free, in segments of their own beside those blocks: whole free "
                "segments by turns, which the allocator releases and retries with before it reports out of memory "
                "(param_blocks.py; the replayed traces, PARALLEL.md)",
    "FSDP stream pools": "the sharded gradients and two neighbouring groups' all-gather buffers, cached on "
                         "FSDP's own streams (streams.py)",
}


def slack_parts(result: dict) -> list[tuple[str, int]]:
    """The allocator slack at the peak split by cause (the parts add up to reserved - allocated)."""
    slack = result["reserved_peak_bytes"] - result["allocated_peak_bytes"]
    if result["peak_phase"] == Phase.LOAD:
        return [("step's reserve above the load's", slack)] if slack > 0 else []
    if result["peak_phase"] == Phase.SAVE:
        return [("step's reserve above the save's", slack)] if slack > 0 else []
    rec = result["record"]
    r = rank_terms(rec)
    streams = side_stream_slack_bytes(r.side_stream_bytes, result["peak_grad_bytes"])
    p, holds_loss, last = peak_of_ranks(rec, r, True)
    releasable = step_terms(rec, r, shape_terms(rec, r)).releasable_bytes  # the homeless blocks' segments
    default_stream = slack - streams - releasable
    pinned = min(default_stream, p.pinned_bytes)  # the checkpointed inputs' segments (stage.pinned_segment_bytes)
    rest = default_stream - pinned  # the larger of the churn's share and the loss-sized blocks
    churn = allocator_slack_bytes(result["activation_bytes"] + result["temp_bytes"], 0, 0)
    recut = 0
    cause = "rounding and fragmentation" if rest <= churn else "loss-sized block cut up"
    if eval_segment_bytes(rec) > 0 and rest > churn:
        cause = "training step's cache"
    elif rest > churn and rec.allocator == Allocator.CACHING:
        block = micro_batch_loss_bytes(rec).block
        recut = min(rest, recut_bytes(rec, r, p if holds_loss else last, block))
    parts = ((cause, rest - recut), ("loss blocks cut again", recut), ("recompute's pinned segments", pinned),
             ("FSDP stream pools", streams), (RELEASABLE, releasable))
    return [(name, size) for name, size in parts if size > 0]


def too_large(result: dict) -> bool:
    """A row whose counts exceed 2^62: nothing about it is counted (int64 would wrap)."""
    return result["invalid_reason"] == Invalid.TOO_LARGE


def summary_line(result: dict) -> str:
    rec = result["record"]
    layout = f"dp {rec.dp}, tp {rec.tp}, pp {rec.pp}" + (f", cp {rec.cp}" if rec.cp > 1 else "") + (f", ep {rec.ep}" if rec.ep > 1 else "")
    method = [name_of(INPUTS["precision"].kind(rec.precision)), name_of(INPUTS["optimizer"].kind(rec.optimizer)),
              name_of(Framework(rec.framework))]
    if rec.zero_stage:
        method.append(f"ZeRO-{rec.zero_stage}")
    if rec.checkpointing != Ckpt.NONE:
        method.append(f"{name_of(Ckpt(rec.checkpointing))} recompute")
    if rec.compile:
        method.append("torch.compile" + ("" if rec.compile_loss else " (the blocks)"))
    if rec.lora_rank:
        method.append(f"LoRA r={rec.lora_rank}")
    if rec.base_quant:
        method.append(f"{name_of(INPUTS['base_quant'].kind(rec.base_quant))} base")
    gpu = result["gpu"]
    if rec.capacity_bytes != catalog.resolve_gpu(gpu)["hbm_bytes"]:  # --gpu-memory: a card the catalog lacks
        gpu += f" resized to {rec.capacity_bytes / GIB:.1f} GiB"
    return (
        f"{result['model']} ({'too many' if too_large(result) else format(param_count(rec) / 1e9, '.2f') + 'B'} params) on {rec.n_gpus} x {gpu} ({layout}); "
        f"{', '.join(method)}; micro-batch {rec.micro_batch}, seq {rec.seq_len}"
    )


def price_basis(case: dict, gpu: str, rec) -> dict:
    """Where cost_per_mtok's $/GPU-hour comes from: the catalog's dated source, or the case itself."""
    if case.get("usd_per_hour") not in (None, "", 0, "0"):
        return {"usd_per_gpu_hour": float(rec.usd_per_hour), "price_source": "given (usd_per_hour)", "price_date": None}
    entry = catalog.resolve_gpu(gpu)
    return {"usd_per_gpu_hour": entry.get("usd_per_hour"), "price_source": entry.get("price_source"),
            "price_date": entry.get("price_date")}


def explain(case: dict) -> dict:
    """The machine-readable explanation: breakdown, peak phase, bottleneck, fits and margin, suggestions."""
    r = evaluate_case(case)
    rec = r["record"]
    usable = r["usable_bytes"]
    result = {
        "summary": summary_line(r),
        "model": r["model"],
        "gpu": r["gpu"],
        "valid": bool(r["valid"]),
        "invalid_reason": INVALID_REASONS[Invalid(r["invalid_reason"])],
        "breakdown_bytes": dict(breakdown(r)) if r["allocated_peak_bytes"] >= 0 else {},
        "temporaries": [{"part": name, "bytes": size, "source": SOURCES[name]} for name, size in
                        temporaries_at_peak(rec, rank_terms(rec))] if r["temp_bytes"] >= 0 else [],
        "allocator_slack": [{"part": name, "bytes": size, "source": SLACK_SOURCES[name]} for name, size in
                            slack_parts(r)] if r["allocated_peak_bytes"] >= 0 else [],
        "outputs": named_outputs(r),
        "peak_phase": name_of(Phase(r["peak_phase"])) if r["peak_phase"] >= 0 else None,
        "bottleneck": COMPONENT_LABELS[Component(r["bottleneck"])] if r["bottleneck"] >= 0 else None,
        "fits": bool(r["fits"] == 1),
        "usable_bytes": usable,
        "margin_bytes": usable - r["device_peak_bytes"],
        "host_bytes": r["host_bytes"],
        "host_ram_bytes": int(host_ram_per_gpu(rec)),  # what one GPU of the job may fill on its node (0: unknown)
        "trainable_params_per_gpu": None if too_large(r) else int(trainable_params_per_gpu(rec)),
        **price_basis(case, r["gpu"], rec),
    }
    # of the reserve, the segments the allocator releases before it runs out (the slack's part, levels.step_terms)
    result["releasable_bytes"] = sum(p["bytes"] for p in result["allocator_slack"] if p["part"] == RELEASABLE)
    result["suggestions"] = [] if result["fits"] else suggestions(case, r)
    result["plan"] = [] if result["fits"] else combined(case, r)
    result["framework_peaks_bytes"] = framework_peaks(case, rec) if result["valid"] and not too_large(r) else {}
    result["framework_note"] = framework_line(result["framework_peaks_bytes"], name_of(Framework(rec.framework)))
    result["inputs"] = resolved_inputs(case, r)
    result["time_unknown"] = time_unknown_reason(rec, r["gpu"]) if r["step_time_s"] is None else None
    return result


def resolved_inputs(case: dict, r: dict) -> dict:
    """Every input as the configuration resolved it (CONFIG.md spellings): a recipe preset's inputs included, the
    model's dims and the GPU's attributes as the catalogs or the case give them."""
    rec = r["record"]
    out = {"model": r["model"], "gpu": r["gpu"], "recipe": str(case.get("recipe") or "none").strip() or "none"}
    out.update({f.name: spell(f.name, rec[f.name]) for f in INPUT_FIELDS if f.name in RECORD.names})
    return out


def render(result: dict) -> str:
    """The five-second table."""
    lines = [result["summary"], ""]
    if not result["valid"]:
        lines.append(f"CANNOT RUN: {result['invalid_reason']}")
        return "\n".join(lines)
    peak = result["outputs"]["device_peak_bytes"]
    lines.append(f"{'component':<30}{'GiB':>9}{'share':>8}")
    for label, size in result["breakdown_bytes"].items():
        lines.append(f"{label:<30}{size / GIB:>9.2f}{100 * size / peak:>7.1f}%")
        named = len(result["temporaries"]) > 1 or result["peak_phase"] in ("load", "save")  # what (temporaries.py)
        if label == "temporaries" and named:
            lines += [f"{'  ' + t['part']:<30}{t['bytes'] / GIB:>9.2f}" for t in result["temporaries"]]
        causes = [t["part"] for t in result["allocator_slack"]]
        if label == "allocator slack" and causes not in ([], ["rounding and fragmentation"]):  # why (overhead.py)
            lines += [f"{'  ' + t['part']:<30}{t['bytes'] / GIB:>9.2f}" for t in result["allocator_slack"]]
    cap, usable = result["outputs"]["capacity_bytes"], result["usable_bytes"]
    lines.append("-" * 47)
    lines.append(f"{'device peak (nvidia-smi)':<30}{peak / GIB:>9.2f}   of {cap / GIB:.1f} GiB, {usable / GIB:.1f} usable after headroom")
    lines.append(f"peak phase: {result['peak_phase']}    bottleneck: {result['bottleneck']}")
    margin = result["margin_bytes"] / GIB
    host, host_ram = result["host_bytes"], result["host_ram_bytes"]
    if result["fits"]:
        lines.append(f"FITS with {margin:.2f} GiB to spare")
    elif margin >= 0:
        lines.append(f"DOES NOT FIT: the GPU holds the peak ({margin:.2f} GiB to spare), but the offload needs "
                     f"{host / GIB:.2f} GiB of host RAM per GPU and each has {host_ram / GIB:.2f}")
    else:
        lines.append(f"DOES NOT FIT: {-margin:.2f} GiB over budget")
    releasable = result["releasable_bytes"] / GIB
    if not result["fits"] and margin < 0 <= margin + releasable:
        lines.append(f"  ({releasable:.2f} GiB of the reserve are the gradients' and optimizer's own segments, "
                     "which the caching allocator releases and retries with before it runs out: the step runs, with "
                     "cudaMalloc retries every step; fits counts them, on the safe side; expandable segments keep "
                     "them from being reserved)")
    if host:
        ram = f", {host_ram / GIB:.1f} GiB available to each" if host_ram else " (the host's RAM unknown)"
        lines.append(f"host RAM for offload: {host / GIB:.2f} GiB per GPU{ram}")
    lines.append(time_line(result["outputs"], result))
    if result["framework_note"]:
        lines.append(result["framework_note"])
    if result["suggestions"]:
        lines += ["", "what to change (one at a time; those that fit first, fastest first):"]
        lines += [f"  - {change_line(s)}" for s in result["suggestions"]]
    if result["plan"] and combination_worth_showing(result):
        lines += ["", "combined, step by step:"]
        lines += [f"  {i}. {change_line(s)}" for i, s in enumerate(result["plan"], 1)]
    if not result["fits"]:
        lines += ["", f"the fastest configurations that fit, every layout and recipe searched: {plan_command(result)}"]
    return "\n".join(lines)


def combination_worth_showing(result: dict) -> bool:
    """The combination, when no single change fits or it is faster than every single change that fits keeping the
    training method and the GPU count."""
    fitting = [s["tokens_per_gpu_s"] or 0.0 for s in result["suggestions"]
               if s["fits"] and s["keeps_method"] and s["keeps_fleet"]]
    last = result["plan"][-1]
    return not fitting or (last["fits"] and (last["tokens_per_gpu_s"] or 0.0) > max(fitting))


def change_line(s: dict) -> str:
    """A suggested change: its peak, whether it fits, its speed and price."""
    speed = "" if s["tokens_per_gpu_s"] is None else f", {s['tokens_per_gpu_s']:,.0f} tokens/s per GPU"
    cost = "" if s["cost_per_mtok"] is None else f", ${s['cost_per_mtok']:.2f}/Mtok"
    return f"{s['change']:<50} -> {s['device_peak_bytes'] / GIB:8.2f} GiB ({verdict(s)}{speed}{cost})"


def plan_command(result: dict) -> str:
    i = result["inputs"]
    return (f"memsim plan --model {i['model']} --gpu {i['gpu']} --n-gpus {i['n_gpus']} --seq-len {i['seq_len']}"
            + ("" if i["lora_rank"] == 0 else f" --lora-rank {i['lora_rank']} --base-quant {i['base_quant']}"))


def time_unknown_reason(rec, gpu: str) -> str:
    """Why a configuration that can run has no step time: the catalog figure its time needs and lacks."""
    if rec.bf16_tflops <= 0 and rec.matmul_tflops_achievable <= 0:
        return f"the catalog gives no FLOP rate for {gpu} (bf16_tflops; --bf16-tflops gives one)"
    if rec.bandwidth_bytes_per_s <= 0:
        return f"the catalog gives no memory bandwidth for {gpu} (--bandwidth-bytes-per-s gives one)"
    node = int(nvlink_domain(rec))
    if rec.n_gpus > node and rec.inter_node_bytes_per_s <= 0:
        return (f"the job spans {-(-rec.n_gpus // node)} nodes of {node} x {gpu} and the catalog gives no "
                "network bandwidth between them (inter_node_bytes_per_s; --inter-node-bytes-per-s gives one)")
    if rec.n_gpus > 1 and rec.intra_node_bytes_per_s <= 0:
        return f"the catalog gives no link bandwidth between {gpu}s (--intra-node-bytes-per-s gives one)"
    return "a rate this layout needs is unknown"


def time_line(out: dict, price: dict) -> str:
    """Step time, throughput, MFU and cost in one line (engine/model/time.py), the price with its source and date;
    what the catalog cannot price, said."""
    if out["step_time_s"] is None:
        return f"time: unknown: {price.get('time_unknown', 'a rate it needs is unknown')}"
    cost = "no catalog price"
    if out["cost_per_mtok"] is not None:
        source = (price["price_source"] or "").split(",")[0]
        dated = f", read {price['price_date']}" if price["price_date"] else ""
        cost = (f"${out['cost_per_mtok']:.2f} per million tokens "
                f"(${price['usd_per_gpu_hour']:.2f}/GPU-hour, {source}{dated})")
    return (f"step {out['step_time_s']:.2f} s, {out['tokens_per_gpu_s']:,.0f} tokens/s per GPU, "
            f"MFU {'n/a' if out['mfu'] is None else format(100 * out['mfu'], '.0f') + '%'}, {cost}")


def verdict(step: dict) -> str:
    return "fits" if step["fits"] else "still over"


def to_json(result: dict) -> str:
    return json.dumps(result, indent=2, default=int)


