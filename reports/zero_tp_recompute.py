"""
What ZeRO, tensor parallelism and recompute buy
-----------------------------------------------
One model on one GPU type at the fewest GPUs where ZeRO stages and TP degrees can be compared, at the largest micro-batch and sequence length that fit there: the device peak (GiB) of each ZeRO stage, tensor-parallel degree, recompute setting and pipeline split (one row of panels per split), the axes not shown at their lowest peak, against the usable memory (dashed rule); filled points fit.
"""

import altair as alt
import polars as pl

from reports import tooltips

POSITION = 5
QUERY = "report_zero_tp_recompute"
PARAMS = {"method": "method", "model": "model", "gpu": "gpu", "n_gpus": "layout_gpus"}
RECOMPUTE = ["none", "selective", "selective_op", "full"]  # CONFIG.md order: the least recomputed first
LOG_ABOVE = 8  # a log axis only when the largest peak is this many times the smallest; linear from 0 otherwise


def y_scale(rows: pl.DataFrame) -> tuple[alt.Scale, str]:
    """A linear axis from 0 when the peaks and the usable line are within a factor LOG_ABOVE, else a log axis
    that spans them (not a decade or two of empty space): the scale and the axis title."""
    values = rows["min_device_peak_gib"].to_list() + rows["usable_gib"].to_list()
    lo, hi = min(values), max(values)
    if hi <= LOG_ABOVE * lo:
        return alt.Scale(zero=True, nice=True), "device peak (GiB)"
    return alt.Scale(type="log", domain=[lo / 1.15, hi * 1.15], nice=False), "device peak (GiB, log scale)"


def chart(rows: pl.DataFrame) -> alt.FacetChart:
    settings = [c for c in RECOMPUTE if c in set(rows["checkpointing"])]  # every setting the sweep holds
    scale, y_title = y_scale(rows)
    dodge = alt.XOffset("checkpointing:N").scale(domain=settings)  # none and selective often coincide: side by side
    base = alt.Chart().encode(
        alt.X("tp:O").title("TP degree (GPUs)"),
        alt.Y("min_device_peak_gib:Q").scale(scale).title(y_title),
        alt.Color("checkpointing:N").scale(domain=settings).title("recompute"),
    )
    tooltip = tooltips("pp", "zero_stage", "tp", "checkpointing",
                       alt.Tooltip("min_device_peak_gib:Q", format=",.3f", title="device peak (GiB)"),
                       "usable_gib", "fitting", pp="pipeline stages")
    lines = base.mark_line(opacity=0.6).encode(dodge)
    fits = base.mark_point(size=60, filled=True, opacity=1).transform_filter("datum.any_fits").encode(dodge, tooltip=tooltip)
    misses = base.mark_point(size=60, filled=False, opacity=1).transform_filter("!datum.any_fits").encode(dodge, tooltip=tooltip)
    usable = alt.Chart().mark_rule(color="black", strokeDash=[6, 4]).encode(
        alt.Y("max(usable_gib):Q").scale(scale).title(y_title),
        tooltip=[alt.Tooltip("max(usable_gib):Q", format=",.3f", title="usable (GiB)")])
    r = rows.row(0, named=True)
    title = alt.Title(
        f"{r['model']} on {r['n_gpus']} × {r['gpu']}, micro-batch {r['micro_batch']}, {r['seq_len']:,} tokens",
        subtitle="one row of panels per pipeline split (pp); points side by side per recompute setting")
    return alt.layer(lines, fits, misses, usable, data=rows).properties(width=130, height=160).facet(
        column=alt.Column("zero_stage:O").title("ZeRO stage"),
        row=alt.Row("pp:O").title("pipeline stages (pp, GPUs)"),
    ).properties(title=title)
