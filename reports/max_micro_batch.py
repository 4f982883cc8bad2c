"""
Largest micro-batch that fits
-----------------------------
For one model, the largest micro-batch (samples per GPU) that fits on each GPU type at each GPU count and sequence length; grey cells fit no micro-batch, and a cell marked "+" fits the largest micro-batch the sweep tried, so a larger one may fit too.
"""

import altair as alt
import polars as pl

from reports import LAYOUT, tooltips

POSITION = 6
QUERY = "report_max_micro_batch"
PARAMS = {"method": "method", "model": "model"}
LEGEND = "largest micro-batch (samples)"


def labelled(rows: pl.DataFrame) -> pl.DataFrame:
    """Each cell's label: the micro-batch, with '+' where it is the sweep's largest (the sweep, not the memory,
    stopped it)."""
    capped = pl.col("max_micro_batch") == pl.col("top_micro_batch")
    text = pl.col("max_micro_batch").cast(pl.String)
    return rows.with_columns(capped=capped.fill_null(False), label=pl.when(capped).then(text + "+").otherwise(text))


def chart(rows: pl.DataFrame) -> alt.FacetChart:
    rows = labelled(rows)
    top = rows["top_micro_batch"][0]
    base = alt.Chart().encode(
        alt.X("n_gpus:O").title("GPUs (count)"),
        alt.Y("gpu:N").title("GPU type"),
    )
    where = tooltips("gpu", "n_gpus", "seq_len")
    none_fit = base.mark_rect(color="#d9d9d9").transform_filter("datum.max_micro_batch == null").encode(tooltip=where)
    legend = alt.Legend(labelExpr=f"datum.value == {top} ? datum.label + '+' : datum.label")
    cells = base.mark_rect().transform_filter("datum.max_micro_batch != null").encode(
        alt.Color("max_micro_batch:O").scale(scheme="blues").legend(legend).title(LEGEND),
        tooltip=tooltips(
            *where,
            alt.Tooltip("label:N", title=LEGEND),
            alt.Tooltip("tokens_per_gpu:Q", format=",", title="tokens per GPU per micro-step"),
            *LAYOUT,
            "device_peak_gib",
            "spare_gib",
        ),
    )
    labels = base.mark_text(fontSize=9).transform_filter("datum.max_micro_batch != null").encode(
        alt.Text("label:N"),
        color=alt.condition("datum.capped", alt.value("white"), alt.value("black")),
    )
    subtitle = (f"{top}+: the sweep's largest micro-batch ({top}) fits; larger ones were not swept"
                if rows["capped"].any() else f"the sweep tried micro-batches up to {top}")
    return alt.layer(none_fit, cells, labels, data=rows).properties(width=alt.Step(24), height=alt.Step(18)).facet(
        alt.Facet("seq_len:O").title("sequence length (tokens)"), columns=3
    ).properties(title=alt.Title(f"{rows['model'][0]}", subtitle=subtitle))
