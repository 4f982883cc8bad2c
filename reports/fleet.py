"""
Fleet comparison
----------------
For each model, the GPU types ranked by the fewest GPUs that train it (left) and by the $/h of that smallest fleet (right; GPU types without a catalog price are marked and ranked last).
"""

import altair as alt
import polars as pl

from reports import price_basis, tooltips

POSITION = 3
QUERY = "cheapest_fleet"
PARAMS = {}  # cheapest_fleet.sql returns every method; the report keeps the rows of the one it shows

TOOLTIP = tooltips(
    "model",
    "gpu",
    alt.Tooltip("min_gpus:Q", format=",", title="fewest GPUs"),
    alt.Tooltip("nodes:Q", format=",", title="nodes"),
    alt.Tooltip("usd_per_gpu_hour:Q", format="$,.3f", title="$/GPU-hour"),
    alt.Tooltip("fleet_usd_per_hour:Q", format="$,.2f", title="fleet $/h"),
    alt.Tooltip("nodes_usd_per_hour:Q", format="$,.2f", title="its whole nodes $/h"),
    "price_source",
    "price_date",
)


def powers(values: list[float], base: int) -> list[float]:
    """Powers of `base` spanning the values: the ticks (and grid lines) of a log axis."""
    lo, hi = min(values, default=1), max(values, default=1)
    tick = 1.0
    while tick > lo:
        tick /= base
    while tick * base <= lo:
        tick *= base
    ticks = [tick]
    while ticks[-1] < hi or len(ticks) < 2:  # two ticks at least: a log domain needs a width
        ticks.append(ticks[-1] * base)
    return ticks


def ranked(rows: pl.DataFrame, field: str, title: str, label: str, base: int) -> alt.FacetChart:
    """One dot per GPU type on a log axis, GPU types sorted by `field` within each model's row."""
    ticks = powers(rows[field].drop_nulls().to_list(), base)
    chart = alt.Chart(rows).transform_calculate(rank=f"datum.{field} == null ? 1e15 : datum.{field}").encode(
        alt.Y("gpu:N").sort(alt.EncodingSortField("rank", op="min")).title(None),
        tooltip=TOOLTIP,
    )
    x = alt.X(f"{field}:Q").scale(type="log", base=base, domain=[ticks[0], ticks[-1]]).axis(values=ticks).title(title)
    dots = chart.mark_point(filled=True, size=60).encode(x, alt.Color("gpu:N").legend(None))
    text = chart.mark_text(align="left", dx=8, fontSize=10).encode(x, alt.Text(f"{field}:Q", format=label))
    unpriced = chart.mark_text(align="left", dx=6, fontSize=10, color="#888").transform_filter(
        f"datum.{field} == null").encode(x=alt.value(0), text=alt.value("no catalog price"))
    return (dots + text + unpriced).properties(width=260, height=alt.Step(14)).facet(
        row=alt.Row("model:N").sort(alt.EncodingSortField("min_gpus", op="max")).title(None)
        .header(labelAngle=0, labelAlign="left")
    ).resolve_scale(y="independent")


def chart(rows: pl.DataFrame) -> alt.HConcatChart:
    gpus = ranked(rows, "min_gpus", "fewest GPUs that fit (GPUs, log scale)", ",", base=2)
    cost = ranked(rows, "fleet_usd_per_hour", "that fleet's price ($/h, log scale)", "$,.0f", base=10)
    basis = price_basis(rows)
    prices = f"Prices: {basis} (data/gpus.toml price_source); fleet $/h = GPUs x $/GPU-hour" if basis \
        else "No GPU type here has a catalog price"
    return alt.hconcat(gpus, cost).properties(title=alt.Title("Fewest GPUs and their price", subtitle=prices))
