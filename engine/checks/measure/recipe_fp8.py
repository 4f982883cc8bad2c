"""``precision = fp8``: float8 training as torchtitan runs it on one device, with torchao's Float8Linear.

torchtitan (components/quantization/float8.py @ b5bcd76c) swaps every ``nn.Linear`` but the filtered ones
(its configs filter the output head; dims not divisible by 16 are always skipped) for torchao's
``Float8Linear`` with ``Float8LinearConfig.from_recipe_name("rowwise")``; on one device (no FSDP) it trains
fp32 parameters under ``torch.autocast(bf16)`` (``maybe_enable_amp``). Here: the same swap on the Hugging Face
model (``lm_head`` filtered), fp32 parameters, bf16 autocast (``train.AMP_DTYPE``).

Two adjustments make the fake CPU run see what a CUDA run sees:

* ``Float8Linear.forward`` casts its input to the autocast dtype when ``torch.is_autocast_enabled()``, which
  asks about CUDA's autocast; the harness autocasts on the CPU key (with CUDA's policy), so a forward pre-hook
  does that cast when the CPU autocast is on.
* torchao's ``Float8TrainingTensor`` is a wrapper subclass whose own storage reports ``numel x orig dtype``
  bytes although it holds none (its fp8 ``_data`` and ``_scale`` are separate tensors, tracked when the cast
  makes them). ``wrappers_untracked()`` keeps the tracker from logging wrapper outputs as allocations.

Not seen: temporaries made inside the wrapper's own dispatch (``.contiguous()`` layout copies of fp8 data
before ``_scaled_mm``), as for any kernel-internal buffer.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from engine.errors import UserError

RECIPE = "rowwise"  # torchtitan's Float8LinearConverter default
FILTER_FQNS = ("lm_head",)  # torchtitan's configs: filter_fqns = ["output"]


def check(c: dict) -> None:
    """UserError when ``precision = fp8`` cannot run: no torchao, or no ``nn.Linear`` to convert."""
    if c["precision"] != "fp8":
        return
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise UserError("precision='fp8' needs torchao (torchao.float8.Float8Linear): pip install torchao") from None
    if c["ffn_type"] == "gelu":
        raise UserError("precision='fp8' converts nn.Linear layers; GPT-2's Conv1D layers have none (measure a "
                        "Llama/Qwen2-style model)")
    if c["lora_rank"] > 0:
        raise UserError("precision='fp8' is measured for full training only (lora_rank 0)")


def _keep(module: torch.nn.Module, fqn: str) -> bool:
    """torchtitan's ``module_filter_fn``: not a filtered name, both dims divisible by 16."""
    return (not any(f in fqn for f in FILTER_FQNS) and module.in_features % 16 == 0
            and module.out_features % 16 == 0)


def _autocast_input(module, args):
    """``Float8Linear.forward``'s ``input.to(autocast dtype)``, for the harness's CPU-key autocast."""
    if torch.is_autocast_enabled("cpu"):
        return (args[0].to(torch.get_autocast_dtype("cpu")), *args[1:])
    return None


def convert(model: torch.nn.Module) -> int:
    """Swap the model's linear layers for Float8Linear (rowwise); returns how many were swapped."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    base = getattr(model, "get_base_model", lambda: model)()
    convert_to_float8_training(base, config=Float8LinearConfig.from_recipe_name(RECIPE), module_filter_fn=_keep)
    swapped = [m for m in base.modules() if isinstance(m, Float8Linear)]
    for m in swapped:
        m.register_forward_pre_hook(_autocast_input)
    return len(swapped)


@contextmanager
def wrappers_untracked():
    """While active, the tracker ignores tensor-subclass wrappers (their inner tensors are what is allocated)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    from engine.checks.measure.tracker import LiveBytes

    original = LiveBytes.track

    def track(self, t, op="external"):
        if not is_traceable_wrapper_subclass(t):
            original(self, t, op)

    LiveBytes.track = track
    try:
        yield
    finally:
        LiveBytes.track = original
