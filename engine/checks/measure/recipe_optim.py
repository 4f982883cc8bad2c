"""How the optimizer step runs: torch.optim's three implementations, and the step inside backward.

``optimizer_impl`` (torch/optim/adam.py, which AdamW shares; torch 2.13):

    foreach  ``_multi_tensor_adam``: in-place foreach updates plus one new list ``exp_avg_sq_sqrt =
             torch._foreach_sqrt(exp_avg_sqs)`` (one state-sized buffer, all parameters at once);
             ``step`` counters are host tensors (``torch.tensor(0.0)`` on the CPU)
    fused    ``_fused_adam``: ``torch._fused_adamw_`` updates every tensor in place (no dispatcher-visible
             buffer); ``step`` counters live on the device (``torch.zeros((), device=p.device)``, fp32)
    forloop  ``_single_tensor_adam``: per parameter ``denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)``,
             two parameter-sized buffers at once (the sqrt and the quotient) for the parameter being updated

``optimizer_in_backward`` is torchtune's ``OptimizerInBackward`` (torchtune/modules/optim.py, bd2a0fc7): one
optimizer per parameter, stepped and zeroed (``set_to_none=True``) in that parameter's
``register_post_accumulate_grad_hook``; the outer ``step()`` does nothing. Here the per-parameter optimizers
share the outer optimizer's ``state`` dict, so the harness finds every state tensor where it looks.
"""

from __future__ import annotations

import inspect

import torch

IMPL_KWARGS = {"foreach": {"foreach": True}, "fused": {"fused": True}, "forloop": {"foreach": False}}


def _params(opt: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    return [p for g in opt.param_groups for p in g["params"]]


def _hyper(opt: torch.optim.Optimizer) -> dict:
    """The constructor arguments of ``opt`` (from its param group) without the implementation flags."""
    accepted = set(inspect.signature(type(opt).__init__).parameters) - {"self", "params", "foreach", "fused"}
    return {k: v for k, v in opt.param_groups[0].items() if k in accepted}


def configure(opt: torch.optim.Optimizer | None, c: dict) -> None:
    """Re-make ``opt`` (before its first step) with ``c['optimizer_impl']``; hook it into backward if asked."""
    if opt is None or getattr(opt, "_memsim_configured", False):
        return
    if c["optimizer_impl"] != "foreach":
        hyper = _hyper(opt)
        opt.__init__(_params(opt), **hyper, **IMPL_KWARGS[c["optimizer_impl"]])  # empty state: same as a new one
    if c["optimizer_in_backward"]:
        step_in_backward(opt)
    opt._memsim_configured = True


def step_in_backward(opt: torch.optim.Optimizer) -> None:
    """torchtune's OptimizerInBackward over ``opt``'s parameters: a step and a free in each grad hook."""
    impl = {k: opt.param_groups[0][k] for k in ("foreach", "fused") if opt.param_groups[0].get(k) is not None}
    cls, hyper = type(opt), {**_hyper(opt), **impl}
    for p in _params(opt):
        inner = cls([p], **hyper)
        inner.state = opt.state  # one state dict: the harness reads opt.state

        def step_and_clear(param, inner=inner):
            inner.step()
            inner.zero_grad(set_to_none=True)

        p.register_post_accumulate_grad_hook(step_and_clear)
    opt._memsim_in_backward = True


def in_backward(opt: torch.optim.Optimizer | None) -> bool:
    """Whether ``opt`` steps inside backward (its own ``step()`` is then a no-op)."""
    return bool(getattr(opt, "_memsim_in_backward", False))


def device_steps(opt: torch.optim.Optimizer) -> bool:
    """Whether ``opt`` keeps its ``step`` counters on the device (fused or capturable Adam/AdamW)."""
    g = opt.param_groups[0]
    return bool(g.get("fused") or g.get("capturable"))
