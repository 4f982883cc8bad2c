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
