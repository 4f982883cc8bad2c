"""The throughput comparison as a text table or markdown tables, and leave-one-source-out as a text table."""

import statistics

from engine.checks.throughput.comparison import KNOWN_MISSES, MAX_TOL_PCT, MEDIAN_TOL_PCT, summary


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
