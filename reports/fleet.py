"""
Fleet comparison
----------------
For each model, the GPU types ranked by the fewest GPUs that train it (left) and by the $/h of that smallest fleet (right; GPU types without a catalog price are marked).
"""

import altair as alt
import polars as pl

POSITION = 3
QUERY = "cheapest_fleet"
PARAMS = {}  # cheapest_fleet.sql returns every method; the report keeps the rows of the one it shows

TOOLTIP = [
    alt.Tooltip("model:N", title="model"),
    alt.Tooltip("gpu:N", title="GPU type"),
    alt.Tooltip("min_gpus:Q", format=",", title="fewest GPUs"),
    alt.Tooltip("nodes:Q", format=",", title="nodes"),
    alt.Tooltip("usd_per_gpu_hour:Q", format="$,.3f", title="$/GPU-hour"),
    alt.Tooltip("fleet_usd_per_hour:Q", format="$,.2f", title="fleet $/h"),
]


def ranked(rows: pl.DataFrame, field: str, title: str, label: str) -> alt.FacetChart:
    """One dot per GPU type on a log axis, GPU types sorted by `field` within each model's row."""
    base = alt.Chart(rows).encode(
        alt.Y("gpu:N").sort(alt.EncodingSortField(field, op="min")).title(None),
        tooltip=TOOLTIP,
    )
    dots = base.mark_point(filled=True, size=60).encode(
        alt.X(f"{field}:Q").scale(type="log", zero=False, padding=12).title(title),
        alt.Color("gpu:N").legend(None),
    )
    text = base.mark_text(align="left", dx=8, fontSize=10).encode(alt.X(f"{field}:Q"), alt.Text(f"{field}:Q", format=label))
    unpriced = base.mark_text(align="left", fontSize=10, color="#888").transform_filter(
        f"datum.{field} == null").encode(x=alt.value(0), text=alt.value("no catalog price"))
    layers = dots + text + unpriced if field == "fleet_usd_per_hour" else dots + text
    return layers.properties(width=260, height=alt.Step(14)).facet(
        row=alt.Row("model:N").sort(alt.EncodingSortField("min_gpus", op="max")).title(None).header(labelAngle=0, labelAlign="left")
    ).resolve_scale(y="independent")


def chart(rows: pl.DataFrame) -> alt.HConcatChart:
    gpus = ranked(rows, "min_gpus", "fewest GPUs that fit (GPUs, log scale)", ",")
    cost = ranked(rows, "fleet_usd_per_hour", "that fleet's price ($/h, log scale)", "$,.0f")
    return alt.hconcat(gpus, cost)
