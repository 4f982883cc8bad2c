"""
Cost and time to train
----------------------
For each model, what training a fixed number of tokens costs against how long it takes, one dot per GPU type and count (its fastest layout that fits, pipelines filled with at least as many micro-batches as stages); the line joins the fleets no other fleet beats on both, each labelled with its size, and the cheapest is the one that trains the tokens for the fewest dollars, not the lowest $/h. A GPU type that fits but has no dot is named under the title with the reason.
"""

import altair as alt
import polars as pl

from reports import price_basis, tooltips

POSITION = 4
QUERY = "report_cost_frontier"
PARAMS = {"method": "method"}


def amount(tokens: float) -> str:
    """1e12 -> '1T', 2e11 -> '200B': the token count in axis titles."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            return f"{tokens / scale:g}{suffix}"
    return f"{tokens:g}"


def missing(rows: pl.DataFrame) -> str:
    """Why there is no trade-off to draw, or "" when there is one."""
    drawn = rows.filter(pl.col("drawn"))
    if drawn.is_empty():
        return "No fleet that fits has a known time and price: " + "; ".join(not_drawn(rows)) + "."
    if drawn.select(pl.struct("gpu", "n_gpus").n_unique()).item() < 2:
        return "One fleet trains these models, so there is no cost/time trade-off to draw."
    return ""


def counts(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,} GPUs" if low == high else f"{low:,}-{high:,} GPUs"


def not_drawn(rows: pl.DataFrame) -> list[str]:
    """Each GPU type that fits with no dot, and why: 'l40s at 16-512 GPUs: no network bandwidth ...'."""
    left = rows.filter(~pl.col("drawn")).group_by("gpu", "why_not_drawn", maintain_order=True).agg(pl.col("n_gpus"))
    return [f"{r['gpu']} at {counts(r['n_gpus'])}: {r['why_not_drawn']}" for r in left.sort("gpu").iter_rows(named=True)]


def chart(rows: pl.DataFrame) -> alt.FacetChart:
    tokens = amount(rows["tokens"][0])
    left = not_drawn(rows)
    rows = rows.filter(pl.col("drawn")).with_columns(fleet=pl.col("n_gpus").cast(pl.String) + " × " + pl.col("gpu"))
    base = alt.Chart(rows).encode(
        alt.X("days:Q").scale(type="log", nice=False, padding=16).axis(labelOverlap="greedy", labelSeparation=8, format=",.3~r")
        .title(f"days to train {tokens} tokens (log scale)"),
        alt.Y("usd:Q").scale(type="log", nice=False, padding=16).axis(labelOverlap="greedy", format="$,.3~s")
        .title(f"$ to train {tokens} tokens (USD, log scale)"),
        alt.Color("gpu:N").title("GPU type"),
        tooltip=tooltips(
            "model",
            alt.Tooltip("fleet:N", title="fleet"),
            alt.Tooltip("days:Q", format=",.1f", title="days"),
            alt.Tooltip("usd:Q", format="$,.0f", title="cost (USD)"),
            alt.Tooltip("usd_per_mtok:Q", format="$,.3f", title="$ per million tokens"),
            alt.Tooltip("tokens_per_gpu_s:Q", format=",.0f", title="tokens/s per GPU"),
            alt.Tooltip("layout:N", title="fastest layout"),
            alt.Tooltip("on_frontier:N", title="on the frontier"),
            "price_source",
        ),
    )
    dots = base.mark_point(filled=True, size=40, opacity=0.35)
    frontier = base.transform_filter("datum.on_frontier")
    line = frontier.mark_line(color="#444", strokeWidth=1.5).encode(alt.Order("days:Q"), color=alt.value("#444"))
    best = frontier.mark_point(filled=True, size=90, stroke="#222", strokeWidth=0.8)
    labels = frontier.mark_text(align="left", dx=7, dy=-6, fontSize=10).encode(alt.Text("fleet:N"), color=alt.value("#333"))
    subtitle = [f"Cheapest: the fewest dollars to train {tokens} tokens (not the lowest $/h). "
                f"Prices: {price_basis(rows)} (data/gpus.toml)"]
    subtitle += [f"No dot: {line}" for line in left]
    title = alt.Title(f"Cost and time to train {tokens} tokens", subtitle=subtitle)
    return (line + dots + best + labels).properties(width=520, height=240).facet(
        row=alt.Row("model_label:N").sort(alt.EncodingSortField("n_params", op="max")).title(None)
        .header(labelAngle=0, labelAlign="left")
    ).resolve_scale(x="independent", y="independent").properties(title=title)
