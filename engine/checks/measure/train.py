"""Two real training steps, with the tracker told which phase and micro-step is running.

A step is what a plain PyTorch loop does (torch.optim docs, "How to use an optimizer"):
``opt.zero_grad(set_to_none=True)``; ``grad_accum`` times: forward with ``labels`` (transformers
computes the shifted cross-entropy, upcasting the logits to fp32), ``(loss / grad_accum).backward()``;
then ``opt.step()``. Step 0 warms up (optimizer states are created lazily in the first
``step()``); step 1 is the one measured.

Optimizers: AdamW/Adam and SGD with momentum with ``foreach=True`` (the CUDA default, see
``torch.optim.optimizer._default_to_fused_or_foreach``; CPU would default to the per-tensor loop),
transformers' Adafactor with ``scale_parameter=False, relative_step=False, lr=1e-3``.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

AMP_DTYPE = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}
HALF_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_optimizer(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer | None:
    """The optimizer CONFIG.md's ``optimizer`` names, over the trainable ``params`` (None for 'none')."""
    if name in ("adamw", "adam"):
        cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        return cls(params, lr=1e-3, foreach=True)
    if name in ("sgd", "sgd_momentum"):
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9 if name == "sgd_momentum" else 0.0, foreach=True)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False)
    return None


def autocast_context(precision: str, device_type: str):
    """``torch.autocast(device_type, dtype)`` for the ``amp_*`` precisions, else a null context."""
    if precision in AMP_DTYPE:
        return torch.autocast(device_type, dtype=AMP_DTYPE[precision])
    return nullcontext()


def _micro_step(model, c: dict, lb, device: str) -> None:
    """One forward (with labels) and backward; inputs and loss die when it returns."""
    lb.phase = "forward"
    lb.layer, lb.module = None, ""  # a recompute that stopped early never ran its forward hooks' exit
    ids = torch.randint(0, c["vocab"], (c["micro_batch"], c["seq_len"]), device=device)
    with autocast_context(c["precision"], device.split(":")[0]):
        loss = model(input_ids=ids, labels=ids).loss
    if c["grad_accum"] > 1:
        loss = loss / c["grad_accum"]
    lb.mark(f"backward{lb.step}.{lb.micro}")
    lb.phase = "backward"
    loss.backward()


def train_step(model, opt, c: dict, lb, device: str, on_step_start=None) -> None:
    """One optimizer step of ``grad_accum`` micro-steps; ``lb`` is told phase, micro-step and marks."""
    lb.mark(f"step{lb.step}")
    if on_step_start:
        on_step_start()
    lb.phase = "zero_grad"
    if opt is not None:
        opt.zero_grad(set_to_none=True)
    else:
        model.zero_grad(set_to_none=True)
    for micro in range(c["grad_accum"]):
        lb.micro = micro
        _micro_step(model, c, lb, device)
    lb.mark(f"optimizer{lb.step}")
    lb.phase = "optimizer"
    if opt is not None:
        opt.step()
    lb.mark(f"end{lb.step}")


def host_state_tensors(opt: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Optimizer tensors that live on the host on CUDA: AdamW/Adam's scalar ``step`` counters."""
    if opt is None:
        return []
    return [s["step"] for s in opt.state.values() if isinstance(s.get("step"), torch.Tensor)]


def state_tensors(opt: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Every tensor in the optimizer state except the host-side ``step`` counters."""
    if opt is None:
        return []
    return [v for s in opt.state.values() for k, v in s.items() if isinstance(v, torch.Tensor) and k != "step"]
