"""Every output column of CONFIG.md, once: its name, type, unit, the level that computes it, whether it may be NULL,
whether a compact sweep keeps it, what it means and where its definition comes from.

The rest is read from here: the level tuples of engine/model/levels.py (RankColumns, StepColumns, GpuColumns,
DeviceColumns) and time.py (Times) take their fields from OUTPUT_COLUMNS, the Parquet schema of a sweep or an
estimate (engine/dataset/columns.py) its types, nullability and compact set, the vocabulary page
(engine/cli/docs.py) and the SQL view `outputs` (engine/dataset/views.py) the rest. A new output is one line
here and its value in the one level function that computes it.

Levels (engine/model/levels.py): `rank` the model states one rank holds (no workload, no GPU); `step` one training
step's peak; `gpu` what a GPU type offers a layout; `device` one configuration on one GPU; `time` its step time and
cost (float64; NaN is NULL).
"""

from typing import NamedTuple


class Output(NamedTuple):
    name: str
    level: str  # rank | step | gpu | device | time
    dtype: str  # int64 | float64 | bool | category (a dictionary-encoded string; the kernels hold its int code)
    unit: str  # bytes, s, tokens/s, ... ('' for a flag or a category)
    meaning: str
    source: str  # where the definition comes from: the framework call, paper or file it follows
    nullable: bool = True  # NULL where the configuration cannot run (or its model has no dims)
    compact: bool = False  # kept by `[output] compact = true`: what feasibility questions need


LEVELS = {
    "rank": "what one rank holds that the workload and the GPU do not change: the model states",
    "step": "one training step's peak (NULL where its layout or sequence cannot run; what it holds where it runs on "
            "a GPU that cannot run it)",
    "gpu": "what a GPU type offers a layout, and what lives on it beside the tensors",
    "device": "one configuration on one GPU: the step's peak beside that GPU's overheads, and whether it runs there",
    "time": "time and cost of one optimizer step (NaN where the configuration cannot run, or no price is known)",
}

STATES = "engine/model/states.py; ZeRO arXiv:1910.02054 sec. 5"
PEAK = ("engine/model/peak.py (forward, backward and optimizer phases), load.py (the checkpoint's load), save.py (a "
        "checkpoint's save)")

OUTPUT_COLUMNS = [
    Output("weight_bytes", "rank", "int64", "bytes", "weights resident on the GPU (after ZeRO-3 / FSDP sharding)",
           STATES),
    Output("grad_bytes", "rank", "int64", "bytes", "gradients resident on the GPU once backward ends", STATES),
    Output("optimizer_bytes", "rank", "int64", "bytes", "optimizer states (and fp32 master weights) on the GPU",
           STATES + "; data/optimizers.toml"),
    Output("activation_bytes", "step", "int64", "bytes", "saved for backward, live at the peak",
           "engine/model/activations.py; Korthikanti et al. arXiv:2205.05198 sec. 4"),
    Output("temp_bytes", "step", "int64", "bytes",
           "transient buffers live at the peak: logits and loss, gathered shards, gradient buckets, optimizer-step "
           "temporaries, recompute buffers", "engine/model/temporaries.py, sharding.py, loss.py"),
    Output("allocated_peak_bytes", "step", "int64", "bytes",
           "peak of live tensor bytes over forward, backward and the optimizer step",
           "torch.cuda.max_memory_allocated(); " + PEAK),
    Output("reserved_peak_bytes", "step", "int64", "bytes", "allocated peak + the caching allocator's slack",
           "torch.cuda.max_memory_reserved(); engine/model/overhead.py allocator_slack_bytes, stage.py "
           "pinned_segment_bytes, param_blocks.py homeless_bytes, streams.py"),
    Output("overhead_bytes", "gpu", "int64", "bytes",
           "on the GPU outside PyTorch's allocator: CUDA context, cuBLAS workspaces, NCCL buffers",
           "engine/model/overhead.py, nccl.py; data/golden/OVERHEADS.md", nullable=False),
    Output("device_peak_bytes", "device", "int64", "bytes", "reserved + overhead: what nvidia-smi shows at the peak",
           "nvidia-smi memory.used", compact=True),
    Output("peak_phase", "step", "category", "", "the phase that holds the peak: forward, backward or optimizer of the step, eval (an evaluation forward between steps, eval_micro_batch), load (the checkpoint loaded before the first step: a quantized base built whole before ZeRO-3 partitions it), or save (a checkpoint saved between steps: the largest tensor a full state dict gathers, save_state_dict = full)", PEAK, compact=True),
    Output("capacity_bytes", "gpu", "int64", "bytes", "the GPU's memory", "data/gpus.toml hbm_bytes",
           nullable=False, compact=True),
    Output("fits", "device", "bool", "", "device_peak_bytes <= usable_bytes, and the offload's host RAM is there",
           "engine/model/levels.py device_terms", nullable=False, compact=True),  # false where it cannot run
    Output("bottleneck", "device", "category", "", "the largest of the tensors' components, or the overhead",
           "engine/model/levels.py largest_component", compact=True),
    Output("host_bytes", "step", "int64", "bytes",
           "host RAM the offload needs per GPU: offloaded states and activations",
           "engine/model/states.py host_states_bytes; ZeRO-Offload arXiv:2101.06840 sec. 4"),
    Output("valid", "device", "bool", "", "whether the configuration can run at all: its layout, its sequence, and "
           "on this GPU", "engine/model/validity.py", nullable=False, compact=True),
    Output("invalid_reason", "device", "category", "", "why the configuration cannot run (NULL on valid rows)",
           "engine/model/validity.py", compact=True),
    Output("step_time_s", "time", "float64", "s",
           "seconds per optimizer step: every micro-batch, the pipeline bubble, exposed communication",
           "engine/model/time.py; roofline, Williams et al. CACM 52(4)"),
    Output("tokens_per_gpu_s", "time", "float64", "tokens/s", "training tokens per second per GPU",
           "torchtitan's TPS/GPU; engine/model/time.py", compact=True),
    Output("mfu", "time", "float64", "fraction",
           "model FLOPs utilization: model FLOPs per token x tokens/s / the GPU's dense bf16 peak",
           "PaLM arXiv:2204.02311 app. B; engine/model/flops.py"),
    Output("cost_per_mtok", "time", "float64", "USD per 1e6 tokens",
           "US dollars per million training tokens at the catalog's $/GPU-hour", "data/gpus.toml usd_per_hour",
           compact=True),
    # Beyond CONFIG.md's first list: the states live at the peak (so that the components add up to
    # allocated_peak_bytes), the allocator's slack and the usable bytes behind `fits`.
    Output("peak_grad_bytes", "step", "int64", "bytes", "gradients live at the peak", PEAK),
    Output("peak_optimizer_bytes", "step", "int64", "bytes", "optimizer states live at the peak", PEAK),
    Output("allocator_slack_bytes", "step", "int64", "bytes",
           "reserved - allocated: the caching allocator's rounding and fragmentation, the loss's blocks cut again, "
           "the segments checkpointed inputs pin, and what FSDP's all-gather and reduce-scatter streams keep cached",
           "c10/cuda/CUDACachingAllocator.cpp (best fit, pools per stream); engine/model/overhead.py, stage.py, "
           "streams.py"),
    Output("usable_bytes", "gpu", "int64", "bytes", "capacity * (1 - headroom): what the job may use",
           "the headroom input", nullable=False, compact=True),
]

OUTPUTS = [o.name for o in OUTPUT_COLUMNS]


def level_fields(level: str) -> list[tuple[str, type]]:
    """(name, Python type) of the outputs a level computes, in OUTPUT_COLUMNS' order: a level tuple's fields."""
    return [(o.name, float if o.dtype == "float64" else int) for o in OUTPUT_COLUMNS if o.level == level]


def names_where(**wanted) -> list[str]:
    """The outputs whose attributes have the given values, in order: names_where(dtype="bool")."""
    return [o.name for o in OUTPUT_COLUMNS if all(getattr(o, k) == v for k, v in wanted.items())]
