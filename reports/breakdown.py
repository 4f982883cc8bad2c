"""
Where the memory goes
---------------------
Each model's fewest-GPU layout on one GPU type, its device peak split into components (GiB), against the GPU's capacity (solid rule) and the usable memory once headroom is kept free (dashed rule).
"""

import altair as alt
import polars as pl

from reports import tooltips

POSITION = 4
QUERY = "report_breakdown"
NEEDS_FULL_ROWS = True  # the seven components: not in a sweep written with [output] compact = true
PARAMS = {"method": "method", "gpu": "gpu"}

# column -> legend label, in stacking order: model states, then what the step adds, then what PyTorch adds
COMPONENTS = {
    "weight_gib": "weights",
    "grad_gib": "gradients",
    "optimizer_gib": "optimizer states",
    "activation_gib": "activations",
    "temp_gib": "temporaries",
    "slack_gib": "allocator slack",
    "overhead_gib": "CUDA context, NCCL, workspace",
}
X_TITLE = "device memory at the peak (GiB)"
LAYOUT = ["model", "gpu", "n_params", "layout_label", "n_gpus", "micro_batch", "seq_len", "peak_phase",
          "device_peak_gib", "capacity_gib", "usable_gib"]


def chart(rows: pl.DataFrame) -> alt.LayerChart:
    long = rows.unpivot(index=LAYOUT, on=list(COMPONENTS), variable_name="column", value_name="gib").with_columns(
        component=pl.col("column").replace_strict(COMPONENTS),
        stack_order=pl.col("column").replace_strict({c: k for k, c in enumerate(COMPONENTS)}),
    )
    y = alt.Y("layout_label:N").sort(alt.EncodingSortField("n_params", op="max", order="ascending")).axis(labelLimit=420).title(None)
    bars = alt.Chart(long).mark_bar().encode(
        alt.X("gib:Q").stack("zero").title(X_TITLE),
        y,
        alt.Color("component:N").scale(domain=list(COMPONENTS.values()), scheme="tableau10").title("component"),
        alt.Order("stack_order:Q"),
        tooltip=tooltips(
            "model",
            alt.Tooltip("component:N", title="component"),
            alt.Tooltip("gib:Q", format=",.3f", title="GiB"),
            "device_peak_gib",
            alt.Tooltip("peak_phase:N", title="peak phase"),
            "micro_batch",
            "seq_len",
        ),
    )
    base = alt.Chart(rows)
    capacity = base.mark_rule(color="black", strokeWidth=2).encode(
        alt.X("max(capacity_gib):Q").title(X_TITLE), tooltip=[alt.Tooltip("max(capacity_gib):Q", format=",.3f", title="capacity (GiB)")])
    usable = base.mark_rule(color="black", strokeDash=[6, 4]).encode(
        alt.X("max(usable_gib):Q").title(X_TITLE), tooltip=[alt.Tooltip("max(usable_gib):Q", format=",.3f", title="usable: capacity less headroom (GiB)")])
    title = f"Each model's fewest-GPU layout on {rows['gpu'][0]}"
    return (bars + capacity + usable).properties(width=560, height=alt.Step(22), title=title)
