"""The training-recipe knobs of CONFIG.md as the harness runs them.

``check(c)`` refuses what no path runs; ``wrap_model(model, c)`` applies the knobs that change the model
after it is built; ``step_context(c)`` is entered around the training steps. The step itself (loss
implementation, zero_grad, optimizer implementation, optimizer in backward) is ``train.py``'s.

    knob                     where                         what runs (module)
    checkpointing=selective_op  wrap_model                 torchtitan SelectiveAC policy per block (recipe_checkpoint)
    checkpoint_every=n       wrap_model                    torchtitan layer-frequency AC (recipe_checkpoint)
    activation_offload       wrap_model (decoder hooks)    torchtune OffloadActivations (recipe_offload)
    loss_impl, loss_chunks   train._forward_loss           torchtune CEWithChunkedOutputLoss (loss_chunked),
                                                           Liger fused linear cross-entropy (loss_fused_linear)
    optimizer_impl           train (param-group flags)     torch.optim fused / foreach / for-loop (recipe_optim)
    optimizer_in_backward    train (grad hooks)            torchtune OptimizerInBackward (recipe_optim)
    zero_grad                train.train_step              set_to_none=True / False
    outputs_held             train._held_forward_loss      the last micro-step's logits kept until the next forward
    outputs_fp32             train.returned                the logits cast to fp32 as Lightning Fabric returns them
    shifted_logits           train._shifted_logits/_loss   transformers < 4.46's fp32 logits and shifted-logits loss
    softmax_saves_input      step_context                  PyTorch < 1.11: softmax nodes keep their input (recipe_softmax)
    compile                  refused                       see ``COMPILE_REFUSAL`` (recipe_compile traces the saved set)
    precision=fp8            wrap_model + step_context     torchao Float8Linear, torchtitan's recipe (recipe_fp8)
"""

from __future__ import annotations

from contextlib import ExitStack

from engine.errors import UserError

MEASURED = {
    "checkpointing": ("none", "full", "selective_op"),
    "optimizer_impl": ("foreach", "fused", "forloop"),
    "loss_impl": ("standard", "chunked", "fused_linear"),
    "zero_grad": ("none", "zeros"),
}
DEFAULTS = {"optimizer_impl": "foreach", "optimizer_in_backward": False, "loss_impl": "standard", "zero_grad": "none",
            "checkpoint_every": 1, "activation_offload": False}
IMPL_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd_momentum")  # torch.optim classes with foreach / fused / for-loop
COMPILE_REFUSAL = (
    "compile=true cannot be measured here: torch.compile runs the model as Inductor-generated kernels, whose "
    "buffers are allocated inside generated code that a fake (storage-less) tensor cannot run and the "
    "dispatcher-level tracker cannot see, and dynamo does not trace under an active TorchDispatchMode "
    "(see data/measured/RECIPES.md, 'compile'); on a GPU, device='cuda' measures it")


def check(c: dict) -> None:
    """UserError (one line) for a recipe knob, or a combination, the harness cannot run."""
    from engine.checks.measure import recipe_fp8

    recipe_fp8.check(c)
    for k, allowed in MEASURED.items():
        if c[k] not in allowed:
            raise UserError(f"{k}={c[k]!r} cannot be measured; accepted: {', '.join(allowed)}")
    if c["compile"]:
        raise UserError(COMPILE_REFUSAL)
    if c["checkpoint_every"] < 1:
        raise UserError(f"checkpoint_every must be at least 1, not {c['checkpoint_every']}")
    if c["checkpoint_every"] > 1 and c["checkpointing"] != "full":
        raise UserError("checkpoint_every > 1 needs checkpointing='full' (torchtitan's layer-frequency mode)")
    if c["loss_chunks"] < 1:
        raise UserError(f"loss_chunks must be at least 1, not {c['loss_chunks']}")
    if c["optimizer_impl"] != "foreach" and c["optimizer"] not in IMPL_OPTIMIZERS:
        raise UserError(f"optimizer_impl={c['optimizer_impl']!r} needs a torch.optim optimizer "
                        f"({', '.join(IMPL_OPTIMIZERS)}), not {c['optimizer']!r}")
    if c["optimizer_in_backward"]:
        if c["grad_accum"] > 1:
            raise UserError("optimizer_in_backward needs grad_accum=1 (torchtune refuses gradient accumulation with it)")
        if c["optimizer"] == "none":
            raise UserError("optimizer_in_backward needs an optimizer")
    from engine.checks.measure import parallel

    changed = [k for k, v in DEFAULTS.items() if c[k] != v]
    if changed and parallel.needs_world(c):
        raise UserError(f"{', '.join(changed)} are measured on one device; the simulated multi-GPU world "
                        "(parallel_run) does not run them yet")
    data_parallel_only = max(c["tp"], c["pp"], c["cp"], c["ep"]) == 1
    if c["outputs_held"] and (c["loss_impl"] != "standard" or not data_parallel_only):
        raise UserError("outputs_held is measured with loss_impl='standard' (the logits held) on one device or data "
                        "parallelism alone")
    if c["shifted_logits"] and (c["loss_impl"] != "standard" or not data_parallel_only):
        raise UserError("shifted_logits is measured with loss_impl='standard' (transformers' own loss) on one device "
                        "or data parallelism alone")
    if c["softmax_saves_input"] and (c["loss_impl"] != "standard" or parallel.needs_world(c)):
        raise UserError("softmax_saves_input is measured with loss_impl='standard' on one device (PyTorch before 1.11 "
                        "had neither the chunked nor the fused losses)")
    if c["outputs_fp32"] and c["loss_impl"] not in ("standard", "chunked"):
        raise UserError("outputs_fp32 is measured with loss_impl 'standard' or 'chunked' (a fused loss returns no "
                        "logits)")
    if c["activation_offload"] and c["checkpointing"] == "selective_op":
        raise UserError("activation_offload is measured with checkpointing 'full' (torchtune) or 'none', "
                        "not 'selective_op'")
    if c["checkpointing"] == "selective_op" and parallel.needs_world(c):
        raise UserError("checkpointing='selective_op' is measured on one device; the simulated multi-GPU world "
                        "(parallel_run) does not run it yet")


def wrap_model(model, c: dict):
    """The model with the recipe's model-level knobs applied: checkpointing policies, activation offloading."""
    from engine.checks.measure import recipe_checkpoint, recipe_fp8, recipe_offload

    if c["precision"] == "fp8":
        recipe_fp8.convert(model)
    if c["checkpointing"] == "selective_op":
        recipe_checkpoint.apply_selective_op(model)
    if c["checkpointing"] == "full" and c["checkpoint_every"] > 1:
        recipe_checkpoint.apply_every(model, c["checkpoint_every"])
    if c["activation_offload"]:
        recipe_offload.apply(model)
    return model


def step_context(c: dict):
    """A context entered around both training steps: fp8's wrapper tensors kept out of the tracker; PyTorch before
    1.11's softmax nodes."""
    from engine.checks.measure import recipe_fp8, recipe_softmax

    stack = ExitStack()
    if c["precision"] == "fp8":
        stack.enter_context(recipe_fp8.wrappers_untracked())
    if c["softmax_saves_input"]:
        stack.enter_context(recipe_softmax.kept_inputs())
    return stack
