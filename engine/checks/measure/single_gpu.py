"""One GPU's two logged training steps: build the model and optimizer, run them under the tracker, summarize.

Shared by the fake-tensor run (``run_logged``) and the real one on a GPU (cuda_run.py).
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from engine.checks.measure import breakdown, quantized, recipes
from engine.checks.measure.build import build_model, transformer_blocks
from engine.checks.measure.cuda_semantics import (
    cpu_semantics,
    cuda_semantics,
    unpacked_sequences,
)
from engine.checks.measure.labels import ModuleLabels
from engine.checks.measure.tracker import LiveBytes
from engine.checks.measure.train import (
    HALF_DTYPE,
    host_state_tensors,
    make_optimizer,
    state_tensors,
    train_step,
)
from engine.errors import UserError

MEASURED_STEP = 1  # step 0 creates the optimizer states; step 1 is measured


def prepare(c: dict, device: str = "cpu", fake_mode=None):
    """(model, optimizer) for resolved case ``c``: precision applied, optimizer over trainable params.

    With ``fake_mode`` the model is built on the meta device and given fake CPU storage inside that
    mode (``module.to()`` cannot swap fake parameters, which peft needs), then re-tied.
    """
    dtype = HALF_DTYPE.get(c["precision"], torch.float32)
    if fake_mode is None:
        model = build_model(c, dtype).to(device)
    else:
        with torch.device("meta"):
            model = build_model(c, dtype)
        with fake_mode:
            model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
            if c["base_quant"] != "none":
                quantized.quantize(model, quantized.from_fp16(c))
        getattr(model, "get_base_model", lambda: model)().tie_weights()
    model = recipes.wrap_model(model, c)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, make_optimizer(c["optimizer"], params)


def run_logged(c: dict, device: str = "fake") -> tuple[LiveBytes, dict[str, set[int]], torch.nn.Module]:
    """Two logged training steps of ``c``; returns the log, the role sets and the model.

    ``device``: ``'fake'`` (FakeTensorMode, CUDA semantics emulated), ``'cpu-fake'`` (FakeTensorMode,
    CPU semantics) or ``'cpu'`` (real CPU tensors: tiny models only).
    """
    if device != "fake" and c["attention"] == "flash" and c["dropout"] > 0:
        raise UserError(f"CPU's flash kernel has no dropout: measure attention='flash' with dropout "
                        f"{c['dropout']} on device='fake' (CUDA semantics)")
    if device != "fake" and c["base_quant"] != "none":
        raise UserError("a quantized base (bitsandbytes) is measured on device='fake' only")
    with ExitStack() as stack:
        fake_mode = None
        if device in ("fake", "cpu-fake"):
            from torch._subclasses.fake_tensor import FakeTensorMode

            fake_mode = FakeTensorMode()
        model, opt = prepare(c, "cpu", fake_mode)
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        stack.enter_context(cuda_semantics(c["attention"]) if device == "fake" else cpu_semantics(c["attention"]))
        stack.enter_context(unpacked_sequences())
        stack.enter_context(recipes.step_context(c))
        lb = LiveBytes()
        for t in (*model.parameters(), *model.buffers()):
            lb.track(t, "weights")
        stack.enter_context(ModuleLabels(model, transformer_blocks(model), lb))
        with lb, quantized.lora_semantics(c):
            train_step(model, opt, c, lb, "cpu")
            for t in host_state_tensors(opt):
                lb.record_of(t).host = True
            lb.step = MEASURED_STEP
            train_step(model, opt, c, lb, "cpu")
        ids = roles(lb, model, opt)
    return lb, ids, model


def roles(lb: LiveBytes, model: torch.nn.Module, opt) -> dict[str, set[int]]:
    """Record ids per role: weights, grads (``.grad`` now), optimizer state, autocast weight casts."""
    ids = lambda ts: {id(r) for r in map(lb.record_of, ts) if r is not None}
    weights = ids([*model.parameters(), *model.buffers()])
    grads = getattr(lb, "grad_records", None) or ids([p.grad for p in model.parameters() if p.grad is not None])
    casts = {id(r) for r in lb.records  # autocast's casts (forward, or a checkpoint recompute in backward)
             if r.op == "_to_copy" and r.phase != "optimizer" and r.src is not None and id(r.src) in weights}
    return {"weights": weights, "grads": grads, "optimizer": ids(state_tensors(opt)), "weight_casts": casts}


def summarize(lb: LiveBytes, roles: dict[str, set[int]], model: torch.nn.Module, allocator: str = "caching") -> dict:
    """The ``measured_*`` columns for the measured step of a logged run (its reserved peak replayed under
    ``allocator``, the input's value)."""
    s = MEASURED_STEP
    start, end = lb.marks[f"step{s}"], lb.marks[f"end{s}"]
    tick = breakdown.peak(lb, start, end)[1]
    parts = breakdown.classify(breakdown.alive_at(lb, tick), lb, roles, s)
    params = list(model.parameters())
    return breakdown.measured_columns(lb, start, end, parts, breakdown.saved_for_backward(lb, roles, s),
                                      sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad),
                                      allocator=allocator)
