"""Measured truth: the peak memory of real PyTorch training steps, measured without a GPU.

``measure_case(case, device)`` builds the Hugging Face model a resolved configuration describes
(GPT2LMHeadModel, LlamaForCausalLM or Qwen2ForCausalLM; peft LoRA), runs two real training steps
(zero_grad, forward with labels, backward, optimizer step; ``grad_accum`` micro-steps each) and
reports the second step's peak of live tensor bytes and what was alive at it (``breakdown.py``).

Device semantics: what ``device='fake'`` measures, and why
-----------------------------------------------------------
Wanted: CUDA's allocations, without a GPU. Tried first: ``FakeTensorMode`` with ``device='cuda'``
tensors on the CPU-only torch 2.13 build. Not workable: creating a fake CUDA tensor with
``requires_grad`` aborts the process ("PyTorch is not linked with support for cuda devices",
raised in autograd's ``InputMetadata`` from ``getDeviceGuardImpl``), because
``_ensureCUDADeviceGuardSet`` only patches the guard in a CUDA build that sees no device.

Chosen: fake *CPU* tensors (``FakeTensorMode``: the real transformers/torch Python and C++
composite code runs, every operator returns a storage-less tensor with the right shape and dtype),
with the three CUDA decisions that change memory redirected by ``cuda_semantics.py``:

* autocast uses CUDA's op lists (CPU autocast keeps ``pow``, ``softmax``, ``layer_norm``, ``sum``,
  ``rsqrt``... in bf16 where CUDA runs them in fp32); shared lower-precision ops keep the C++
  kernel and the real weight-cast cache;
* dropout is CUDA's fused ``native_dropout`` (bool mask) instead of CPU's input-dtype mask;
* ``attention='flash'`` calls ``_scaled_dot_product_flash_attention`` (fp16/bf16, no mask; keeps
  output + fp32 logsumexp + RNG state, GQA native) or ``_scaled_dot_product_efficient_attention``
  (fp32 or a mask); their meta kernels give CUDA's shapes. ``'sdpa_math'`` is the math composite,
  identical on both devices; ``'eager'`` is transformers' own matmul/softmax code.

``measure_device`` is then ``'fake-cuda'``. ``device='cpu-fake'`` measures plain CPU semantics
(``'cpu-fake'``; CPU flash kernel, no dropout allowed in it), ``device='cpu'`` runs real CPU tensors
(tiny models; the tests check it equals ``'cpu-fake'`` to the byte), ``device='cuda'`` runs on a GPU
and reads ``torch.cuda.max_memory_allocated/reserved``.

Known differences from a CUDA run that remain: allocations made inside a kernel never reach the
dispatcher (cuBLAS workspaces, flash backward's fp32 ``dq_accum`` and ``softmax_d``), so they are in
neither column; AdamW's scalar ``step`` counters are left out (host tensors on CUDA); no GradScaler
for fp16 (a few scalars); ``measured_allocated_rounded_bytes`` rounds every storage up to the
caching allocator's 512-byte blocks, which is what ``max_memory_allocated`` counts.
"""

__all__ = ["measure_case"]


def __getattr__(name: str):
    """``measure_case``, imported on first use (PEP 562): measure.py imports torch, and the package's case lists,
    CSV headers and writer (reference_*.py) load without it, as ``memsim measure`` checks its usage and the fast
    tests read the committed sets."""
    if name == "measure_case":
        from engine.checks.measure.measure import measure_case

        return measure_case
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
