"""
Largest micro-batch that fits
-----------------------------
For one model, the largest micro-batch (samples per GPU) that fits on each GPU type at each GPU count and sequence length; grey cells fit no micro-batch.
"""

import altair as alt
import polars as pl

POSITION = 6
QUERY = "report_max_micro_batch"
PARAMS = {"method": "method", "model": "model"}


def chart(rows: pl.DataFrame) -> alt.FacetChart:
    base = alt.Chart().encode(
        alt.X("n_gpus:O").title("GPUs (count)"),
        alt.Y("gpu:N").title("GPU type"),
    )
    where = [alt.Tooltip("gpu:N", title="GPU type"), alt.Tooltip("n_gpus:Q", title="GPUs"),
             alt.Tooltip("seq_len:Q", format=",", title="sequence (tokens)")]
    none_fit = base.mark_rect(color="#d9d9d9").transform_filter("datum.max_micro_batch == null").encode(tooltip=where)
    cells = base.mark_rect().transform_filter("datum.max_micro_batch != null").encode(
        alt.Color("max_micro_batch:O").scale(scheme="blues").title("largest micro-batch (samples)"),
        tooltip=[
            *where,
            alt.Tooltip("max_micro_batch:Q", title="largest micro-batch (samples)"),
            alt.Tooltip("tokens_per_gpu:Q", format=",", title="tokens per GPU per micro-step"),
            alt.Tooltip("tp:Q", title="tensor parallel"),
            alt.Tooltip("pp:Q", title="pipeline parallel"),
            alt.Tooltip("zero_stage:Q", title="ZeRO stage"),
            alt.Tooltip("checkpointing:N", title="recompute"),
            alt.Tooltip("device_peak_gib:Q", format=",.3f", title="device peak (GiB)"),
            alt.Tooltip("headroom_gib:Q", format=",.3f", title="headroom (GiB)"),
        ],
    )
    labels = base.mark_text(fontSize=9).transform_filter("datum.max_micro_batch != null").encode(alt.Text("max_micro_batch:Q"))
    return alt.layer(none_fit, cells, labels, data=rows).properties(width=alt.Step(24), height=alt.Step(18)).facet(
        alt.Facet("seq_len:O").title("sequence length (tokens)"), columns=3
    ).properties(title=f"{rows['model'][0]}")
