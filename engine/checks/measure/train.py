"""Two real training steps, with the tracker told which phase and micro-step is running.

A step is what a plain PyTorch loop does (torch.optim docs, "How to use an optimizer"):
``opt.zero_grad(set_to_none=True)``; ``grad_accum`` times: forward with ``labels`` (transformers
computes the shifted cross-entropy, upcasting the logits to fp32), ``(loss / grad_accum).backward()``;
then ``opt.step()``. Step 0 warms up (optimizer states are created lazily in the first
``step()``); step 1 is the one measured.

The recipe knobs change the step (``recipes.py`` lists them all): ``zero_grad='zeros'`` zeroes the
gradients in place (``set_to_none=False``) so they stay allocated through the next forward;
``loss_impl='chunked'`` / ``'fused_linear'`` run the decoder alone and apply the head and the loss as
torchtune (``loss_chunked``) or Liger (``loss_fused_linear``) do, on labels shifted as transformers shifts
them; ``optimizer_impl`` and ``optimizer_in_backward`` re-make the optimizer before its first step
(``recipe_optim``), and an optimizer stepping in backward makes ``step()`` a no-op. ``outputs_held`` keeps each micro-step's logits, and
through them its autograd graph, until the next forward returns (LitGPT's finetune loops); ``shifted_logits``
runs transformers' loss as it was before 4.46 (fp32 logits from the model, the shifted logits copied);
``outputs_fp32`` casts the logits to fp32 as Lightning Fabric returns a model's outputs (``returned``).

Optimizers: AdamW/Adam and SGD with momentum with ``foreach=True`` (the CUDA default, see
``torch.optim.optimizer._default_to_fused_or_foreach``; CPU would default to the per-tensor loop),
transformers' Adafactor with ``scale_parameter=False, relative_step=False, lr=1e-3``.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F

from engine.checks.measure import loss_chunked, loss_fused_linear, recipe_optim

AMP_DTYPE = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16, "fp8": torch.bfloat16}  # fp8: recipe_fp8
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


def shifted_labels(ids: torch.Tensor) -> torch.Tensor:
    """Next-token labels as transformers' ``ForCausalLMLoss`` makes them: pad with -100, drop the first."""
    return F.pad(ids, (0, 1), value=-100)[..., 1:].contiguous()


def returned(logits, c: dict):
    """``outputs_fp32``: the model's floating outputs as Lightning Fabric returns them, each cast to the default
    dtype, fp32 (fabric/wrappers.py ``_FabricModule.forward``: ``output = precision.convert_output(output)``;
    plugins/precision/half.py and bitsandbytes.py ``convert_output``, at 2.1.0 and 2.3.0); the 16-bit tensors die
    as the cast ones replace them. Otherwise the logits as the model made them."""
    if not c["outputs_fp32"]:
        return logits
    if isinstance(logits, list):
        return [t.float() for t in logits]
    return logits.float()


def labels_for(ids: torch.Tensor, c: dict) -> torch.Tensor:
    """What the model is given as labels: the tokens (transformers shifts them for a causal LM), or for an encoder
    one class of its two per sample."""
    if c["lm_head"]:
        return ids
    return ids[:, 0] % 2


def _forward_loss(model, ids: torch.Tensor, c: dict) -> torch.Tensor:
    """The micro-step's loss: transformers' own (``standard``), torchtune's chunked CE or Liger's fused loss;
    under ``outputs_fp32`` transformers' or the chunked loss on the logits cast as Fabric returns them."""
    base = getattr(model, "get_base_model", lambda: model)()
    if c["loss_impl"] == "standard":
        if c["shifted_logits"]:
            return _shifted_loss(_shifted_logits(model, ids), ids, c["vocab"])
        if c["outputs_fp32"]:
            logits = returned(model(input_ids=ids).logits, c)
            return base.loss_function(logits=logits, labels=ids, vocab_size=c["vocab"])
        return model(input_ids=ids, labels=labels_for(ids, c)).loss
    h = base.base_model(input_ids=ids).last_hidden_state  # after the final norm, before the head
    labels = shifted_labels(ids)
    if c["loss_impl"] == "chunked":
        return loss_chunked.loss(h, base.get_output_embeddings(), labels, c["loss_chunks"],
                                 lambda logits: returned(logits, c))
    return loss_fused_linear.loss(h, base.get_output_embeddings().weight, labels)


def _shifted_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """``shifted_logits``: the logits as transformers before 4.46 returned them, upcast in the model's forward
    (modeling_llama.py at v4.38.0, LlamaForCausalLM.forward: ``logits = self.lm_head(hidden_states)``,
    ``logits = logits.float()``); the 16-bit logits die at the upcast."""
    return model(input_ids=ids).logits.float()


def _shifted_loss(logits: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """That forward's loss (its ``labels is not None`` branch): the shifted logits copied, then CrossEntropyLoss
    over the flattened copy."""
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = ids[..., 1:].contiguous()
    return F.cross_entropy(shift_logits.view(-1, vocab), shift_labels.view(-1))


def _held_forward_loss(model, ids: torch.Tensor, c: dict, lb) -> torch.Tensor:
    """``outputs_held``: the logits first (``model(input_ids)``), then the previous micro-step's held logits let go,
    then transformers' own loss on them (what ``labels=`` runs: ``loss_function``), the order of LitGPT's loop
    (``logits = model(input_ids, ...)`` rebinds the name, and with it the last step's graph, before the loss);
    this micro-step's logits are held until the next forward returns."""
    logits = _shifted_logits(model, ids) if c["shifted_logits"] else returned(model(input_ids=ids).logits, c)
    lb.held = logits
    if c["shifted_logits"]:
        return _shifted_loss(logits, ids, c["vocab"])
    base = getattr(model, "get_base_model", lambda: model)()
    return base.loss_function(logits=logits, labels=ids, vocab_size=c["vocab"])


def _micro_step(model, c: dict, lb, device: str) -> None:
    """One forward (with labels) and backward; inputs and loss die when it returns (unless ``outputs_held``)."""
    lb.phase = "forward"
    lb.layer, lb.module = None, ""  # a recompute that stopped early never ran its forward hooks' exit
    ids = torch.randint(0, c["vocab"], (c["micro_batch"], c["seq_len"]), device=device)
    with autocast_context(c["precision"], device.split(":")[0]):
        loss = _held_forward_loss(model, ids, c, lb) if c["outputs_held"] else _forward_loss(model, ids, c)
    if c["grad_accum"] > 1:
        loss = loss / c["grad_accum"]
    lb.mark(f"backward{lb.step}.{lb.micro}")
    lb.phase = "backward"
    loss.backward()


def _zero_grad(model, opt, c: dict) -> None:
    """Gradients freed (``zero_grad = none``: set_to_none=True) or zeroed in place (``zeros``)."""
    set_to_none = c["zero_grad"] == "none"
    if opt is not None:
        opt.zero_grad(set_to_none=set_to_none)
    else:
        model.zero_grad(set_to_none=set_to_none)


def train_step(model, opt, c: dict, lb, device: str, on_step_start=None) -> None:
    """One optimizer step of ``grad_accum`` micro-steps; ``lb`` is told phase, micro-step and marks."""
    recipe_optim.configure(opt, c)  # before the first step: optimizer_impl, optimizer_in_backward
    lb.mark(f"step{lb.step}")
    if on_step_start:
        on_step_start()
    lb.phase = "zero_grad"
    _zero_grad(model, opt, c)
    for micro in range(c["grad_accum"]):
        lb.micro = micro
        _micro_step(model, c, lb, device)
    lb.mark(f"optimizer{lb.step}")
    lb.phase = "optimizer"
    if opt is not None and not recipe_optim.in_backward(opt):
        opt.step()
    if c["eval_micro_batch"] > 0:
        evaluate(model, opt, c, lb, device)
    lb.mark(f"end{lb.step}")


def evaluate(model, opt, c: dict, lb, device: str) -> None:
    """An evaluation forward after the optimizer step, as the HF Trainer runs one (Trainer._inner_training_loop:
    ``model.zero_grad()`` after ``optimizer.step()``, then ``_maybe_log_save_evaluate`` -> ``evaluation_loop`` ->
    ``prediction_step``: ``model.eval()``, ``torch.no_grad()``, the loss context (autocast under amp), a forward
    with labels over ``eval_micro_batch`` samples). The gradients' records are noted first (``roles`` reads them)."""
    lb.mark(f"eval{lb.step}")
    lb.grad_records = {id(r) for r in (lb.record_of(p.grad) for p in model.parameters() if p.grad is not None) if r}
    lb.phase = "eval"
    _zero_grad(model, opt, c)
    model.eval()
    ids = torch.randint(0, c["vocab"], (c["eval_micro_batch"], c["seq_len"]), device=device)
    with torch.no_grad(), autocast_context(c["precision"], device.split(":")[0]):
        _forward_loss(model, ids, c)
    model.train()


def host_state_tensors(opt: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Optimizer tensors that live on the host on CUDA: AdamW/Adam's scalar ``step`` counters (on the
    device instead for fused or capturable AdamW/Adam, see ``recipe_optim``)."""
    if opt is None or recipe_optim.device_steps(opt):
        return []
    return [s["step"] for s in opt.state.values() if isinstance(s.get("step"), torch.Tensor)]


def state_tensors(opt: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Every tensor in the optimizer state except the host-side ``step`` counters."""
    if opt is None:
        return []
    host = {id(t) for t in host_state_tensors(opt)}
    return [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor) and id(v) not in host]
