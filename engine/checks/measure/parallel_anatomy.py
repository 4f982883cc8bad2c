"""What one rank holds at its peak: every live storage grouped by role, framework tag, op, dtype and shape.

Example:
    memsim measure --anatomy fsdp2_llama-400m-like_amp_bf16_s2048_b2_dp4_mp_r0
    memsim measure --anatomy tp_hf_llama-3.1-8b-4l_amp_bf16_s4096_b1_tp8_hfplan_r0 --top 40

``memsim measure --anatomy CASE`` (anatomy.report) reports a multi-GPU or MoE case here. Tags name what allocated
a buffer (buffer_tags.tagging): ``fsdp_unsharded@model.layers.3`` (FSDP2's gathered parameters of that group),
``fsdp_all_gather@...``, ``fsdp_reduce_scatter@...``, ``ddp_bucket``, ``pp_recv``, ``collective@<op>``.
"""

from __future__ import annotations

from engine.checks.measure import breakdown
from engine.checks.measure.case import resolve
from engine.checks.measure.parallel_run import run_rank
from engine.checks.measure.parallel_summary import role
from engine.checks.measure.single_gpu import MEASURED_STEP

TOP = 30  # groups shown when no --top is given


def report(case: dict, top: int = TOP) -> str:
    """The live set at the measured step's peak, largest groups first, with bytes per micro-batch token."""
    c = resolve(case)
    run = run_rank(c)
    lb = run.lb
    start, end = lb.marks[f"step{MEASURED_STEP}"], lb.marks[f"end{MEASURED_STEP}"]
    peak, tick = breakdown.peak(lb, start, end)
    born = next((r for r in lb.records if r.born == tick), None)
    tokens = c["micro_batch"] * c["seq_len"]
    groups: dict = {}
    for r in breakdown.alive_at(lb, tick):
        key = (role(r, run), lb.tags.get(id(r)) or "", r.op, r.dtype, r.shape)
        n, k = groups.get(key, (0, 0))
        groups[key] = (n + r.nbytes, k + 1)
    where = f"{born.phase} {born.op} layer={born.layer} micro={born.micro}" if born else "step start"
    lines = [f"peak {peak:,} B at {where}; {tokens} tokens per micro-batch",
             f"{'role':<12}{'tag':<34}{'op':<34}{'dtype':<10}{'shape':<24}{'count':>6}{'bytes':>16}{'B/token':>11}"]
    for (rl, tag, op, dtype, shape), (n, k) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{rl:<12}{tag[:33]:<34}{op[:33]:<34}{dtype:<10}{str(shape)[:23]:<24}{k:>6}{n:>16,}"
                     f"{n / tokens:>11.1f}")
    return "\n".join(lines)
