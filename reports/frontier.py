"""
The feasible frontier
---------------------
The largest catalog model (parameters, log scale) that trains on each GPU type as the fleet grows: one line per GPU type.
"""

import altair as alt
import polars as pl

POSITION = 2
QUERY = "frontier"
PARAMS = {}  # frontier.sql returns every method; the report keeps the rows of the one it shows

BILLIONS = "format(datum.value / 1e9, '~g') + 'B'"


def chart(rows: pl.DataFrame) -> alt.LayerChart:
    base = alt.Chart(rows).encode(
        alt.X("n_gpus:Q").scale(type="log", base=2).axis(values=sorted(set(rows["n_gpus"].to_list())))
        .title("GPUs (count, log scale)"),
        alt.Y("n_params:Q").scale(type="log").axis(labelExpr=BILLIONS)
        .title("largest model that fits (parameters, log scale)"),
        alt.Color("gpu:N").title("GPU type"),
    )
    lines = base.mark_line(interpolate="step-after", opacity=0.7)
    points = base.mark_point(filled=True, size=50).encode(
        alt.Shape("gpu:N").title("GPU type"),
        tooltip=[
            alt.Tooltip("gpu:N", title="GPU type"),
            alt.Tooltip("n_gpus:Q", title="GPUs"),
            alt.Tooltip("model:N", title="largest model that fits"),
            alt.Tooltip("n_params:Q", format=",", title="parameters"),
            alt.Tooltip("tp:Q", title="tensor parallel"),
            alt.Tooltip("pp:Q", title="pipeline parallel"),
            alt.Tooltip("zero_stage:Q", title="ZeRO stage"),
            alt.Tooltip("checkpointing:N", title="recompute"),
            alt.Tooltip("micro_batch:Q", title="micro-batch (samples)"),
            alt.Tooltip("seq_len:Q", format=",", title="sequence (tokens)"),
            alt.Tooltip("headroom_gib:Q", format=",.3f", title="headroom (GiB)"),
        ],
    )
    return (lines + points).properties(width=560, height=320)
