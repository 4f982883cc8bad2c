"""`memsim plan`: the fastest (or cheapest) configurations of a model on a fleet that fit, searched by the sweep
kernel over every layout and recipe (engine/ask/plan_space.py says what is searched, plan_search.py how), each
priced in time and money and said as what it changes in the user's configuration.

Examples
--------
>>> from engine.ask.plan import PlanRequest, plan
>>> found = plan(PlanRequest({"model": "llama-3.2-1b", "gpu": "a100-sxm-80gb"}, n_gpus=(1,), top=1))
>>> found["plans"][0]["outputs"]["fits"]
True
"""

import json
import math
import time
from dataclasses import dataclass

import numpy as np

from engine.ask.evaluate import evaluate_case, evaluate_cases
from engine.ask.plan_search import decode_inputs, run_search, user_inputs
from engine.ask.plan_space import SEARCHED, build_spaces, method_of
from engine.configure.resolve import MODEL_FIELD_NAMES, resolve_case
from engine.dataset.columns import output_columns
from engine.errors import UserError
from engine.inputs.vocabulary import GPU_ATTRIBUTES, INPUTS, spell
from engine.model.outputs import OUTPUTS, TIME_COLUMNS
from engine.model.params import has_dims

RANK_BY = ("time", "cost")
# Inputs a plan puts back to the user's values, group by group, where it still fits and is no slower (the framework
# with compile, which the search links: no plan compiles under Megatron's or DeepSpeed's fused kernels)
REVERTIBLE = [("zero_stage", "offload"), ("checkpointing", "checkpoint_every"), ("loss_impl", "loss_chunks"),
              ("precision",), ("framework", "compile"), ("compile",), ("optimizer_impl",), ("attention",),
              ("activation_offload",), ("lora_rank", "base_quant"), ("sp",), ("loss_parallel",), ("allocator",)]
SIMPLIFY_BATCHES = 4  # batches of candidates simplified before a plan settles for fewer plans than --top
REVERT_TOLERANCE = 0.005  # 0.5%: well inside the time model's error (median 7.5%, README "Accuracy")
METHOD_CHOICES = ("keep", "any")


@dataclass(frozen=True)
class PlanRequest:
    """What `memsim plan` is asked."""

    case: dict
    """The user's starting configuration, CONFIG.md names -> text (explain's flags)."""
    n_gpus: tuple = (8,)
    """GPU counts the fleet may have (one for most questions)."""
    global_batch: int | None = None
    """Samples per optimizer step: micro_batch x grad_accum x dp (default: the user's configuration's)."""
    tokens: float = 1e12
    """Tokens to train, for the days and dollars of each plan."""
    rank_by: str = "time"
    """time: the job's tokens per second, highest first; cost: $ per million tokens, lowest first."""
    method: str = "keep"
    """keep: the user's training method (full, LoRA, QLoRA); any: full, LoRA r=16 and QLoRA r=16 as well."""
    top: int = 5
    """Plans returned, best first."""


def check(request: PlanRequest) -> None:
    if request.rank_by not in RANK_BY:
        raise UserError(f"--rank-by takes {' or '.join(RANK_BY)}, got {request.rank_by!r}")
    if request.method not in METHOD_CHOICES:
        raise UserError(f"--method takes {' or '.join(METHOD_CHOICES)}, got {request.method!r}")
    if not request.n_gpus or any(n < 1 for n in request.n_gpus):
        raise UserError(f"--n-gpus takes one or more GPU counts of at least 1, got {list(request.n_gpus)}")
    if request.global_batch is not None and request.global_batch < 1:
        raise UserError(f"--global-batch must be at least 1, got {request.global_batch}")
    if not (request.tokens > 0 and math.isfinite(request.tokens)):
        raise UserError(f"--tokens must be a positive number, got {request.tokens}")
    if request.top < 1:
        raise UserError(f"--top must be at least 1, got {request.top}")


def plan(request: PlanRequest) -> dict:
    """The best plans that fit (or the closest miss), with what was searched."""
    check(request)
    case = {**request.case, "n_gpus": request.n_gpus[0]}
    rec, model, gpu = resolve_case(case)
    if not has_dims(rec):
        raise UserError("memsim plan needs the model's dims (a catalog model or a config.json), not n_params alone")
    batch = request.global_batch or int(rec.micro_batch * rec.grad_accum * rec.dp)
    spaces = build_spaces(rec, sorted(set(request.n_gpus)), batch, request.method)
    model_key = model if model != "custom" else INPUTS["model"].default  # its dims come from the record
    t0 = time.perf_counter()
    search = run_search(spaces, rec, model_key, gpu, request.rank_by)
    seconds = time.perf_counter() - t0
    given = given_inputs(case, rec)
    rows = best_plans(search, given, request)
    closest = [described(search, 0, given, request.tokens, found=search.closest)] if search.closest.score else []
    return {
        "model": model, "gpu": gpu, "global_batch": batch, "seq_len": int(rec.seq_len), "tokens": request.tokens,
        "rank_by": request.rank_by, "method": request.method, "user_method": method_of(rec),
        "searched": search.evaluated, "valid": search.valid, "fitting": search.fitting, "grids": len(spaces),
        "seconds": seconds, "user": {**user_inputs(rec), **given}, "plans": rows, "closest": closest,
        "yours": named(evaluate_case(case)),
    }


def best_plans(search, given: dict, request: PlanRequest) -> list[dict]:
    """The top plans, each simplified (`simplified`); plans that simplify into one another count once, so further
    candidates are taken, a batch at a time, until there are enough (or a few batches are spent)."""
    picks, plans, batch = search.found.best(len(search.found.score)), [], request.top + 3
    for start in range(0, min(len(picks), SIMPLIFY_BATCHES * batch), batch):
        rows = [described(search, i, given, request.tokens, found=search.found) for i in picks[start: start + batch]]
        plans = unique_plans(plans + simplified(rows, search.user, request), request.rank_by)
        if len(plans) >= request.top:
            break
    return plans[: request.top]


def badness(outputs: dict, n_gpus: int, rank_by: str) -> float:
    """What ranking sorts by, lower first: minus the job's tokens/s, or $ per million tokens (inf: unknown)."""
    value = outputs["cost_per_mtok"] if rank_by == "cost" else outputs["tokens_per_gpu_s"]
    if value is None:
        return math.inf
    return value if rank_by == "cost" else -value * n_gpus


def no_worse(new: float, old: float) -> bool:
    """Within REVERT_TOLERANCE of the old value, or better (unknown against unknown counts as no worse)."""
    if math.isinf(old):
        return True
    return new <= old + REVERT_TOLERANCE * abs(old)


def simplified(rows: list[dict], user: dict, request: PlanRequest) -> list[dict]:
    """Each plan with every change put back that it does not need: a group of inputs returns to the user's values
    when the plan still fits and is no slower (or dearer) by more than REVERT_TOLERANCE; one at a time, the best
    first, all plans evaluated in one batch per round (explain's evaluate_cases). Plans that become the same are
    kept once."""
    current = [dict(p["inputs"]) for p in rows]
    scores = [badness(p["outputs"], p["inputs"]["n_gpus"], request.rank_by) for p in rows]
    outputs = [p["outputs"] for p in rows]
    for _ in range(len(REVERTIBLE)):
        options = [(k, {**inputs, **{n: user[n] for n in group}}) for k, inputs in enumerate(current)
                   for group in REVERTIBLE if any(inputs[n] != user[n] for n in group)]
        if not options:
            break
        moved = set()
        for (k, inputs), result in sorted(zip(options, evaluate_cases([o for _, o in options])),
                                          key=lambda x: x[1] is None or badness(named(x[1]), x[0][1]["n_gpus"], request.rank_by)):
            out = named(result) if result is not None else None
            if k in moved or out is None or not out["fits"]:
                continue
            score = badness(out, inputs["n_gpus"], request.rank_by)
            if no_worse(score, scores[k]):
                current[k], scores[k], outputs[k] = inputs, score, out
                moved.add(k)
        if not moved:
            break
    return [{"inputs": current[k], "outputs": outputs[k], "changes": changes(user, current[k]),
             "days": days(outputs[k], current[k], request.tokens), "usd": usd(outputs[k], request.tokens)}
            for k in range(len(current))]


def unique_plans(plans: list[dict], rank_by: str) -> list[dict]:
    """Plans best first (then fewer changes), each configuration once."""
    order = sorted(plans, key=lambda p: (badness(p["outputs"], p["inputs"]["n_gpus"], rank_by), len(p["changes"])))
    out = []
    for p in order:
        if all(p["inputs"] != q["inputs"] for q in out):
            out.append(p)
    return out


def given_inputs(case: dict, rec) -> dict:
    """What names the model and GPU for `memsim explain`: their keys, and any dims or GPU attributes the user gave."""
    out = {"model": str(case.get("model") or INPUTS["model"].default).strip(),
           "gpu": str(case.get("gpu") or INPUTS["gpu"].default).strip(), "recipe": "none"}
    for name in case:
        if name in MODEL_FIELD_NAMES or name in GPU_ATTRIBUTES:
            out[name] = spell(name, rec[name])
    return out


def described(search, i: int, given: dict, tokens: float, found) -> dict:
    """One kept row as {"inputs", "outputs"} (CONFIG.md names; outputs as `memsim explain --json` has them), with
    what it changes and what training `tokens` on it takes."""
    g, index = found.grid[i], found.index[i]
    grid = search.grids[g]
    inputs = {**decode_inputs(grid, index, search.user), **given}
    inputs["dp"] = int(found.outputs[i]["dp"])
    outputs = named(found.outputs[i])
    return {"inputs": inputs, "outputs": outputs, "changes": changes(search.user, inputs),
            "days": days(outputs, inputs, tokens), "usd": usd(outputs, tokens)}


def named(values: dict) -> dict:
    """Kernel values as `memsim explain --json` writes its outputs: categories by name, booleans, NULL as None."""
    arrays = {k: np.array([values[k]], dtype=np.float64 if k in TIME_COLUMNS else np.int64) for k in OUTPUTS}
    return {k: column.to_pylist()[0] for k, column in output_columns(arrays).items()}


def changes(user: dict, inputs: dict) -> list[tuple]:
    """(input, the user's value, the plan's) for each searched input the plan changes."""
    return [(name, user[name], inputs[name]) for name in SEARCHED if name in inputs and inputs[name] != user.get(name)]


def days(outputs: dict, inputs: dict, tokens: float):
    rate = outputs["tokens_per_gpu_s"]
    return None if rate is None else tokens / (rate * inputs["n_gpus"]) / 86400


def usd(outputs: dict, tokens: float):
    cost = outputs["cost_per_mtok"]
    return None if cost is None else cost * tokens / 1e6


def to_json(result: dict) -> str:
    """The plans, best first, as {"inputs": ..., "outputs": ...}."""
    return json.dumps([{"inputs": p["inputs"], "outputs": p["outputs"]} for p in result["plans"]], indent=2)
