"""Two training steps of one rank of a multi-GPU layout (or of an MoE model), measured like one GPU.

``run_rank(c)`` builds the model on the meta device, gives the parts this rank holds fake storage inside
``TrackedFakeMode`` (distributed.py), applies the layout with the framework's own code (parallel.py,
parallel_pipeline.py), and runs two steps of the plain PyTorch loop of ``train.py``: ``zero_grad(set_to_none
=True)``; ``grad_accum`` forwards with labels and ``(loss / grad_accum).backward()``; ``optimizer.step()``
(foreach AdamW/Adam/SGD; under TP inside ``implicit_replication``, as accelerate steps a tp_plan model). What
a layout changes in the loop:

* sp / cp: ``position_ids`` are passed (the model would derive them from the local, sharded sequence);
* cp: forward and backward inside ``context_parallel`` over input ids, labels and positions;
* loss_parallel: forward and backward inside ``loss_parallel()``;
* DDP with grad_accum > 1: ``no_sync()`` on every micro-step but the last;
* pp: the schedule's ``step`` runs the micro-batches (parallel_pipeline.py).

Step 1 is measured; ``summarize`` gives the ``measured_*`` columns of the single-GPU harness (roles at the
peak that add up to it) plus the rank's anatomy: what the frameworks allocated, by tag, alive at the peak.
"""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import torch

from engine.checks.measure import breakdown, recipes
from engine.checks.measure.build import build_model, transformer_blocks
from engine.checks.measure.cuda_semantics import cuda_semantics, unpacked_sequences
from engine.checks.measure.distributed import (
    BUFFER_KINDS,
    RankLiveBytes,
    TrackedFakeMode,
    fake_world,
    host_meshes,
    kind,
    local,
    offload_copies,
    shadow_shapes,
    storage_resizes,
    tagging,
)
from engine.checks.measure.labels import ModuleLabels
from engine.checks.measure.moe import moe_semantics
from engine.checks.measure.parallel import (
    apply_ddp,
    apply_fsdp,
    apply_tp,
    hf_distribute,
    uses_autocast,
    with_harness,
    world_size,
)
from engine.checks.measure.train import AMP_DTYPE, HALF_DTYPE, host_state_tensors, make_optimizer, state_tensors

MEASURED_STEP = 1
# Anatomy columns: bytes alive at the peak, by the tag of what allocated them (distributed.tagging).
ANATOMY = {
    "measured_fsdp_unsharded_bytes": ("fsdp_unsharded",),
    "measured_fsdp_gather_bytes": ("fsdp_all_gather",),
    "measured_fsdp_reduce_bytes": ("fsdp_reduce_scatter",),
    "measured_ddp_bucket_bytes": ("ddp_bucket",),
    "measured_collective_bytes": ("collective",),
    "measured_pp_buffer_bytes": ("pp_recv",),
}
EXTRA_COLUMNS = [*ANATOMY, "measured_fsdp_unsharded_groups", "measured_logit_bytes", "measured_expert_bytes",
                 "measured_rank_params", "measured_host_bytes", "measured_anatomy"]


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
        apply_fsdp(model, c, mesh, blocks)
        return model, None
    if c["dp"] > 1:
        old, lb.tag = lb.tag, "ddp_bucket"
        try:
            return apply_ddp(model, c), None
        finally:
            lb.tag = old
    return model, None  # one GPU (an MoE model)


def _micro_step(model, c: dict, lb, cp_mesh, autocast, sync: bool) -> None:
    """One forward with labels and its backward, inside the layout's contexts (see module docstring)."""
    from torch.distributed.tensor.parallel import loss_parallel

    lb.phase = "forward"
    lb.layer, lb.module = None, ""
    b, s = c["micro_batch"], c["seq_len"]
    ids = torch.randint(0, c["vocab"], (b, s))
    labels = ids.clone() if cp_mesh is not None else ids
    kwargs = {}
    if c["sp"] or cp_mesh is not None:
        kwargs["position_ids"] = torch.arange(s).unsqueeze(0).expand(b, s).contiguous()
    with ExitStack() as stack:
        if cp_mesh is not None:
            from torch.distributed.tensor.experimental import context_parallel

            bufs = [ids, labels, kwargs["position_ids"]]
            stack.enter_context(context_parallel(cp_mesh, buffers=bufs, buffer_seq_dims=[1, 1, 1],
                                                 no_restore_buffers=set(bufs)))
        if c["loss_parallel"]:
            stack.enter_context(loss_parallel())
        if not sync:
            stack.enter_context(model.no_sync())
        with autocast():
            loss = model(input_ids=ids, labels=labels, **kwargs).loss
        if c["grad_accum"] > 1:
            loss = loss / c["grad_accum"]
        lb.mark(f"backward{lb.step}.{lb.micro}")
        lb.phase = "backward"
        loss.backward()


def _optimizer_step(opt, c: dict) -> None:
    if opt is None:
        return
    if c["tp"] > 1:
        from torch.distributed.tensor.experimental import implicit_replication

        with implicit_replication():  # norms stay plain tensors beside DTensor weights (accelerate does this)
            opt.step()
    else:
        opt.step()


def _train_step(model, opt, c: dict, lb, cp_mesh, autocast, schedule=None, stages=()) -> None:
    from torch.nn.parallel import DistributedDataParallel

    lb.mark(f"step{lb.step}")
    lb.phase = "zero_grad"
    if opt is not None:
        opt.zero_grad(set_to_none=True)
    if schedule is not None:
        from engine.checks.measure.parallel_pipeline import run_schedule

        run_schedule(schedule, stages, c)
    else:
        ddp = isinstance(model, DistributedDataParallel)
        for micro in range(c["grad_accum"]):
            lb.micro = micro
            _micro_step(model, c, lb, cp_mesh, autocast, sync=not ddp or micro == c["grad_accum"] - 1)
    lb.mark(f"optimizer{lb.step}")
    lb.phase = "optimizer"
    _optimizer_step(opt, c)
    lb.mark(f"end{lb.step}")


def run_rank(c: dict) -> Run:
    """Two logged training steps of rank ``c['rank']`` of the layout ``c`` (a resolved case)."""
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
        if c["offload"] != "none":
            stack.enter_context(offload_copies(lb))
        with torch.device("meta"):
            model = build_model(c, dtype)
        n_params = sum(p.numel() for p in model.parameters())
        stack.enter_context(mode)
        stack.enter_context(cuda_semantics(c["attention"]))
        stack.enter_context(unpacked_sequences())
        stack.enter_context(recipes.step_context(c))
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
            model.tie_weights()
            model = recipes.wrap_model(model, c)
            call, cp_mesh = _distribute(model, c, lb)
            params = list(call.parameters())
            blocks, labelled = transformer_blocks(model), model
        opt = make_optimizer(c["optimizer"], [p for p in params if p.requires_grad])
        stack.enter_context(ModuleLabels(labelled, blocks, lb))
        _train_step(call, opt, c, lb, cp_mesh, autocast, schedule, stages)
        counters = set()
        for t in host_state_tensors(opt):
            rec = lb.record_of(local(t))
            if rec is not None:
                rec.host = True
                counters.add(id(rec))
        lb.step = MEASURED_STEP
        _train_step(call, opt, c, lb, cp_mesh, autocast, schedule, stages)
        roles = _roles(lb, params, labelled, opt) | {"step_counters": counters}
        rank_params = sum(local(p).numel() for p in params)
        if c["offload"] != "none":
            _on_host(lb, roles, params)
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
    """Record ids per role, as ``measure._roles`` but on the local tensors this rank holds; the tagged
    framework buffers are never autocast weight casts."""
    ids = lambda ts: {id(r) for r in map(lb.record_of, ts) if r is not None}
    weights = ids([local(p) for p in params] + list(module.buffers()))
    grads = ids([local(p.grad) for p in params if p.grad is not None])
    casts = {id(r) for r in lb.records
             if r.op == "_to_copy" and r.phase != "optimizer" and r.src is not None and id(r.src) in weights
             and id(r) not in lb.tags}
    return {"weights": weights, "grads": grads, "optimizer": ids([local(t) for t in state_tensors(opt)]),
            "weight_casts": casts}


def role(r, run: Run) -> str:
    """``breakdown.role``, except that the frameworks' buffers (``distributed.BUFFER_KINDS``) are temp even when
    they live from a forward into its backward (FSDP2's parameters gathered with reshard_after_forward=False,
    the pipeline's receive buffers): they are not activations a model keeps for backward."""
    out = breakdown.role(r, run.lb, run.roles, MEASURED_STEP)
    if out == "activations" and kind(run.lb.tags.get(id(r))) in BUFFER_KINDS:
        return "temp"
    return out


def classify(records, run: Run) -> dict[str, int]:
    """Bytes per role over ``records`` (``role``)."""
    out = dict.fromkeys(("weights", "grads", "optimizer", "activations", "weight_casts", "temp"), 0)
    for r in records:
        out[role(r, run)] += r.nbytes
    return out


def _vocab_sized(r, vocab: int, tp: int) -> bool:
    """A logits-like tensor: its last dim is the vocabulary or one TP shard of it (weights are (V, h))."""
    return bool(r.shape) and r.shape[-1] in (vocab, -(-vocab // tp)) and len(r.shape) >= 2


def summarize(run: Run, c: dict) -> dict:
    """The ``measured_*`` columns of ``measure.summarize`` for the measured step, plus the rank's anatomy."""
    lb, roles, s = run.lb, run.roles, MEASURED_STEP
    start, end = lb.marks[f"step{s}"], lb.marks[f"end{s}"]
    peak, tick = breakdown.peak(lb, start, end)
    at_peak = breakdown.alive_at(lb, tick)
    parts = classify(at_peak, run)
    born = next(r for r in lb.records if r.born == tick) if tick != start else None
    saved = [r for r in breakdown.saved_for_backward(lb, roles, s) if role(r, run) == "activations"]
    out = {
        "measured_allocated_peak_bytes": peak,
        "measured_allocated_rounded_bytes": breakdown.peak(lb, start, end, rounded=True)[0],
        "measured_weight_bytes": parts["weights"],
        "measured_grad_bytes": parts["grads"],
        "measured_optimizer_bytes": parts["optimizer"],
        "measured_activation_bytes": parts["activations"],
        "measured_temp_bytes": parts["temp"] + parts["weight_casts"],
        "measured_weight_cast_bytes": parts["weight_casts"],
        "measured_saved_activation_bytes": sum(r.nbytes for r in saved),
        "measured_peak_phase": breakdown.PHASE_OF[born.phase] if born else "optimizer",
        "measured_peak_op": born.op if born else "",
        "measured_n_params": run.n_params,
        "measured_trainable_params": run.n_params,
        "measured_reserved_peak_bytes": None,
    }
    return out | anatomy(run, c, at_peak, tick)


def anatomy(run: Run, c: dict, at_peak, tick: int) -> dict:
    """Bytes alive at the peak by what allocated them (tags), logits-shaped tensors, expert activations."""
    lb = run.lb
    out = {k: sum(r.nbytes for r in at_peak if kind(lb.tags.get(id(r))) in kinds) for k, kinds in ANATOMY.items()}
    out["measured_fsdp_unsharded_groups"] = len({lb.tags[id(r)] for r in at_peak
                                                 if kind(lb.tags.get(id(r))) == "fsdp_unsharded" and r.nbytes})
    out["measured_logit_bytes"] = sum(r.nbytes for r in at_peak if _vocab_sized(r, c["vocab"], c["tp"]))
    out["measured_expert_bytes"] = sum(r.nbytes for r in at_peak  # the experts' token buffers and activations
                                       if r.phase == "forward" and "experts" in r.module
                                       and role(r, run) in ("activations", "temp"))
    out["measured_rank_params"] = run.rank_params
    out["measured_host_bytes"] = sum(r.nbytes for r in lb.records  # offloaded states (host memory) at the peak
                                     if r.host and r.born <= tick and (r.died is None or r.died > tick)
                                     and id(r) not in run.roles["step_counters"])
    out["measured_anatomy"] = describe(run, at_peak)
    return out


def describe(run: Run, at_peak, top: int = 6) -> str:
    """The largest groups alive at the peak, ``role:tag-or-op:dtype=bytes`` joined by ``;`` (a readable digest)."""
    lb, groups = run.lb, {}
    for r in at_peak:
        key = (role(r, run), kind(lb.tags.get(id(r))) or r.op, r.dtype)
        groups[key] = groups.get(key, 0) + r.nbytes
    items = sorted(groups.items(), key=lambda kv: -kv[1])[:top]
    return ";".join(f"{role}:{what}:{dtype or '-'}={n}" for (role, what, dtype), n in items)
