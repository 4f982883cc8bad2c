"""Shared test helpers: a configuration record from keyword overrides (Megatron's `_make_args`), and a random
configuration of any CONFIG.md input (the kernel's and the formulas' property tests)."""

import numpy as np

from engine.catalogs import catalog
from engine.catalogs.recipes import presets
from engine.configure.resolve import resolve_case
from engine.inputs.vocabulary import RECORD
from engine.model.levels import evaluate_one

TINY_MODEL = dict(n_layers=2, d_model=8, n_heads=2, n_kv_heads=2, d_ff=32, vocab=16, ffn_type="swiglu")


def config(**overrides):
    """A resolved record: the tiny model and memsim's defaults, with overrides in CONFIG.md names."""
    base = {} if "model" in overrides else TINY_MODEL
    case = {**base, "gpu": "h100-sxm-80gb", **overrides}
    rec, _, _ = resolve_case(case)
    return np.array([rec], dtype=RECORD).view(np.recarray)[0]


def outputs(c) -> dict[str, int]:
    """Every output column of one record, by name, from the scalar reference (levels.evaluate_one)."""
    r, s, g, d = evaluate_one(c)
    return {**r.columns._asdict(), **s.columns._asdict(), **g.columns._asdict(), **d.columns._asdict(),
            **d.times._asdict()}


def reference(formula):
    """The plain-Python body of a formula (formulas are plain functions that numba also compiles)."""
    return getattr(formula, "py_func", formula)


CHOICES = dict(
    precision=["fp32", "amp_bf16", "amp_fp16", "bf16", "fp16", "fp8"],
    optimizer=["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit", "lion", "none"],
    framework=["pytorch", "fsdp", "deepspeed", "megatron"],
    checkpointing=["none", "selective", "full", "selective_op"],
    attention=["eager", "sdpa_math", "flash"],
    lora_targets=["qv", "attn", "all_linear"],
    base_quant=["none", "int8", "nf4"],
    offload=["none", "optimizer", "optimizer_params"],
    pp_schedule=["1f1b", "interleaved", "gpipe"],
    optimizer_impl=["foreach", "fused", "forloop"],
    loss_impl=["standard", "chunked", "fused_linear"],
    zero_grad=["none", "zeros"],
    grad_sync=["every", "last"],
    save_state_dict=["sharded", "full"],
    fsdp_groups=["root", "split"],
    allocator=["caching", "expandable"],
    lora_dtype=["fp32", "compute"],
    recipe=["none", *presets()],
)


def random_case(rng) -> dict:
    """Any CONFIG.md input at random, layouts that cannot run included (they must agree too)."""
    pick = lambda xs: xs[rng.integers(len(xs))]  # noqa: E731
    case = {name: pick(values) for name, values in CHOICES.items()}
    case.update(
        model=pick(list(catalog.load_models())), gpu=pick(list(catalog.load_gpus())),
        tp=pick([1, 2, 4, 8]), pp=pick([1, 2, 4]), cp=pick([1, 2]), ep=pick([1, 2, 8]),
        n_gpus=pick([8, 16, 64, 128]), zero_stage=pick([0, 1, 2, 3]), sp=pick([True, False]),
        vpp=pick([1, 2]), seq_len=pick([128, 1024, 4096, 32768]), micro_batch=pick([1, 2, 8]),
        grad_accum=pick([1, 4, 16]), lora_rank=pick([0, 0, 8, 64]), dropout=pick([0.0, 0.1]),
        headroom=pick([0.0, 0.1, 0.15]), paged=pick([True, False]), capacity_factor=pick([1.0, 1.25, 2.0]),
        optimizer_in_backward=pick([True, False]), loss_chunks=pick([1, 8, 64]), checkpoint_every=pick([1, 2, 3]),
        activation_offload=pick([True, False]), compile=pick([True, False]), loss_parallel=pick([True, False]),
        compile_loss=pick([True, False]), shifted_logits=pick([True, False]), outputs_held=pick([True, False]),
        outputs_fp32=pick([True, False]), softmax_saves_input=pick([True, False]),
        quant_lm_head=pick([True, False]), quant_saves_input=pick([True, False]), eval_micro_batch=pick([0, 0, 8, 64]),
        reduce_bucket_size=pick([0, 0, 4096 * 4096]), overlap_comm=pick([True, False]),
    )
    return case
