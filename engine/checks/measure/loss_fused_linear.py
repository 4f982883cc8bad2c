"""Liger kernel's fused linear cross-entropy, re-implemented allocation for allocation in PyTorch.

Why a re-implementation: ``liger-kernel`` (0.8.5) imports Triton at module load, and its cross-entropy is a
Triton kernel, neither of which exists on a CPU build (``import liger_kernel.transformers`` fails with
``No module named 'triton'``); a fake tensor could not run a Triton kernel anyway. Everything around the
kernel is plain PyTorch, so this module repeats it: liger_kernel/ops/fused_linear_cross_entropy.py
``fused_linear_cross_entropy_forward`` / ``_backward`` and ``LigerFusedLinearCrossEntropyFunction`` (default
arguments: mean reduction, no bias, no z-loss, ``accum_dtype=None``, ``chunk_mem_const=1``), and
liger_kernel/transformers/model/loss_utils.py ``LigerForCausalLMLoss`` (what ``apply_liger_kernel_to_llama``
and the HF Trainer's ``use_liger_kernel`` run), taking the branches a CUDA device of compute capability >= 8
takes. The Triton kernel ``liger_cross_entropy_kernel`` becomes the custom op ``memsim::liger_ce_``, which
like the kernel overwrites the logits chunk with its gradient in place and writes the per-row loss, with no
dispatcher-visible allocation (its CPU body computes the same values, so the real-CPU test checks the math).

The algorithm (BT tokens, hidden H, vocabulary V, all in the forward):

    chunk = next_pow2(ceil(BT / ceil(V / H))), at most BT      # logits chunk ~ BT x H elements
    grad_input = zeros(BT, H); grad_weight = zeros(V, H) [weight dtype]; loss_1d = zeros(BT) [fp32]
    per chunk: logits = x_chunk @ W.T [chunk, V] -> kernel (logits := dloss/dlogits in place)
               grad_input[chunk] = logits @ W;  grad_weight += logits.T @ x_chunk
    loss = sum(loss_1d); saved for backward: grad_input, grad_weight   # returned as the gradients

so the logits never exist beyond one chunk, and the head's weight gradient exists from the forward on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
HALF = (torch.float16, torch.bfloat16)


@torch.library.custom_op("memsim::liger_ce_", mutates_args=("logits", "loss"))
def liger_ce_(logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor, n_non_ignore: torch.Tensor) -> None:
    """``liger_cross_entropy_kernel`` (mean reduction): per row, loss = (lse - x[y]) / n and, in place,
    x := (softmax(x) - onehot(y)) / n; ignored rows get zero loss and zero gradient."""
    x = logits.float()
    valid = target != IGNORE_INDEX
    y = target.clamp(min=0)
    n = n_non_ignore.to(torch.float32)
    lse = torch.logsumexp(x, dim=-1)
    loss.copy_(torch.where(valid, (lse - x.gather(1, y[:, None])[:, 0]) / n, 0.0))
    grad = torch.softmax(x, dim=-1) - F.one_hot(y, x.shape[-1]).to(x.dtype)
    logits.copy_(grad * (valid[:, None] / n))


@liger_ce_.register_fake
def _(logits, target, loss, n_non_ignore) -> None:
    return None


@torch.library.custom_op("memsim::addmm_fp32_", mutates_args=("acc",))
def addmm_fp32_(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)``: half operands, fp32 accumulator, no
    temporary. CUDA has the kernel (``addmm.dtype_out``); the CPU body computes the same in fp32."""
    if acc.device.type == "cuda":
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        acc.add_(a.float() @ b.float())


@addmm_fp32_.register_fake
def _(acc, a, b) -> None:
    return None


def chunking(bt: int, h: int, v: int) -> tuple[int, int]:
    """(chunk_size, num_chunks): Liger's bound of the transient logits to about BT x H elements."""
    inc_factor = -(-v // h)
    chunk = 1 << max(0, (-(-bt // inc_factor) - 1).bit_length())  # triton.next_power_of_2
    chunk = min(chunk, bt)
    return chunk, -(-bt // chunk)


def _can_use_mm_out(x: torch.Tensor, w: torch.Tensor) -> bool:
    """Liger's ``_can_use_mm_out`` on a CUDA device (grad mode is off inside the autograd Function)."""
    if x.dtype != w.dtype or x.dtype not in (*HALF, torch.float32):
        return False
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return x.dtype == torch.get_autocast_dtype(device)
    return True


def _accumulate_grad_weight(grad_weight, grad_logits, x_chunk) -> None:
    """The three CUDA (sm >= 8) branches of Liger's weight-gradient accumulation."""
    grad_logits_t = grad_logits.t()
    if grad_weight.dtype == torch.float32 and grad_logits_t.dtype in HALF:
        addmm_fp32_(grad_weight, grad_logits_t, x_chunk.to(grad_logits_t.dtype))
    elif grad_logits_t.dtype in HALF and grad_weight.dtype == grad_logits_t.dtype:
        torch.addmm(grad_weight, grad_logits_t, x_chunk.to(grad_logits_t.dtype), out=grad_weight)
    else:  # legacy: a parameter-sized temporary per chunk
        grad_weight += torch.mm(grad_logits.t(), x_chunk).float()


def forward_and_grads(x: torch.Tensor, w: torch.Tensor, target: torch.Tensor):
    """``fused_linear_cross_entropy_forward``: (loss, grad_input, grad_weight), gradients computed now."""
    bt, h = x.shape
    chunk, num_chunks = chunking(bt, h, w.shape[0])
    grad_input = torch.zeros_like(x)
    grad_weight = torch.zeros_like(w) if w.requires_grad else None
    loss_1d = torch.zeros(bt, dtype=torch.float32, device=x.device)
    n_non_ignore = (target != IGNORE_INDEX).sum()  # Liger calls .item() (a host scalar); no device bytes kept
    use_mm_out = _can_use_mm_out(x, w)
    storage = torch.empty((chunk, w.shape[0]), dtype=x.dtype, device=x.device) if use_mm_out else None
    for i in range(num_chunks):
        start, end = i * chunk, min((i + 1) * chunk, bt)
        x_chunk = x[start:end]
        if storage is not None:
            logits = storage[: end - start]
            torch.mm(x_chunk, w.t(), out=logits)
        else:
            logits = x_chunk @ w.t()
        logits = logits.contiguous()
        target_chunk = target[start:end].contiguous()
        liger_ce_(logits, target_chunk, loss_1d[start:end], n_non_ignore)
        if use_mm_out and logits.dtype == grad_input.dtype:
            torch.mm(logits, w, out=grad_input[start:end])
        else:
            grad_input[start:end] = logits @ w
        if grad_weight is not None:
            _accumulate_grad_weight(grad_weight, logits, x_chunk)
        del logits, x_chunk, target_chunk
    del storage
    loss = torch.sum(loss_1d)
    grad_weight = grad_weight.to(w.dtype) if grad_weight is not None else None
    return loss, grad_input, grad_weight


class FusedLinearCrossEntropy(torch.autograd.Function):
    """``LigerFusedLinearCrossEntropyFunction`` (mean reduction): gradients from the forward, scaled in backward."""

    @staticmethod
    def forward(ctx, x, w, target):
        loss, grad_input, grad_weight = forward_and_grads(x, w, target)
        ctx.save_for_backward(grad_input.detach(), grad_weight.detach() if grad_weight is not None else None)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        # fused_linear_cross_entropy_backward: element_mul_kernel scales in place when grad_output != 1
        grad_input.mul_(grad_output)
        if grad_weight is not None:
            grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None


def loss(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``LigerForCausalLMLoss`` with ``shift_labels`` given: flatten, then the fused function."""
    return FusedLinearCrossEntropy.apply(h.view(-1, h.shape[-1]), weight, labels.reshape(-1))
