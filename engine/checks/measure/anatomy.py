"""Print what one case keeps for backward, per block and per op, and what is alive at its peak.

Example:
    python -m engine.checks.measure.anatomy --row gpt2-124m_amp_bf16_adamw_eager_s1024_b4 data/measured/cpu_fake.csv
    python -m engine.checks.measure.anatomy --json '{"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab": 128}'

Bytes per token are per micro-batch token (``micro_batch * seq_len`` tokens).
"""

from __future__ import annotations

import argparse
import csv
import json
import warnings

from engine.checks.measure import breakdown
from engine.checks.measure.case import resolve
from engine.checks.measure.single_gpu import MEASURED_STEP, run_logged


def _table(groups: dict, tokens: int, title: str) -> list[str]:
    lines = [title, f"  {'module':<28}{'op':<42}{'dtype':<10}{'bytes':>15}{'B/token':>12}"]
    total = 0
    for (module, op, dtype), n in sorted(groups.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {module or '(block)':<28}{op:<42}{dtype:<10}{n:>15,}{n / tokens:>12.2f}")
        total += n
    lines.append(f"  {'total':<80}{total:>15,}{total / tokens:>12.2f}")
    return lines


def report(case: dict, device: str = "fake") -> str:
    """Saved-for-backward bytes of block 0, outside the blocks, and the live set at the peak."""
    c = resolve(case)
    lb, roles, _ = run_logged(c, device)
    tokens = c["micro_batch"] * c["seq_len"]
    saved = breakdown.per_layer(breakdown.saved_for_backward(lb, roles, MEASURED_STEP))
    lines = [f"saved for backward, micro-step 0 ({tokens} tokens):"]
    lines += _table(saved.get(0, {}), tokens, "block 0 (every block is alike):")
    lines += _table(saved.get(None, {}), tokens, "outside the blocks:")
    s = MEASURED_STEP
    peak, tick = breakdown.peak(lb, lb.marks[f"step{s}"], lb.marks[f"end{s}"])
    live = breakdown.alive_at(lb, tick)
    by_role: dict = {}
    for r in live:
        key = (breakdown.role(r, lb, roles, s), r.op, r.dtype)
        by_role[key] = by_role.get(key, 0) + r.nbytes
    lines.append(f"alive at the peak ({peak:,} bytes), by (role, op, dtype):")
    lines += _table(by_role, tokens, "")[1:]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """CLI: one case from a CSV row (``--row case_id file``) or from ``--json``."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?")
    ap.add_argument("--row")
    ap.add_argument("--json")
    ap.add_argument("--device", default="fake", choices=["fake", "cpu-fake", "cpu"])
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    if a.json:
        case = json.loads(a.json)
    else:
        with open(a.csv, newline="") as f:
            case = next(r for r in csv.DictReader(f) if r["case_id"] == a.row)
        case = {k: v for k, v in case.items() if not k.startswith("measured") and not k.endswith("_version")}
    print(report(case, a.device))


if __name__ == "__main__":
    main()
