"""What one case keeps for backward, per block and per op, and what is alive at its peak, as a text report.

Example:
    memsim measure --anatomy gpt2-124m_amp_bf16_adamw_eager_s1024_b4
    memsim measure --anatomy '{"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab": 128}'

Bytes per token are per micro-batch token (``micro_batch * seq_len`` tokens). A multi-GPU or MoE case runs one
rank of a simulated world, whose live set at its peak parallel_anatomy.py reports.
"""

from __future__ import annotations

from engine.checks.measure import breakdown, parallel
from engine.checks.measure.case import resolve
from engine.checks.measure.single_gpu import MEASURED_STEP, run_logged
from engine.errors import UserError

DEVICES = ("fake", "cpu-fake", "cpu")  # run_logged's devices; a multi-GPU or MoE case runs on 'fake' only


def _table(groups: dict, tokens: int, title: str, top: int | None = None) -> list[str]:
    """One table, largest groups first (the ``top`` largest when given); the total counts every group."""
    lines = [title, f"  {'module':<28}{'op':<42}{'dtype':<10}{'bytes':>15}{'B/token':>12}"]
    for (module, op, dtype), n in sorted(groups.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {module or '(block)':<28}{op:<42}{dtype:<10}{n:>15,}{n / tokens:>12.2f}")
    total = sum(groups.values())
    lines.append(f"  {'total':<80}{total:>15,}{total / tokens:>12.2f}")
    return lines


def report(case: dict, device: str = "fake", top: int | None = None) -> str:
    """Saved-for-backward bytes of block 0, outside the blocks, and the live set at the peak (each table's ``top``
    largest groups when given, every group otherwise); for a multi-GPU or MoE case, parallel_anatomy's report."""
    c = resolve(case)
    world = parallel.needs_world(c)
    allowed = ("fake",) if world else DEVICES
    if device not in allowed:
        kind = "a multi-GPU or MoE case" if world else "a case"
        raise UserError(f"{kind} is inspected on device {' or '.join(allowed)}, not {device!r}")
    if world:
        from engine.checks.measure import parallel_anatomy

        return parallel_anatomy.report(case, parallel_anatomy.TOP if top is None else top)
    lb, roles, _ = run_logged(c, device)
    tokens = c["micro_batch"] * c["seq_len"]
    saved = breakdown.per_layer(breakdown.saved_for_backward(lb, roles, MEASURED_STEP))
    lines = [f"saved for backward, micro-step 0 ({tokens} tokens):"]
    lines += _table(saved.get(0, {}), tokens, "block 0 (every block is alike):", top)
    lines += _table(saved.get(None, {}), tokens, "outside the blocks:", top)
    s = MEASURED_STEP
    peak, tick = breakdown.peak(lb, lb.marks[f"step{s}"], lb.marks[f"end{s}"])
    live = breakdown.alive_at(lb, tick)
    by_role: dict = {}
    for r in live:
        key = (breakdown.role(r, lb, roles, s), r.op, r.dtype)
        by_role[key] = by_role.get(key, 0) + r.nbytes
    lines.append(f"alive at the peak ({peak:,} bytes), by (role, op, dtype):")
    lines += _table(by_role, tokens, "", top)[1:]
    return "\n".join(lines)
