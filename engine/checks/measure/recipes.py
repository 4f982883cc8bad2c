"""The training-recipe knobs of CONFIG.md as the harness runs them.

``check(c)`` refuses what no path runs yet; ``wrap_model(model, c)`` applies the knobs that change the
model (checkpointing policies, compile) after it is built; ``step_context(c)`` is entered around the
training steps (saved-tensor hooks such as activation offloading).
"""

from __future__ import annotations

from contextlib import nullcontext

from engine.errors import UserError

MEASURED = {
    "checkpointing": ("none", "full"),
    "optimizer_impl": ("foreach",),
    "loss_impl": ("standard",),
    "zero_grad": ("none",),
}


def check(c: dict) -> None:
    """UserError for a recipe knob the harness cannot run."""
    for k, allowed in MEASURED.items():
        if c[k] not in allowed:
            raise UserError(f"{k}={c[k]!r} cannot be measured yet; accepted: {', '.join(allowed)}")
    for k in ("optimizer_in_backward", "activation_offload", "compile"):
        if c[k]:
            raise UserError(f"{k}=true cannot be measured yet")
    if c["checkpoint_every"] != 1:
        raise UserError("checkpoint_every > 1 cannot be measured yet")


def wrap_model(model, c: dict):
    """The model with the recipe's model-level knobs applied (today: none beyond HF's checkpointing)."""
    return model


def step_context(c: dict):
    """A context entered around both training steps (today: none)."""
    return nullcontext()
