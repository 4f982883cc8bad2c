"""
What ZeRO, tensor parallelism and recompute buy
-----------------------------------------------
One model on one GPU type, at the fewest GPUs where ZeRO stages and TP degrees can be compared: the lowest device peak (GiB, log scale) for each ZeRO stage, tensor-parallel degree and recompute setting, against the usable memory (dashed rule); filled points fit.
"""

import altair as alt
import polars as pl

POSITION = 5
QUERY = "zero_tp_recompute"
PARAMS = {"model": "model", "gpu": "gpu", "n_gpus": "layout_gpus"}
RECOMPUTE = ["none", "selective", "full"]
Y_TITLE = "lowest device peak (GiB, log scale)"


def chart(rows: pl.DataFrame) -> alt.FacetChart:
    base = alt.Chart().encode(
        alt.X("tp:O").title("tensor-parallel degree (GPUs)"),
        alt.Y("min_device_peak_gib:Q").scale(type="log").title(Y_TITLE),
        alt.Color("checkpointing:N").scale(domain=RECOMPUTE).title("recompute"),
    )
    # none and selective recompute often coincide (flash attention keeps no scores): dodge them apart
    lines = base.mark_line().encode(alt.XOffset("checkpointing:N").scale(domain=RECOMPUTE))
    tooltip = [
        alt.Tooltip("zero_stage:Q", title="ZeRO stage"),
        alt.Tooltip("tp:Q", title="tensor parallel"),
        alt.Tooltip("checkpointing:N", title="recompute"),
        alt.Tooltip("min_device_peak_gib:Q", format=",.3f", title="lowest device peak (GiB)"),
        alt.Tooltip("usable_gib:Q", format=",.3f", title="usable (GiB)"),
        alt.Tooltip("fitting:Q", format=",", title="layouts that fit"),
    ]
    fits = base.mark_point(size=60, filled=True, opacity=1).transform_filter("datum.any_fits").encode(
        alt.XOffset("checkpointing:N").scale(domain=RECOMPUTE), tooltip=tooltip)
    misses = base.mark_point(size=60, filled=False, opacity=1).transform_filter("!datum.any_fits").encode(
        alt.XOffset("checkpointing:N").scale(domain=RECOMPUTE), tooltip=tooltip)
    usable = alt.Chart().mark_rule(color="black", strokeDash=[6, 4]).encode(
        alt.Y("max(usable_gib):Q").title(Y_TITLE), tooltip=[alt.Tooltip("max(usable_gib):Q", format=",.3f", title="usable (GiB)")])
    title = f"{rows['model'][0]} on {rows['gpu'][0]}"
    return alt.layer(lines, fits, misses, usable, data=rows).properties(width=150, height=220).facet(
        alt.Facet("zero_stage:O").title("ZeRO stage"), columns=4
    ).properties(title=title)
