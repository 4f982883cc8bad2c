"""Two training steps of one rank of a multi-GPU layout (or of an MoE model), measured like one GPU.

``run_rank(c)`` builds the model on the meta device, gives the parts this rank holds fake storage inside
``TrackedFakeMode`` (distributed.py), applies the layout with the framework's own code (parallel_apply.py,
parallel_pipeline.py), and runs two steps of the plain PyTorch loop of ``train.py`` (parallel_step.py, with what
a layout changes in the loop). Step 1 is measured (``MEASURED_STEP``); parallel_summary.py gives its columns.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import torch

from engine.checks.measure import quantized, recipes
from engine.checks.measure.buffer_tags import tagging
from engine.checks.measure.build import build_model, transformer_blocks
from engine.checks.measure.cuda_semantics import cuda_semantics, unpacked_sequences
from engine.checks.measure.distributed import RankLiveBytes, TrackedFakeMode, fake_world, local
from engine.checks.measure.fake_tensor_patches import host_meshes, offload_copies, shadow_shapes, storage_resizes
from engine.checks.measure.fsdp1_init import offloaded_shards, rank0_host_init, resharded_by_storage
from engine.checks.measure.labels import ModuleLabels
from engine.checks.measure.moe import moe_semantics
from engine.checks.measure.parallel import with_harness, world_size
from engine.checks.measure.parallel_apply import (
    apply_ddp,
    apply_fsdp,
    apply_fsdp1,
    apply_tp,
    hf_distribute,
    uses_autocast,
)
from engine.checks.measure.parallel_step import train_step
from engine.checks.measure.single_gpu import MEASURED_STEP
from engine.checks.measure.train import AMP_DTYPE, HALF_DTYPE, host_state_tensors, make_optimizer, state_tensors


class Run:
    """What ``run_rank`` leaves for ``summarize``: the log, the roles, and the model's parameter counts."""

    def __init__(self, lb, roles, n_params, rank_params) -> None:
        self.lb, self.roles = lb, roles
        self.n_params, self.rank_params = n_params, rank_params


def _autocast(c: dict):
    if uses_autocast(c):
        return lambda: torch.autocast("cpu", dtype=AMP_DTYPE[c["precision"]])
    return nullcontext


def _materialize(module: torch.nn.Module) -> None:
    """Fake storage for every meta parameter and buffer of ``module`` (inside the tracked fake mode)."""
    module._apply(lambda t: torch.empty(t.shape, dtype=t.dtype) if t.is_meta else t)


def _meshes(c: dict):
    from torch.distributed.device_mesh import init_device_mesh

    if c["tp"] > 1 and c["dp"] > 1:
        return init_device_mesh("cpu", (c["dp"], c["tp"]), mesh_dim_names=("dp", "tp"))
    if c["cp"] > 1:
        return init_device_mesh("cpu", (c["dp"], c["cp"]), mesh_dim_names=("dp", "cp"))
    return init_device_mesh("cpu", (world_size(c),), mesh_dim_names=("world",))


def _distribute(model, c: dict, lb):
    """Apply the layout to a materialized model; returns (the module to call, the mesh for the step or None)."""
    h = with_harness(c)
    blocks = transformer_blocks(model)
    if c["ep"] > 1 or (c["tp"] > 1 and h["tp_plan"] == "hf"):
        return hf_distribute(model, c), None
    mesh = _meshes(c)
    if c["tp"] > 1:
        apply_tp(model, c, mesh["tp"] if c["dp"] > 1 else mesh, blocks)
        if c["dp"] > 1:
            apply_fsdp(model, c, mesh["dp"], blocks)
        return model, None
    if c["cp"] > 1:
        fsdp_mesh = mesh._flatten("dp_cp") if c["dp"] > 1 else mesh["cp"]
        apply_fsdp(model, c, fsdp_mesh, blocks)
        return model, mesh["cp"]
    if c["framework"] == "fsdp" or c["zero_stage"] > 0:
        if h["fsdp_wrap"] == "fsdp1":
            lb.mark("init")  # the replay starts here: FSDP1 brings rank 0's host copy to the GPU (fsdp1_init.py)
            with rank0_host_init(lb, model):
                return apply_fsdp1(model, c, blocks), None
        apply_fsdp(model, c, mesh, blocks)
        return model, None
    if c["dp"] > 1:
        old, lb.tag = lb.tag, "ddp_bucket"
        try:
            return apply_ddp(model, c), None
        finally:
            lb.tag = old
    return model, None  # one GPU (an MoE model)


def run_rank(c: dict, after=None) -> Run:
    """Two logged training steps of rank ``c['rank']`` of the layout ``c`` (a resolved case); ``after(model, opt, lb)``,
    when given, runs in the same simulated world once they are done (save_probe.py saves a checkpoint there)."""
    from engine.checks.measure import parallel_pipeline as pp

    c = with_harness(c)
    lb = RankLiveBytes()
    mode = TrackedFakeMode(lb)
    autocast = _autocast(c)
    dtype = HALF_DTYPE.get(c["precision"], torch.float32)
    with ExitStack() as stack:
        stack.enter_context(fake_world(world_size(c), c["rank"]))
        for ctx in (host_meshes(), shadow_shapes(), storage_resizes(lb), tagging(lb), moe_semantics(c)):
            stack.enter_context(ctx)
        fsdp1 = c["fsdp_wrap"] == "fsdp1"
        if fsdp1:
            stack.enter_context(resharded_by_storage())
        if c["offload"] != "none":
            stack.enter_context(offloaded_shards(lb) if fsdp1 else offload_copies(lb))
        with torch.device("meta"):
            model = build_model(c, dtype)
        n_params = sum(p.numel() for p in model.parameters())
        stack.enter_context(mode)
        stack.enter_context(cuda_semantics(c["attention"]))
        stack.enter_context(unpacked_sequences())
        stack.enter_context(recipes.step_context(c))
        stack.enter_context(quantized.lora_semantics(c))
        schedule, stages, cp_mesh = None, [], None
        if c["pp"] > 1:
            stack.enter_context(pp.static_vote())
            modules, stages = pp.build_stages(model, c, c["rank"], _materialize, autocast)
            params = [p for m in modules for p in m.parameters()]
            schedule = pp.make_schedule(stages, c, pp.loss_function(model, c, autocast))
            blocks = [blk for m in modules for blk in m.layers]
            labelled, call = torch.nn.ModuleList(modules), None
            stack.enter_context(pp.chunk_phases(stages, lb))
        else:
            _materialize(model)
            if c["base_quant"] != "none":
                quantized.quantize(model, quantized.from_fp16(c))
            model.tie_weights()
            model = recipes.wrap_model(model, c)
            call, cp_mesh = _distribute(model, c, lb)
            params = list(call.parameters())
            blocks, labelled = transformer_blocks(model), model
        opt = make_optimizer(c["optimizer"], [p for p in params if p.requires_grad])
        stack.enter_context(ModuleLabels(labelled, blocks, lb))
        train_step(call, opt, c, lb, cp_mesh, autocast, schedule, stages)
        counters = set()
        for t in host_state_tensors(opt):
            rec = lb.record_of(local(t))
            if rec is not None:
                rec.host = True
                counters.add(id(rec))
        lb.step = MEASURED_STEP
        train_step(call, opt, c, lb, cp_mesh, autocast, schedule, stages)
        roles = _roles(lb, params, labelled, opt) | {"step_counters": counters}
        rank_params = sum(local(p).numel() for p in params)
        if c["offload"] != "none":
            _on_host(lb, roles, params)
        if after is not None:
            after(call, opt, lb)
    return Run(lb, roles, n_params, rank_params)


def _on_host(lb, roles: dict[str, set[int]], params) -> None:
    """With FSDP2's CPUOffloadPolicy the sharded parameters, their gradients and the optimizer states live on the
    host, and the optimizer step runs there: none of it is device memory."""
    host = {id(r) for r in map(lb.record_of, (local(p) for p in params)) if r is not None}
    host |= roles["grads"] | roles["optimizer"]
    for r in lb.records:
        if id(r) in host or r.phase == "optimizer":
            r.host = True


def _roles(lb, params, module, opt) -> dict[str, set[int]]:
    """Record ids per role, as ``single_gpu.roles`` but on the local tensors this rank holds; the tagged
    framework buffers are never autocast weight casts."""
    ids = lambda ts: {id(r) for r in map(lb.record_of, ts) if r is not None}
    weights = ids([local(p) for p in params] + list(module.buffers()))
    grads = ids([local(p.grad) for p in params if p.grad is not None])
    casts = {id(r) for r in lb.records
             if r.op == "_to_copy" and r.phase != "optimizer" and r.src is not None and id(r.src) in weights
             and id(r) not in lb.tags}
    return {"weights": weights, "grads": grads, "optimizer": ids([local(t) for t in state_tensors(opt)]),
            "weight_casts": casts}
