"""One training step of a rank of a multi-GPU layout (parallel_run.py runs two): the plain PyTorch loop of
``train.py``: ``zero_grad(set_to_none=True)``; ``grad_accum`` forwards with labels and
``(loss / grad_accum).backward()``; ``optimizer.step()`` (foreach AdamW/Adam/SGD; under TP inside
``implicit_replication``, as accelerate steps a tp_plan model). What a layout changes in the loop:

* sp / cp: ``position_ids`` are passed (the model would derive them from the local, sharded sequence);
* cp: forward and backward inside ``context_parallel`` over input ids, labels and positions;
* loss_parallel: forward and backward inside ``loss_parallel()``;
* DDP with grad_accum > 1: ``no_sync()`` on every micro-step but the last;
* FSDP2 with grad_accum > 1 and ``grad_sync = last``: ``set_requires_gradient_sync(False)`` on every micro-step
  but the last, as HF accelerate's ``no_sync`` does for an FSDP2 model (accelerator.py ``no_sync``: ``if
  self.is_fsdp2: model.set_requires_gradient_sync(False)``), so each rank accumulates unsharded gradients;
* outputs_held / shifted_logits (data parallelism alone): the single-GPU loop's forward and loss
  (``train._held_forward_loss``, ``train._shifted_logits``), as fsdp_qlora's loop runs it;
* pp: the schedule's ``step`` runs the micro-batches (parallel_pipeline.py).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import torch

from engine.checks.measure import train


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
            stack.enter_context(_no_sync(model))
        with autocast():
            if c["outputs_held"]:  # data parallelism alone (recipes.check): the single-GPU loop's forward
                loss = train._held_forward_loss(model, ids, c, lb)
            elif c["shifted_logits"]:
                loss = train._forward_loss(model, ids, c)
            else:
                loss = model(input_ids=ids, labels=labels, **kwargs).loss
        if c["grad_accum"] > 1:
            loss = loss / c["grad_accum"]
        lb.mark(f"backward{lb.step}.{lb.micro}")
        lb.phase = "backward"
        loss.backward()


@contextmanager
def _no_sync(model):
    """No gradient reduction for this micro-step: DDP's ``no_sync()``; FSDP2's ``set_requires_gradient_sync``, set
    back on exit (HF accelerate's ``Accelerator.no_sync``)."""
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        with model.no_sync():
            yield


def _optimizer_step(opt, c: dict) -> None:
    if opt is None:
        return
    if c["tp"] > 1:
        from torch.distributed.tensor.experimental import implicit_replication

        with implicit_replication():  # norms stay plain tensors beside DTensor weights (accelerate does this)
            opt.step()
    else:
        opt.step()


def train_step(model, opt, c: dict, lb, cp_mesh, autocast, schedule=None, stages=()) -> None:
    from torch.nn.parallel import DistributedDataParallel

    lb.mark(f"step{lb.step}")
    lb.phase = "zero_grad"
    if opt is not None:
        opt.zero_grad(set_to_none=True)
    if schedule is not None:
        from engine.checks.measure.parallel_pipeline import run_schedule

        run_schedule(schedule, stages, c)
    else:
        accumulates = isinstance(model, DistributedDataParallel) or (
            c["grad_sync"] == "last" and hasattr(model, "set_requires_gradient_sync"))
        for micro in range(c["grad_accum"]):
            lb.micro = micro
            _micro_step(model, c, lb, cp_mesh, autocast, sync=not accumulates or micro == c["grad_accum"] - 1)
    lb.mark(f"optimizer{lb.step}")
    lb.phase = "optimizer"
    _optimizer_step(opt, c)
    lb.mark(f"end{lb.step}")
