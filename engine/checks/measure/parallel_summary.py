"""The measured step of one rank (parallel_run.py) as columns: ``summarize`` gives the ``measured_*`` columns of
the single-GPU harness (roles at the peak that add up to it) plus the rank's anatomy: what the frameworks
allocated, by tag, alive at the peak.
"""

from __future__ import annotations

from engine.checks.measure import breakdown
from engine.checks.measure.buffer_tags import BUFFER_KINDS, kind, stream_of
from engine.checks.measure.parallel_run import Run
from engine.checks.measure.single_gpu import MEASURED_STEP

# Anatomy columns: bytes alive at the peak, by the tag of what allocated them (buffer_tags.tagging).
ANATOMY = {
    "measured_fsdp_unsharded_bytes": ("fsdp_unsharded",),
    "measured_fsdp_gather_bytes": ("fsdp_all_gather",),
    "measured_fsdp_reduce_bytes": ("fsdp_reduce_scatter",),
    "measured_ddp_bucket_bytes": ("ddp_bucket",),
    "measured_collective_bytes": ("collective",),
    "measured_pp_buffer_bytes": ("pp_recv",),
}
EXTRA_COLUMNS = [*ANATOMY, "measured_fsdp_unsharded_groups", "measured_logit_bytes", "measured_expert_bytes",
                 "measured_rank_params", "measured_host_bytes", "measured_anatomy"]


def role(r, run: Run) -> str:
    """``breakdown.role``, except that the frameworks' buffers (``distributed.BUFFER_KINDS``) are temp even when
    they live from a forward into its backward (FSDP2's parameters gathered with reshard_after_forward=False,
    the pipeline's receive buffers): they are not activations a model keeps for backward."""
    out = breakdown.role(r, run.lb, run.roles, MEASURED_STEP)
    if out == "activations" and kind(run.lb.tags.get(id(r))) in BUFFER_KINDS:
        return "temp"
    return out


def classify(records, run: Run) -> dict[str, int]:
    """Bytes per role over ``records`` (``role``)."""
    out = dict.fromkeys(("weights", "grads", "optimizer", "activations", "weight_casts", "temp"), 0)
    for r in records:
        out[role(r, run)] += r.nbytes
    return out


def _vocab_sized(r, vocab: int, tp: int) -> bool:
    """A logits-like tensor: its last dim is the vocabulary or one TP shard of it (weights are (V, h))."""
    return bool(r.shape) and r.shape[-1] in (vocab, -(-vocab // tp)) and len(r.shape) >= 2


def summarize(run: Run, c: dict) -> dict:
    """The ``measured_*`` columns of ``measure.summarize`` for the measured step, plus the rank's anatomy."""
    lb, roles, s = run.lb, run.roles, MEASURED_STEP
    start, end = lb.marks[f"step{s}"], lb.marks[f"end{s}"]
    tick = breakdown.peak(lb, start, end)[1]
    at_peak = breakdown.alive_at(lb, tick)
    saved = [r for r in breakdown.saved_for_backward(lb, roles, s) if role(r, run) == "activations"]
    out = breakdown.measured_columns(lb, start, end, classify(at_peak, run), saved, run.n_params, run.n_params,
                                     stream_of(lb), c["allocator"])
    return out | anatomy(run, c, at_peak, tick)


def anatomy(run: Run, c: dict, at_peak, tick: int) -> dict:
    """Bytes alive at the peak by what allocated them (tags), logits-shaped tensors, expert activations."""
    lb = run.lb
    out = {k: sum(r.nbytes for r in at_peak if kind(lb.tags.get(id(r))) in kinds) for k, kinds in ANATOMY.items()}
    out["measured_fsdp_unsharded_groups"] = len({lb.tags[id(r)] for r in at_peak
                                                 if kind(lb.tags.get(id(r))) == "fsdp_unsharded" and r.nbytes})
    out["measured_logit_bytes"] = sum(r.nbytes for r in at_peak if _vocab_sized(r, c["vocab"], c["tp"]))
    out["measured_expert_bytes"] = sum(r.nbytes for r in at_peak  # the experts' token buffers and activations
                                       if r.phase == "forward" and "experts" in r.module
                                       and role(r, run) in ("activations", "temp"))
    out["measured_rank_params"] = run.rank_params
    out["measured_host_bytes"] = sum(r.nbytes for r in lb.records  # offloaded states (host memory) at the peak
                                     if r.host and r.born <= tick and (r.died is None or r.died > tick)
                                     and id(r) not in run.roles["step_counters"])
    out["measured_anatomy"] = describe(run, at_peak)
    return out


def describe(run: Run, at_peak, top: int = 6) -> str:
    """The largest groups alive at the peak, ``role:tag-or-op:dtype=bytes`` joined by ``;`` (a readable digest)."""
    lb, groups = run.lb, {}
    for r in at_peak:
        key = (role(r, run), kind(lb.tags.get(id(r))) or r.op, r.dtype)
        groups[key] = groups.get(key, 0) + r.nbytes
    items = sorted(groups.items(), key=lambda kv: -kv[1])[:top]
    return ";".join(f"{role}:{what}:{dtype or '-'}={n}" for (role, what, dtype), n in items)
