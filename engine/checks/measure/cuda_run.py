"""The same two training steps on a real GPU: peaks from the CUDA caching allocator itself.

``torch.cuda.reset_peak_memory_stats()`` runs before the measured step, so
``max_memory_allocated()`` / ``max_memory_reserved()`` cover exactly that step (torch.cuda memory
docs). The tracker runs alongside on the real tensors, for the role breakdown; its own peak is
reported as ``measured_tracked_peak_bytes`` (it misses kernel-internal workspaces, which the
allocator counts).
"""

from __future__ import annotations

import torch

from engine.errors import UserError


def measure_on_cuda(c: dict) -> dict:
    """The ``measured_*`` columns for resolved case ``c``, run for real on ``cuda:0``."""
    from engine.checks.measure.build import transformer_blocks
    from engine.checks.measure.cuda_semantics import cpu_semantics
    from engine.checks.measure.labels import ModuleLabels
    from engine.checks.measure.single_gpu import MEASURED_STEP, prepare, roles, summarize
    from engine.checks.measure.tracker import LiveBytes
    from engine.checks.measure.train import host_state_tensors, train_step

    if not torch.cuda.is_available():
        raise UserError("device='cuda' needs a CUDA GPU; none is visible (use device='fake')")
    torch.cuda.empty_cache()
    # the `allocator` input, as PYTORCH_CUDA_ALLOC_CONF would set it (settable at run time for expandable segments)
    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{c['allocator'] == 'expandable'}")
    model, opt = prepare(c, "cuda")
    lb = LiveBytes()
    for t in (*model.parameters(), *model.buffers()):
        lb.track(t, "weights")
    with ModuleLabels(model, transformer_blocks(model), lb), cpu_semantics(c["attention"], "cuda"), lb:
        train_step(model, opt, c, lb, "cuda")
        for t in host_state_tensors(opt):
            rec = lb.record_of(t)
            if rec is not None:
                rec.host = True
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        lb.step = MEASURED_STEP
        train_step(model, opt, c, lb, "cuda")
        torch.cuda.synchronize()
    out = summarize(lb, roles(lb, model, opt), model, c["allocator"])
    out["measured_tracked_peak_bytes"] = out["measured_allocated_peak_bytes"]
    out["measured_allocated_peak_bytes"] = torch.cuda.max_memory_allocated()
    out["measured_reserved_peak_bytes"] = torch.cuda.max_memory_reserved()
    del model, opt, lb
    torch.cuda.empty_cache()
    return out


def compiled_blocks(model: torch.nn.Module, checkpointing: str) -> None:
    """Each transformer block of ``model`` wrapped and compiled as torchtitan does it (apply_ac, then apply_compile:
    ``checkpoint_wrapper`` with the op policy under ``selective_op``, plain under ``full``, then
    ``torch.compile(block, fullgraph=True)``), in place in the module list that holds it."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from engine.checks.measure.build import transformer_blocks
    from engine.checks.measure.recipe_compile import checkpointed_as_torchtitan

    blocks = set(map(id, transformer_blocks(model)))
    for holder in model.modules():
        if not isinstance(holder, torch.nn.ModuleList):
            continue
        for i, block in enumerate(holder):
            if id(block) not in blocks:
                continue
            if checkpointing == "selective_op":
                block = checkpointed_as_torchtitan(block)
            elif checkpointing == "full":
                block = checkpoint_wrapper(block, preserve_rng_state=False)
            holder[i] = torch.compile(block, fullgraph=True)


def measure_compiled_on_cuda(c: dict) -> dict:
    """``compile = true``, which runs only on a GPU: the allocator's peaks of the second of two steps whose blocks
    are compiled as torchtitan compiles them (``compiled_blocks``; the loss eager, so ``compile_loss = false``).
    The tracker cannot run beside it (dynamo does not trace under a TorchDispatchMode), so these two columns are
    all it measures."""
    from engine.checks.measure.cuda_semantics import cpu_semantics
    from engine.checks.measure.recipe_compile import hub_kernel_hooks_removed
    from engine.checks.measure.single_gpu import prepare
    from engine.checks.measure.tracker import LiveBytes
    from engine.checks.measure.train import train_step

    if not torch.cuda.is_available():
        raise UserError("device='cuda' needs a CUDA GPU; none is visible (use device='fake')")
    if c["compile_loss"]:
        raise UserError("compile=true is measured with the blocks compiled and the loss eager: give compile_loss=false")
    if c["checkpointing"] not in ("none", "selective_op", "full") or c["lora_rank"] or c["base_quant"] != "none":
        raise UserError("compile=true is measured on full training with checkpointing none, selective_op or full")
    if c["checkpoint_every"] != 1 or c["activation_offload"] or c["precision"] == "fp8":
        raise UserError("compile=true is measured with every block checkpointed alike, no activation offload, no fp8")
    torch.cuda.empty_cache()
    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{c['allocator'] == 'expandable'}")
    torch._dynamo.reset()  # another case's graphs would make dynamo mark these shapes dynamic and recompile
    model, opt = prepare({**c, "checkpointing": "none"}, "cuda")  # the blocks are checkpointed as torchtitan does
    compiled_blocks(model, c["checkpointing"])
    marks = LiveBytes()  # phases and marks only: never entered, so no dispatch mode is active
    with hub_kernel_hooks_removed(model), cpu_semantics(c["attention"], "cuda"):
        train_step(model, opt, c, marks, "cuda")  # the first step compiles and makes the optimizer's states
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        marks.step = 1
        train_step(model, opt, c, marks, "cuda")
        torch.cuda.synchronize()
    out = {"measured_allocated_peak_bytes": torch.cuda.max_memory_allocated(),
           "measured_reserved_peak_bytes": torch.cuda.max_memory_reserved()}
    del model, opt
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return out
