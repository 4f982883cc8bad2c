"""Mixture-of-experts models under fake tensors: CUDA's grouped matmul, and the routing a fake run cannot decide.

transformers runs the experts with ``grouped_mm_experts_forward`` (integrations/moe.py): the routed (token,
expert) pairs are sorted by expert and go through ``torch.nn.functional.grouped_mm`` with per-expert offsets,
so every tensor's shape is fixed by the number of pairs, s*b*top_k, whatever the routing. Two things stand
between that code and a fake run:

1. ``grouped_mm`` is not autocast-enabled, and transformers casts its input to the *weight's* dtype
   (``_grouped_mm``: ``input.to(weight.dtype)``), so under ``amp_*`` with fp32 master weights the experts run
   in fp32. On CUDA ``_grouped_mm_cuda`` takes the bf16 fast path only for bf16 inputs and otherwise runs
   ``_grouped_mm_fallback`` (aten/src/ATen/native/cuda/GroupedBlas.cpp), so fp32 works; the meta kernel of
   torch 2.13 (``_meta_registrations._meta_grouped_mm_common``) still refuses anything but bf16.
   ``cuda_grouped_mm`` gives the meta kernel CUDA's rule for unscaled inputs: the output of the fallback,
   ``_create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype or mat_a.dtype)``.
2. Expert parallelism (transformers' ``AllToAllEP``, what ``DistributedConfig(ep_size=...)`` runs in training)
   reads the all-to-all split sizes back to the host (``.tolist()``): how many (token, expert) pairs this rank
   sends to each rank and receives from each. A fake tensor has no values, so the routing must be given.
   ``routed_splits`` answers that one read with the load ``capacity_factor`` describes (CONFIG.md: expert
   capacity over the average load, 1.0 = dropless average routing): this rank sends its n = s*b*top_k pairs
   evenly to the ep ranks and receives ``ceil(capacity_factor * n / ep)`` pairs from each, i.e. its experts
   get ``capacity_factor`` times the average load. Everything downstream (the received tokens, the experts'
   activations, the combine) is transformers' own code on those shapes.
"""

from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager

import torch


@contextmanager
def cuda_grouped_mm():
    """The fake/meta ``_grouped_mm`` accepts what CUDA's fallback accepts (fp32, fp16), see module docstring."""
    import torch._meta_registrations as meta

    original = meta._meta_grouped_mm_common

    def common(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None, out_dtype=None,
               use_fast_accum=False):
        if scale_a is None and scale_b is None and mat_a.dtype != torch.bfloat16:
            torch._check(mat_a.dtype == mat_b.dtype, lambda: "grouped_mm: mat_a and mat_b dtypes differ")
            return meta._create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)
        return original(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype, use_fast_accum)

    meta._meta_grouped_mm_common = common
    try:
        yield
    finally:
        meta._meta_grouped_mm_common = original


def splits(pairs: int, ep: int, capacity_factor: float) -> tuple[list[int], list[int]]:
    """(send, receive) pair counts per peer rank: ``pairs`` sent evenly, ``capacity_factor`` x average received.

    Examples
    --------
    >>> splits(10, 4, 1.0)
    ([3, 3, 2, 2], [3, 3, 3, 3])
    """
    send = [pairs // ep + (1 if i < pairs % ep else 0) for i in range(ep)]
    recv = [math.ceil(capacity_factor * pairs / ep)] * ep
    return send, recv


@contextmanager
def routed_splits(capacity_factor: float):
    """transformers' ``AllToAllEP`` reads its split sizes from the routing given by ``capacity_factor``."""
    from torch._subclasses.fake_tensor import FakeTensor
    from transformers.distributed.expert_parallel import AllToAllEP

    dispatch = AllToAllEP._dispatch_tokens

    def _dispatch_tokens(self, hidden_states, top_k_index, top_k_weights):
        ep, tp = self.ep_mesh.size(), self.tp_mesh.size()
        pairs = -(-hidden_states.size(0) // tp) * top_k_index.size(-1)  # this rank's slice of the batch
        send, recv = splits(pairs, ep, capacity_factor)
        tolist = FakeTensor.tolist

        def answer(t):
            if tuple(t.shape) == (2, ep) and t.dtype == torch.long:
                return [send, recv]
            return tolist(t)

        FakeTensor.tolist = answer
        try:
            return dispatch(self, hidden_states, top_k_index, top_k_weights)
        finally:
            FakeTensor.tolist = tolist

    AllToAllEP._dispatch_tokens = _dispatch_tokens
    try:
        yield
    finally:
        AllToAllEP._dispatch_tokens = dispatch


@contextmanager
def mla_attention():
    """CUDA's SDPA choice when the value head differs from the query/key head (DeepSeek's MLA: 128 vs 192).

    ``sdp_utils.cpp`` refuses flash attention unless q, k and v have one head size
    (``check_head_dim_size_flash``) and takes the memory-efficient kernel, which allows a different value
    size; ``cuda_semantics.cuda_sdpa`` only looks at the query's, so for that case this calls the efficient
    kernel as CUDA does (MLA has as many key/value heads as query heads: no GQA expansion).
    """
    from engine.checks.measure import cuda_semantics

    original = cuda_semantics.cuda_sdpa

    def cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if value.shape[-1] == query.shape[-1]:
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        needs_grad = query.requires_grad or key.requires_grad or value.requires_grad
        bias = cuda_semantics._float_mask(attn_mask, query.dtype)
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, needs_grad, dropout_p, is_causal, scale=scale)[0]

    cuda_semantics.cuda_sdpa = cuda_sdpa
    try:
        yield
    finally:
        cuda_semantics.cuda_sdpa = original


@contextmanager
def moe_semantics(c: dict):
    """The above, as a case needs them (entered before ``cuda_semantics``)."""
    with ExitStack() as stack:
        if c["n_experts"]:
            stack.enter_context(cuda_grouped_mm())
            if c["ep"] > 1:
                stack.enter_context(routed_splits(c["capacity_factor"]))
        if c["kv_lora_rank"]:
            stack.enter_context(mla_attention())
        yield
