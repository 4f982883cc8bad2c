"""``softmax_saves_input``: the traced step with PyTorch before 1.11's softmax and log_softmax nodes.

Before PyTorch 1.11 the backward formulas of ``_softmax`` and ``_log_softmax`` (tools/autograd/derivatives.yaml)
passed the forward's input to ``_softmax_backward_data(grad, result, dim, self)``, so autograd saved ``self`` beside
``result`` although the kernels never read it (pytorch/pytorch #49600, #64000); 1.11 passes its dtype instead
(``self.scalar_type()``), and transformers' pytorch_utils.softmax_backward_data switches on
``is_torch_less_than_1_11``. This build's nodes save the output only, so within ``kept_inputs()`` the functions
the models call (``F.softmax``, ``F.log_softmax``, and ``F.cross_entropy`` as its log_softmax then nll_loss) run
through a node that saves both, as that era's did:

- the tensor saved is the one the kernel takes: autocast gives softmax, log_softmax and cross_entropy the dtype fp32
  when none is given (``fp32_set_opt_dtype``, aten/src/ATen/autocast_mode.cpp), and ``at::softmax(x, dim, dtype)``
  (aten/src/ATen/native/SoftMax.cpp at 1.10) runs an fp16 ``x`` with dtype fp32 in the kernel (``half_to_float``:
  the fp16 ``x`` kept) and converts any other ``x`` to the dtype first (``x.toType(dtype)``: the copy kept);
- the output and the gradient are this build's own kernels' (``_softmax_backward_data`` with the input's dtype).

What calls the kernels from C++ (``scaled_dot_product_attention``'s math backend, compiled code) is untouched, as
the model leaves it (those came with PyTorch 2).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F

HALF = (torch.float16, torch.bfloat16)


class _KeepsInput(torch.autograd.Function):
    """softmax or log_softmax over ``dim`` whose node keeps its input and its output, as before PyTorch 1.11."""

    @staticmethod
    def forward(ctx, x, dtype, dim, log, kernels):
        with torch.autocast(x.device.type, enabled=False):
            y = kernels["log_softmax" if log else "softmax"](x, dim=dim, dtype=dtype)
        ctx.save_for_backward(x, y)
        ctx.dim, ctx.log = dim, log
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        backward = torch._log_softmax_backward_data if ctx.log else torch._softmax_backward_data
        return backward(grad, y, ctx.dim, x.dtype), None, None, None, None


def _as_kernel_takes(x: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.dtype | None]:
    """The input as the kernel receives it, and the dtype it is given (above)."""
    if dtype is None and x.dtype in HALF and torch.is_autocast_enabled(x.device.type):
        dtype = torch.float32
    if dtype is not None and x.dtype != dtype and not (x.dtype == torch.float16 and dtype == torch.float32):
        x = x.to(dtype)
    return x, dtype


@contextmanager
def kept_inputs():
    """F.softmax, F.log_softmax and F.cross_entropy as PyTorch before 1.11 saved them, for the block's duration."""
    kernels = {"softmax": F.softmax, "log_softmax": F.log_softmax, "cross_entropy": F.cross_entropy}

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        dim = F._get_softmax_dim("softmax", input.dim(), _stacklevel) if dim is None else dim
        return _KeepsInput.apply(*_as_kernel_takes(input, dtype), dim, False, kernels)

    def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
        dim = F._get_softmax_dim("log_softmax", input.dim(), _stacklevel) if dim is None else dim
        return _KeepsInput.apply(*_as_kernel_takes(input, dtype), dim, True, kernels)

    def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                      reduction="mean", label_smoothing=0.0):
        if label_smoothing or size_average is not None or reduce is not None or target.is_floating_point():
            return kernels["cross_entropy"](input, target, weight, size_average, ignore_index, reduce, reduction,
                                            label_smoothing)
        classes = 1 if input.dim() > 1 else 0
        log_probs = _KeepsInput.apply(*_as_kernel_takes(input, None), classes, True, kernels)
        return F.nll_loss(log_probs, target, weight, ignore_index=ignore_index, reduction=reduction)

    F.softmax, F.log_softmax, F.cross_entropy = softmax, log_softmax, cross_entropy
    try:
        yield
    finally:
        F.softmax, F.log_softmax, F.cross_entropy = (kernels[k] for k in ("softmax", "log_softmax", "cross_entropy"))
