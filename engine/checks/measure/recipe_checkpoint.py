"""Activation checkpointing as torchtitan applies it: op-level selective (``selective_op``) and every n-th layer.

Both wrap each transformer block, as torchtitan's ``apply_ac`` does (one checkpoint per block, inputs saved,
non-reentrant ``torch.utils.checkpoint``); here through transformers' own per-layer hook
(``GradientCheckpointingLayer`` checkpoints ``forward`` with ``_gradient_checkpointing_func``), which is the
same call on the same boundary.

``selective_op`` is torchtitan's ``SelectiveAC`` (torchtitan/distributed/activation_checkpoint.py at
b5bcd76c, 2026-08; the mm rule unchanged since the per-model ``_op_sac_save_list`` of 2024): inside a block,
an op's output is saved (``MUST_SAVE``) when the op is in the save set, except that every second ``mm`` /
``linear`` (counted per block call, in call order) is recomputed; everything else is recomputed
(``PREFER_RECOMPUTE``). The save set is ``torch._functorch.partitioners.get_default_op_list()
.compute_intensive_ops`` (mm, addmm, bmm, the flash / efficient SDPA kernels, convolution, _scaled_mm...)
plus the other SDPA variants, ``max``, ``linear`` and ``topk``. Counted ops are only ``mm`` and ``linear``:
``addmm`` (GPT-2's Conv1D, Qwen2's q/k/v with bias) and ``bmm`` (eager attention) are always saved.
torchtitan's wrapper passes ``early_stop=False`` and, by default, ``preserve_rng_state=True``.

``checkpoint_every = n`` is torchtitan's layer-frequency mode (``_apply_layer_sac``, removed upstream in
114151ad4, 2026-03): a counter over the blocks starting at 1 checkpoints block ``i`` (0-based) when
``(i + 1) % n == 0``, i.e. floor(L / n) blocks, the last one of every group of n. (transformers'
``every_n_layers`` picks ``i % n == 0`` instead: ceil(L / n) blocks, the first of every group.)
"""

from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    create_selective_checkpoint_contexts,
)

from engine.checks.measure.build import transformer_blocks

MM_OPS = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)


def save_ops() -> set:
    """torchtitan's ``_get_default_save_ops()`` for one device (no collectives run here)."""
    from torch._functorch.partitioners import get_default_op_list

    aten = torch.ops.aten
    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_attention_math.default,
            aten._scaled_dot_product_fused_attention_overrideable.default, aten.max.default,
            aten.linear.default, aten.topk.default}
    return ops


def selective_policy(saved: set):
    """A fresh policy for one block call: save ``saved`` ops, but recompute every second mm/linear."""
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in MM_OPS:
            counts[mode] += 1
        if func in saved:
            if func in MM_OPS and counts[mode] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _context_fn(saved: set):
    return create_selective_checkpoint_contexts(selective_policy(saved))


def apply_selective_op(model: torch.nn.Module) -> None:
    """Checkpoint every block with torchtitan's op-level policy (non-reentrant, early_stop=False)."""
    base = getattr(model, "get_base_model", lambda: model)()
    kwargs = {"use_reentrant": False, "context_fn": functools.partial(_context_fn, save_ops()),
              "preserve_rng_state": True, "early_stop": False}
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def apply_every(model: torch.nn.Module, n: int) -> list[int]:
    """Keep checkpointing (already enabled on every block) only on blocks ``i`` with ``(i + 1) % n == 0``."""
    kept = []
    for i, block in enumerate(transformer_blocks(model)):
        block.gradient_checkpointing = (i + 1) % n == 0
        if block.gradient_checkpointing:
            kept.append(i)
    return kept

