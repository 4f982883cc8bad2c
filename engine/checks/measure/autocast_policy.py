"""CUDA's autocast cast policies, as data, and a Python kernel that applies one.

The op lists are ``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` and ``AT_FORALL_PROMOTE`` of PyTorch's
``aten/src/ATen/autocast_mode.h``, which ``autocast_mode.cpp`` registers for the ``AutocastCUDA``
key, plus ``rms_norm`` (fp32), which the 2.13 build registers there too. ``test_measure.py`` checks
that these names are exactly the overloads the installed build has an ``AutocastCUDA`` kernel for.

The policies (``autocast_mode.h``, ``WrapFunction_``):
    lower_precision_fp   cast floating inputs to the autocast dtype (weights through the cache)
    fp32                 cast floating inputs to float32
    fp32_set_opt_dtype   if the first argument is eligible and ``dtype`` is unset, set dtype=float32
    fp32_append_dtype    call the overload that takes a dtype, with float32
    promote              cast floating inputs to the widest floating type among them
"""

from __future__ import annotations

import torch

LOWER = (
    "_convolution _convolution.deprecated conv1d conv2d conv3d conv_tbc conv_transpose1d "
    "conv_transpose2d.input conv_transpose3d.input convolution cudnn_convolution "
    "cudnn_convolution_transpose prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear "
    "addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell "
    "lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention "
    "scaled_dot_product_attention"
).split()
FP32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
    "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm group_norm frobenius_norm.dim "
    "nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss "
    "nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss "
    "margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
    "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d "
    "_upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d "
    "_upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa "
    "upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa rms_norm"
).split()
SET_OPT_DTYPE = (
    "prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm "
    "linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList"
).split()
APPEND_DTYPE = {"norm.Scalar": "ScalarOpt_dtype", "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype"}
PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add".split()
BANNED = ["binary_cross_entropy"]

POLICY = {
    **{n: "lower_precision_fp" for n in LOWER},
    **{n: "fp32" for n in FP32},
    **{n: "fp32_set_opt_dtype" for n in SET_OPT_DTYPE},
    **{n: "fp32_append_dtype" for n in APPEND_DTYPE},
    **{n: "promote" for n in PROMOTE},
    **{n: "banned" for n in BANNED},
}
_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def op_overload(name: str) -> torch._ops.OpOverload:
    """``"pow.Tensor_Scalar"`` -> ``torch.ops.aten.pow.Tensor_Scalar`` (``.default`` when no overload)."""
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _eligible(x: object) -> bool:
    """autocast_mode.h ``is_eligible``: a defined floating tensor on the device, not float64."""
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64


def _cast(x: object, dtype: torch.dtype) -> object:
    """autocast_mode.h ``cached_cast`` without the cache (fp32 casts never use it anyway)."""
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(y, dtype) for y in x)
    return x.to(dtype) if _eligible(x) and x.dtype != dtype else x


def _widest(args: tuple, kwargs: dict) -> torch.dtype:
    """autocast_mode.h ``promote_type``: the lower dtype, widened by every eligible input."""
    out = torch.get_autocast_dtype("cpu")
    for x in (*args, *kwargs.values()):
        if _eligible(x):
            out = torch.promote_types(out, x.dtype)
    return out


def policy_kernel(name: str, policy: str):
    """A Python kernel for the ``AutocastCPU`` key that applies CUDA's ``policy`` to ``name``."""
    op = op_overload(name)

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
            if policy == "lower_precision_fp":
                dt = torch.get_autocast_dtype("cpu")
                return op(*_cast(args, dt), **{k: _cast(v, dt) for k, v in kwargs.items()})
            if policy == "fp32":
                return op(*_cast(args, torch.float32), **{k: _cast(v, torch.float32) for k, v in kwargs.items()})
            if policy == "fp32_set_opt_dtype":
                return _set_opt_dtype(op, args, kwargs)
            if policy == "fp32_append_dtype":
                return _append_dtype(name, args, kwargs)
            if policy == "promote":
                dt = _widest(args, kwargs)
                return op(*_cast(args, dt), **{k: _cast(v, dt) for k, v in kwargs.items()})
            if policy == "banned":
                raise RuntimeError(f"{name} is unsafe to autocast (CUDA autocast bans it)")
            raise ValueError(f"unknown autocast policy {policy!r}")

    return kernel


def _set_opt_dtype(op, args: tuple, kwargs: dict):
    """Fill the op's ``dtype`` argument with float32 when it is unset and the first input is eligible."""
    names = [a.name for a in op._schema.arguments]
    if not (_eligible(args[0]) and "dtype" in names):
        return op(*args, **kwargs)
    i = names.index("dtype")
    if len(args) > i:
        if args[i] is None:
            args = (*args[:i], torch.float32, *args[i + 1:])
    elif kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": torch.float32}
    return op(*args, **kwargs)


def _append_dtype(name: str, args: tuple, kwargs: dict):
    """norm(...) -> norm(..., dtype=float32) through the overload that takes a dtype."""
    if not _eligible(args[0]):
        return op_overload(name)(*args, **kwargs)
    return op_overload("norm." + APPEND_DTYPE[name])(*args, dtype=torch.float32, **kwargs)
