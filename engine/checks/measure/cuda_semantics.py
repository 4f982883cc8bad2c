"""Make CPU fake tensors take the decisions a CUDA device would take, where they change memory.

A fake ``cuda`` tensor cannot be used on a CPU-only build of PyTorch 2.13: creating one with
``requires_grad`` aborts the process (autograd's ``InputMetadata`` asks the CUDA device guard for a
stream; ``torch._C._ensureCUDADeviceGuardSet`` only patches the guard in a CUDA build that sees no
device). So the tensors stay fake ``cpu`` tensors, and the three places where PyTorch chooses a
different path for a CUDA tensor are redirected, for the duration of the context, by Python kernels
registered with ``torch.library``:

1. Autocast policy. ``AutocastCPU`` uses its own op lists, so on CPU ``pow``, ``rsqrt``, ``exp``,
   ``softmax``, ``log_softmax``, ``layer_norm``, ``sum``... stay in bf16 while CUDA runs them in fp32
   (and ``cross_entropy_loss``, ``cat``, ``stack``... get a CPU-only policy). Every op CUDA lists gets
   CUDA's policy at the ``AutocastCPU`` key, and every op only CPU lists is passed through. The
   lower-precision ops both lists share (``linear``, ``mm``, ``matmul``, ``bmm``, ``baddbmm``,
   ``addmm``, ``scaled_dot_product_attention``...) keep PyTorch's own C++ kernel and with it the real
   autocast weight-cast cache.
2. Dropout. ``at::dropout`` takes the fused ``native_dropout`` (1-byte bool mask) only for CUDA-like
   tensors; on CPU it multiplies by a mask of the input's dtype (2 or 4 bytes). ``aten::dropout`` is
   replaced by ``native_dropout``, as on CUDA (this also covers the dropout inside math attention).
3. Scaled-dot-product attention. ``attention='flash'`` calls the CUDA kernels themselves, whose fake
   (meta) implementations give the CUDA output shapes: ``_scaled_dot_product_flash_attention`` for
   fp16/bf16 without a mask (output + fp32 logsumexp + the philox RNG state are kept, natively GQA),
   else ``_scaled_dot_product_efficient_attention`` (a mask or fp32; k/v are expanded for GQA
   first, as the math path does, since the efficient kernel takes no ``enable_gqa``).
   ``attention='sdpa_math'`` calls ``_scaled_dot_product_attention_math``, the same composite on
   both devices (it upcasts fp16/bf16 to fp32 unless ``allow_fp16_bf16_reduction_math_sdp``).

Not emulated (no dispatcher-visible allocation differs for these models): kernel-internal
workspaces (cuBLAS, the flash backward's fp32 ``dq_accum``), the GradScaler's scalars for fp16.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from engine.checks.measure.autocast_policy import POLICY, policy_kernel

_NEG_INF = float("-inf")


def _autocast_cpu_ops() -> set[str]:
    """Overload names (``"pow.Tensor_Scalar"``) that have a kernel at ``AutocastCPU`` in this build."""
    names = set()
    for qual in torch._C._dispatch_get_all_op_names():
        if qual.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(qual, "AutocastCPU"):
            names.add(qual[6:])
    return names


def register_autocast(lib: torch.library.Library) -> int:
    """Give ``AutocastCPU`` CUDA's policies; return how many kernels were registered."""
    cpu_ops = _autocast_cpu_ops()
    n = 0
    for name, policy in POLICY.items():
        if policy == "lower_precision_fp" and name in cpu_ops:
            continue  # same policy on both devices: keep the C++ kernel and its weight-cast cache
        lib.impl(name, policy_kernel(name, policy), "AutocastCPU")
        n += 1
    for name in cpu_ops - POLICY.keys():
        lib.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")  # as CUDA: no kernel
        n += 1
    return n


def cuda_dropout(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    """``at::dropout`` for a CUDA tensor (aten/src/ATen/native/Dropout.cpp, ``is_fused_kernel_acceptable``)."""
    if train and 0 < p < 1 and input.numel() > 0:
        return torch.ops.aten.native_dropout(input, p, train)[0]
    if p == 0 or not train or input.numel() == 0:
        return input
    return input * 0.0


def _float_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """sdp_utils ``convert_boolean_attn_mask``: a bool mask becomes an additive float mask."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask.logical_not(), _NEG_INF, 0.0).to(dtype)


def cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` as CUDA's backend choice would run it (flash > efficient)."""
    half = query.dtype in (torch.float16, torch.bfloat16)
    needs_grad = query.requires_grad or key.requires_grad or value.requires_grad
    if half and attn_mask is None and query.shape[-1] <= 256:
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(rep, -3), value.repeat_interleave(rep, -3)
    bias = _float_mask(attn_mask, query.dtype)
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, needs_grad, dropout_p, is_causal, scale=scale)[0]


def math_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` forced onto the math composite (same code on CPU and CUDA)."""
    mask = _float_mask(attn_mask, query.dtype)
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


@contextmanager
def unpacked_sequences():
    """transformers' packed-sequence check, answered as a real run of our inputs answers it.

    ``masking_utils.find_packed_sequence_indices`` returns None for ``arange`` position ids on real
    tensors, but it treats any fake tensor as "tracing" and returns a packed-sequence mask, which
    turns off the ``is_causal`` skip and materializes an s x s mask for every attention call (and
    rules out flash). Our inputs are never packed, so the answer is None.
    """
    import transformers.masking_utils as mu

    original = mu.find_packed_sequence_indices
    mu.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        mu.find_packed_sequence_indices = original


@contextmanager
def cuda_semantics(attention: str):
    """Within the block, CPU (fake) tensors autocast, drop out and attend as CUDA tensors would.

    ``attention``: ``'flash'`` routes SDPA to the CUDA flash/efficient kernels, ``'sdpa_math'`` to
    the math composite, ``'eager'`` leaves SDPA alone (HF's eager path never calls it).
    """
    lib = torch.library.Library("aten", "IMPL")
    try:
        register_autocast(lib)
        lib.impl("dropout", cuda_dropout, "CompositeImplicitAutograd")
        if attention in ("flash", "sdpa_math"):
            sdpa = cuda_sdpa if attention == "flash" else math_sdpa
            lib.impl("scaled_dot_product_attention", sdpa, "CompositeImplicitAutograd")
        yield
    finally:
        lib._destroy()


@contextmanager
def cpu_semantics(attention: str, device_type: str = "cpu"):
    """The device's own behaviour, with SDPA pinned to the backends ``attention`` names.

    On CPU 'flash' is the CPU flash kernel (no dropout); on a real GPU it is flash, else the
    memory-efficient kernel (fp32, masks), as CUDA's default priority picks them.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    flash = [SDPBackend.FLASH_ATTENTION] + ([SDPBackend.EFFICIENT_ATTENTION] if device_type == "cuda" else [])
    backends = {"flash": flash, "sdpa_math": [SDPBackend.MATH]}
    if attention not in backends:
        yield
        return
    with sdpa_kernel(backends[attention]):
        yield
