"""
What fits where
---------------
Which models train at each GPU count on each GPU type: green cells fit (darker: more memory to spare at the peak beyond the headroom kept free, in GiB), grey cells fit in no swept layout.
"""

import altair as alt
import polars as pl

from reports import tooltips

POSITION = 1
QUERY = "report_feasibility_map"
PARAMS = {"method": "method"}
SPARE = "most to spare (GiB)"  # usable - device peak: what explain calls "to spare" (headroom is the share kept free)


def chart(rows: pl.DataFrame) -> alt.FacetChart:
    base = alt.Chart(rows).encode(
        alt.X("n_gpus:O").title("GPUs (count)"),
        alt.Y("model_label:N").sort(alt.EncodingSortField("n_params", op="max", order="descending"))
        .title("model (parameters)"),
    )
    where = tooltips("gpu", "model", "n_params", "n_gpus")
    misses = base.mark_rect(color="#d9d9d9").transform_filter("!datum.any_fits").encode(
        tooltip=[*where, alt.Tooltip("least_miss_gib:Q", format=",.3f", title="closest layout over usable memory (GiB)")]
    )
    fits = base.mark_rect().transform_filter("datum.any_fits").encode(
        alt.Color("best_spare_gib:Q").scale(scheme="greens").title(SPARE),
        tooltip=tooltips(*where, "fitting", alt.Tooltip("best_spare_gib:Q", format=",.3f", title=SPARE)),
    )
    dark = 0.55 * (rows["best_spare_gib"].max() or 0)  # white text on the darker half of the colour scale
    labels = base.mark_text(fontSize=8).transform_filter("datum.any_fits").encode(
        alt.Text("fitting:Q", format=","),
        color=alt.condition(f"datum.best_spare_gib > {dark:.6g}", alt.value("white"), alt.value("black")),
    )
    cells = (misses + fits + labels).properties(width=alt.Step(26), height=alt.Step(18))
    return cells.facet(alt.Facet("gpu:N").title("GPU type (cell text: layouts that fit)"), columns=3)
