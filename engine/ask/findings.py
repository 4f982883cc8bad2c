"""The report's findings in words: what fits, where, and what stops the rest (engine/ask/report.py)."""

import polars as pl

from engine.ask.sections import Runner, of_method
from reports import price_basis
from reports.cost_frontier import not_drawn

COMPONENT_WORDS = {"temp": "temporaries", "grads": "gradients", "optimizer": "optimizer states"}


def layout_words(r: dict) -> str:
    recompute = "no" if r["checkpointing"] == "none" else r["checkpointing"]
    return (f"tp {r['tp']}, pp {r['pp']}, ZeRO-{r['zero_stage']}, {recompute} recompute, "
            f"micro-batch {r['micro_batch']}, {r['seq_len']:,} tokens")


def either(names: list[str], shown: int = 3, joint: str = "or", noun: str = "GPU type") -> str:
    """'a', 'a or b', 'a, b or c', 'a, b, c or 2 other GPU types' (joint 'and': 'a, b and c')."""
    if len(names) > shown:
        names = names[:shown] + [f"{len(names) - shown} other {noun}{'s' if len(names) - shown > 1 else ''}"]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {joint} {names[-1]}"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def findings(run: Runner, s: dict, total: int, methods: pl.DataFrame, charted: list[str]) -> list[str]:
    """What the whole sweep found; each charted method's own findings come from method_findings."""
    kept = "" if s["configurations"] >= total else (
        f" (the dataset keeps {s['configurations']:,} of {total:,} swept configurations: only valid or fitting rows were written)")
    if s["configurations"] == 0:
        return [f"No configuration fits: the sweep evaluated {plural(total, 'configuration')} and wrote only fitting ones, "
                "so nothing was kept. Try larger GPUs, more of them, ZeRO-3, recompute or a smaller model."]
    if s["valid"] == 0:
        return [f"No configuration fits: none of the {plural(s['configurations'], 'configuration')} can run "
                "(see the invalid_reason column: memsim sql \"SELECT invalid_reason, count(*) FROM sweep GROUP BY ALL\")."]
    if s["fit"] == 0:
        cells = run("report_feasibility_map", method=None).sort("least_miss_gib").row(0, named=True)
        return [f"No configuration fits: none of the {plural(s['valid'], 'valid layout')} fits in memory{kept}. The closest is "
                f"{cells['model']} on {cells['n_gpus']} × {cells['gpu']}, {cells['least_miss_gib']:,.1f} GiB over the usable memory."]
    lines = [f"{s['fit']:,} of {s['valid']:,} valid configurations fit ({s['fit_share']:.1%}), across {s['models']} models "
             f"and {s['gpus']} GPU types{kept}; {s['models_that_fit']} models fit on at least one GPU type."]
    lines.append(methods_finding(methods, charted))
    lines.append(bottleneck_finding(run("bottlenecks")))
    return [line for line in lines if line]


def methods_finding(methods: pl.DataFrame, charted: list[str]) -> str:
    """Which training methods the charts are drawn for, and which not (none fits, or past the limit)."""
    if methods.height < 2:
        return ""
    unfit = methods.filter(pl.col("fit") == 0)["method"].to_list()
    left = [m for m in methods.filter(pl.col("fit") > 0)["method"].to_list() if m not in charted]
    line = f"The sweep covers {methods.height} training methods; the charts are drawn for {either(charted, len(charted), 'and')}"
    if left:
        kinds = ", ".join(methods.filter(pl.col("method").is_in(charted))["kind"].unique(maintain_order=True))
        line += (f" (the most fitting of each kind: {kinds}); not charted: {either(left, 3, 'and', 'method')} "
                 "(memsim report --method draws one)")
    if unfit:
        line += f"; nothing fits with {either(unfit, 3, 'or', 'method')}"
    return line + "."


def method_findings(run: Runner, method: str, max_n_gpus: int, picks: dict) -> list[str]:
    """One training method: each model's fewest GPUs and cheapest fleet, with the price basis, and what the
    single-model charts show."""
    lines = model_findings(run, method, max_n_gpus)
    lines.append(f"Single-model charts show {picks['model']} on {picks['gpu']} (the median-size model on the median-memory "
                 "GPU type among those that fit the most models; memsim report --model/--gpu chooses others).")
    return lines


def model_findings(run: Runner, method: str, max_n_gpus: int) -> list[str]:
    cells = run("report_feasibility_map", method=method)
    fewest, fleets = of_method(run("min_gpus"), method), of_method(run("cheapest_fleet"), method)
    models = cells.group_by("model").agg(pl.col("n_params").max(), pl.col("any_fits").any(), pl.col("least_miss_gib").min())
    lines = []
    for m in models.sort(["n_params", "model"], nulls_last=True).iter_rows(named=True):
        if not m["any_fits"]:
            lines.append(f"{m['model']} fits on none of the swept GPU types at up to {max_n_gpus:,} GPUs; "
                         f"its closest layout is {m['least_miss_gib']:,.1f} GiB over the usable memory.")
            continue
        rows = fewest.filter(pl.col("model") == m["model"]).sort(["min_gpus", "spare_gib"], descending=[False, True])
        best = rows.row(0, named=True)
        gpus = rows.filter(pl.col("min_gpus") == best["min_gpus"])["gpu"].to_list()
        line = f"{m['model']} needs at least {best['min_gpus']:,} × {either(gpus)} (on {gpus[0]}: {layout_words(best)})"
        line += cheapest_words(fleets.filter(pl.col("model") == m["model"]))
        lines.append(line + ".")
    basis = price_basis(fleets.filter(pl.col("usd_per_gpu_hour").is_not_null()))
    if basis:
        one = "" if ";" in basis else ", one source for every priced GPU type"
        lines.append(f"Prices: {basis}{one} (data/gpus.toml price_source); "
                     "a fleet's $/h is its GPUs times the $/GPU-hour.")
    unpriced = sorted(set(fleets.filter(pl.col("usd_per_gpu_hour").is_null())["gpu"].to_list()))
    if unpriced:
        lines.append(f"No catalog price for {', '.join(unpriced)}: fleets of these are left out of the cost ranking.")
    left = not_drawn(run("report_cost_frontier", method=method))
    if left:
        lines.append(f"Fleets that fit but have no cost/time point: {'; '.join(left)}.")
    return lines


def cheapest_words(fleets: pl.DataFrame) -> str:
    """The fleet that trains the tokens for the fewest dollars, and the rent of the smallest fleet that fits: two
    different things, both named for what they are."""
    out = ""
    cheap = fleets.filter(pl.col("cost_rank") == 1)
    if not cheap.is_empty():
        c = cheap.row(0, named=True)
        out += (f"; the cheapest to train 1T tokens is {c['cost_n_gpus']:,} × {c['gpu']} (${c['cost_usd']:,.0f} "
                f"over {c['cost_days']:,.0f} days, {c['cost_layout']})")
    smallest = fleets.filter(pl.col("price_rank") == 1)
    if not smallest.is_empty():
        c = smallest.row(0, named=True)
        out += f"; the smallest fleet that fits rents for the least: {c['min_gpus']:,} × {c['gpu']} at ${c['fleet_usd_per_hour']:,.2f}/h"
        if c["nodes_usd_per_hour"] > c["fleet_usd_per_hour"] + 0.005:  # part of a node: it rents whole
            out += (f" ({c['nodes']:,} whole {c['gpus_per_node']}-GPU node{'s' if c['nodes'] > 1 else ''}: "
                    f"${c['nodes_usd_per_hour']:,.2f}/h)")
    return out


def bottleneck_finding(rows: pl.DataFrame) -> str:
    if rows.is_empty():
        return ""
    shares = rows.group_by("bottleneck").agg(pl.col("failing").sum()).with_columns(
        share=pl.col("failing") / pl.col("failing").sum()).sort(["failing", "bottleneck"], descending=[True, False])
    top = [f"{COMPONENT_WORDS.get(r['bottleneck'], r['bottleneck'])} ({r['share']:.0%})" for r in shares.head(3).iter_rows(named=True)]
    return f"Across the sweep, where valid layouts do not fit, the largest component is most often {', then '.join(top)}."
