"""
The feasible frontier
---------------------
The largest catalog model (parameters, log scale) that trains on each GPU type as the fleet grows: one line per GPU type.
"""

import altair as alt
import polars as pl

from reports import LAYOUT, tooltips

POSITION = 2
QUERY = "frontier"
PARAMS = {}  # frontier.sql returns every method; the report keeps the rows of the one it shows

X_TITLE = "GPUs (count, log scale)"
BILLIONS = "format(datum.value / 1e9, '~g') + 'B'"


def ticks_125(lo: float, hi: float) -> list[float]:
    """1, 2, 5 x 10^k between lo and hi: readable ticks for a log axis."""
    k, out = 0, []
    while 10**k <= hi:
        out += [m * 10**k for m in (1, 2, 5) if lo <= m * 10**k <= hi]
        k += 1
    return out


def missing(rows: pl.DataFrame) -> str:
    """Why there is no frontier to draw, or "" when there is one."""
    if rows["n_gpus"].n_unique() < 2:
        return "The sweep has one GPU count, so there is no frontier to draw: see what fits where, above."
    return ""


def chart(rows: pl.DataFrame) -> alt.LayerChart:
    lo, hi = rows["n_params"].min(), rows["n_params"].max()
    base = alt.Chart(rows).encode(
        alt.X("n_gpus:Q").scale(type="log", base=2).axis(values=sorted(set(rows["n_gpus"].to_list())))
        .title(X_TITLE),
        alt.Y("n_params:Q").scale(type="log").axis(labelExpr=BILLIONS, values=ticks_125(lo / 2, hi * 2))
        .title("largest model that fits (parameters, log scale)"),
        alt.Color("gpu:N").title("GPU type"),
    )
    # GPU types often share a step: dashes keep overlapping lines apart; one mark keeps one legend
    lines = base.mark_line(interpolate="step-after", opacity=0.8, point=alt.OverlayMarkDef(filled=True, size=50)).encode(
        alt.StrokeDash("gpu:N").title("GPU type"),
        tooltip=tooltips("gpu", "n_gpus", "model", "n_params", *LAYOUT, "micro_batch", "seq_len", "spare_gib",
                         model="largest model that fits", spare_gib="to spare: usable - device peak (GiB)"),
    )
    # name each model once, where the first GPU type reaches it
    names = base.mark_text(align="left", dx=4, dy=-8, fontSize=10).encode(
        alt.X("min(n_gpus):Q").title(X_TITLE), alt.Text("model:N"), color=alt.value("#444"))
    return (lines + names).properties(width=560, height=320)
